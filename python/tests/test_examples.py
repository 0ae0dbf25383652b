"""The two worked examples of python/examples/: each passes as written, and its planted bug is
caught with a message naming the element (or query head) and the bound."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_example

import kvcheck


def test_int4_quantizer_passes_and_its_planted_bug_is_caught():
    ex = load_example("int4_kv_quantizer")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 128)).astype(np.float32)
    assert ex.check(x)["ok"]
    with pytest.raises(kvcheck.BoundViolation) as e:
        ex.check(x, planted_bug=True)
    row, col = e.value.index
    assert col == int(np.argmax(x[row]))  # a row's maximum, clamped one step short
    assert e.value.error > e.value.bound and f"x_hat[{row}, {col}]" in str(e.value)


def test_decode_attention_passes_and_its_planted_bug_is_caught():
    ex = load_example("compressed_decode_attention")
    for seed in range(3):
        assert ex.step(seed=seed).ok
    with pytest.raises(kvcheck.OracleViolation, match=r"held-set check failed, worst query head \d") as e:
        ex.step(planted_bug=True)
    assert not e.value.check.held_ok and e.value.check.held_error > e.value.check.held_tolerance
    h, c = e.value.check.worst_element
    assert f"output[{h}, {c}]" in str(e.value) and "tolerance" in str(e.value)


@pytest.mark.parametrize("script", ["int4_kv_quantizer.py", "compressed_decode_attention.py"])
def test_examples_run_as_scripts(script):
    path = ROOT / "python" / "examples" / script
    ok = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, str(path), "--bug"], capture_output=True, text=True)
    assert bad.returncode != 0 and "bound" in bad.stderr


def test_readme_example_runs(monkeypatch):
    text = (ROOT / "README.md").read_text()
    block = text.split("## From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    exec(compile(block, "README.md (From Python)", "exec"), {})
