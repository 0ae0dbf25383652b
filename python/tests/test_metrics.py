"""KL, the llama.cpp statistics, perplexity ratio and the report gate through the bindings."""

import math

import numpy as np
import pytest

import kvcheck


def test_kl_against_a_hand_computed_value():
    # P_ref = (1/2, 1/2), P = (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2 = 1/2 ln(4/3).
    ref = np.array([[0.0, 0.0]], np.float32)
    other = np.array([[math.log(3.0), 0.0]], np.float32)
    kl = kvcheck.kl_divergence(ref, other)
    assert kl.shape == (1,) and kl[0] == pytest.approx(0.5 * math.log(4 / 3), rel=1e-7)
    assert kvcheck.kl_divergence(ref, ref)[0] == 0.0
    # A token the reference gives mass and the other none: +inf.
    assert math.isinf(kvcheck.kl_divergence(ref, np.array([[0.0, -np.inf]], np.float32))[0])


def test_summary_follows_llama_cpp():
    rng = np.random.default_rng(5)
    print("seed 5")
    ref = rng.standard_normal((200, 50)).astype(np.float32)
    other = (ref + 0.3 * rng.standard_normal((200, 50))).astype(np.float32)
    targets = rng.integers(0, 50, 200)
    s = kvcheck.compare_logits(ref, other, targets=targets)
    kl = kvcheck.kl_divergence(ref, other)
    np.testing.assert_array_equal(s["kl"], kl)
    assert s["positions"] == 200
    assert s["kl_mean"] == pytest.approx(kl.mean(), rel=1e-12)
    assert s["kl_stderr"] == pytest.approx(kl.std(ddof=1) / math.sqrt(200), rel=1e-9)
    for key, p in [("kl_p99", 99), ("kl_p95", 95), ("kl_p90", 90), ("kl_median", 50), ("kl_max", 100)]:
        assert s[key] == pytest.approx(np.percentile(kl, p), rel=1e-12), key
    assert s["top1_agreement"] == pytest.approx(np.mean(ref.argmax(1) == other.argmax(1)))
    p_ref = np.exp(ref - ref.max(1, keepdims=True)); p_ref /= p_ref.sum(1, keepdims=True)
    p_oth = np.exp(other - other.max(1, keepdims=True)); p_oth /= p_oth.sum(1, keepdims=True)
    top = ref.argmax(1)
    rms = math.sqrt(np.mean((p_oth[np.arange(200), top] - p_ref[np.arange(200), top]) ** 2))
    assert s["rms_delta_p"] == pytest.approx(rms, rel=1e-6)
    nll = lambda p: -np.mean(np.log(p[np.arange(200), targets]))  # noqa: E731
    assert s["perplexity_ratio"] == pytest.approx(math.exp(nll(p_oth) - nll(p_ref)), rel=1e-6)


def test_gate_verdict_uses_the_report_tolerances():
    ref = np.array([[0.0, 0.0]] * 4, np.float32)
    other = np.array([[math.log(3.0), 0.0]] * 4, np.float32)
    targets = np.zeros(4, np.int64)
    kl = 0.5 * math.log(4 / 3)
    ratio = 2 / 3  # perplexity 4/3 against 2
    ok = kvcheck.gate(ref, other, targets, baseline_kl_mean=kl, baseline_perplexity_ratio=ratio)
    assert ok["passed"] and ok["regressions"] == [] and ok["table"] == ""
    # 5% relative plus 1e-7: a baseline 6% lower makes this a KL regression.
    bad = kvcheck.gate(ref, other, targets, baseline_kl_mean=kl / 1.06, baseline_perplexity_ratio=ratio)
    assert not bad["passed"] and [r["metric"] for r in bad["regressions"]] == ["kl_mean"]
    assert bad["regressions"][0]["allowed"] == pytest.approx(kl / 1.06 * 1.05 + 1e-7)
    worse = kvcheck.gate(ref, other, targets, baseline_kl_mean=kl, baseline_perplexity_ratio=ratio / 1.01)
    assert [r["metric"] for r in worse["regressions"]] == ["perplexity_ratio"]


def test_topk_agreement_is_the_overlap_of_the_k_largest():
    rng = np.random.default_rng(11)
    print("seed 11")
    ref = rng.standard_normal((64, 40)).astype(np.float32)
    other = (ref + 0.5 * rng.standard_normal((64, 40))).astype(np.float32)
    for k in (1, 5, 40):
        got = kvcheck.topk_agreement(ref, other, k)
        top_ref = np.argsort(-ref, axis=1, kind="stable")[:, :k]
        top_oth = np.argsort(-other, axis=1, kind="stable")[:, :k]
        want = [len(set(a) & set(b)) / k for a, b in zip(top_ref, top_oth)]
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
    np.testing.assert_array_equal(kvcheck.topk_agreement(ref, other, 1), (ref.argmax(1) == other.argmax(1)).astype(float))
    assert kvcheck.topk_agreement(ref, other, 40).min() == 1.0
    with pytest.raises(ValueError, match="k must be in"):
        kvcheck.topk_agreement(ref, other, 41)
    with pytest.raises(ValueError, match="k must be in"):
        kvcheck.topk_agreement(ref, other, 0)
