"""bridges/hf_transformers.py without torch: argument handling, the quantized-cache API choice
(transformers 5.x's QuantizedCache(backend=, config=) and the older QuantizedCacheConfig), and the
output writer held end to end by kvcheck compare. The model runs belong to the GPU machine."""

import importlib.util
import json
import subprocess
import types

import numpy as np
import pytest

from conftest import ROOT

import kvcheck

CLI = ROOT / "build" / "bin" / "kvcheck"


@pytest.fixture(scope="module")
def bridge():
    spec = importlib.util.spec_from_file_location("hf_transformers", ROOT / "bridges" / "hf_transformers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # must not need torch or transformers
    return module


def test_arguments(bridge):
    a = bridge.parse_args(["--model", "m", "--items", "i", "--out", "o", "--cache", "quantized", "--backend", "hqq"])
    assert (a.cache, a.backend, a.nbits, a.residual_length, a.device) == ("quantized", "hqq", 4, 0, None)
    for bad in (["--backend", "awq"], ["--nbits", "3"], ["--residual-length", "-1"], ["--press", "magic"],
                ["--compression-ratio", "1.5"]):
        with pytest.raises(SystemExit) as e:
            bridge.parse_args(["--model", "m", "--items", "i", "--out", "o", *bad])
        assert e.value.code == 2


def fake_transformers(version, api):
    calls = []
    t = types.SimpleNamespace(__version__=version)
    if api == "current":
        class QuantizedCache:
            def __init__(self, backend, config, nbits=4, axis_key=0, axis_value=0, q_group_size=64, residual_length=128):
                calls.append(("QuantizedCache", backend, config, nbits, residual_length))
        t.QuantizedCache = QuantizedCache
    elif api == "old":
        class QuantizedCache:  # the old base class takes a cache_config only
            def __init__(self, cache_config):
                pass

        t.QuantizedCache = QuantizedCache
        t.QuantizedCacheConfig = lambda **kw: ("config", kw)
        t.QuantoQuantizedCache = lambda cache_config: calls.append(("Quanto", cache_config))
        t.HQQQuantizedCache = lambda cache_config: calls.append(("HQQ", cache_config))
    return t, calls


def test_quantized_cache_uses_the_current_api_on_transformers_5(bridge):
    args = bridge.parse_args(["--model", "m", "--items", "i", "--out", "o", "--cache", "quantized", "--nbits", "2",
                              "--residual-length", "16"])
    model = types.SimpleNamespace(config="CONFIG", dtype="float32", device="cpu")
    t, calls = fake_transformers("5.0.0", "current")
    bridge.make_quantized_cache(t, args, model)
    assert calls == [("QuantizedCache", "quanto", "CONFIG", 2, 16)]
    t, calls = fake_transformers("4.45.0", "old")
    args.backend = "hqq"
    bridge.make_quantized_cache(t, args, model)
    assert calls[0][0] == "HQQ" and calls[0][1][1]["nbits"] == 2
    t, _ = fake_transformers("9.0.0", "none")
    with pytest.raises(SystemExit, match="transformers 9.0.0: no quantized KV cache API"):
        bridge.make_quantized_cache(t, args, model)


@pytest.mark.skipif(not CLI.exists(), reason="build/bin/kvcheck not built (cmake --build build)")
def test_output_writer_is_what_compare_reads(bridge, tmp_path):
    # The reference's own logits through the writer: compare must find KL 0 and top-1 1.
    items_file = tmp_path / "items.jsonl"
    subprocess.run([str(CLI), "export", "--quick", "--out", str(items_file)], check=True, capture_output=True)
    header, items = bridge.read_items(str(items_file))
    model = kvcheck.ReferenceModel(ROOT / "datasets" / "models" / "kvcheck-tiny")

    def rows_of(item):
        ids = item["prompt_ids"] + item["continuation_ids"][:-1]
        return model.logits(ids)[len(item["prompt_ids"]) - 1:]

    def generated_of(item):  # retrieval is scored on the ids alone; one greedy token, then padding
        first = int(model.logits(item["prompt_ids"])[-1].argmax())
        return [first] + [0] * (item["max_new_tokens"] - 1)

    bridge.write_outputs(str(tmp_path / "out"), items, rows_of, generated_of)
    subprocess.run([str(CLI), "compare", "--items", str(items_file), "--engine-output", str(tmp_path / "out"),
                    "--name", "writer", "--out", str(tmp_path / "cmp")], check=True, capture_output=True)
    row = json.loads((tmp_path / "cmp" / "report.json").read_text())["rows"][0]
    assert row["kl_mean"] < 1e-9 and row["top1_agreement"] == 1.0, row
    assert row["retrieval_items"] == 12
    with pytest.raises(SystemExit, match="logits rows"):
        bridge.write_outputs(str(tmp_path / "bad"), items[:1], lambda item: np.zeros((1, 2048)), generated_of)


def test_items_reader_rejects_other_files(bridge, tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"format": "something-else"}\n')
    with pytest.raises(SystemExit, match="not a kvcheck items file"):
        bridge.read_items(str(f))
