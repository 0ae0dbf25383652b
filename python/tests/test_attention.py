"""Exact attention and the per-step oracle through the bindings."""

import numpy as np
import pytest

import kvcheck

D = 64


def inputs(seed=0, group=4, n=48):
    rng = np.random.default_rng(seed)
    print(f"seed {seed}")
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(group, D), f(n, D), f(n, D)


def test_attention_is_softmax_weighted_values():
    q, k, v = inputs()
    s = (q.astype(np.float64) @ k.T.astype(np.float64)) / np.sqrt(D)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    out = kvcheck.attention(q, k, v)
    assert out.dtype == np.float64 and out.shape == (4, D)
    np.testing.assert_allclose(out, p @ v.astype(np.float64), rtol=1e-12, atol=1e-14)
    # One key: the output is its value exactly; a 1-D query is one head.
    np.testing.assert_array_equal(kvcheck.attention(q[0], k[:1], v[:1]), v[0].astype(np.float64))


def engine(q, k, v, held, fmt):
    """A float32 engine: attention over the held rows as `fmt` stores them."""
    hk = kvcheck.dequantize(kvcheck.quantize(np.ascontiguousarray(k[held]), fmt))
    hv = kvcheck.dequantize(kvcheck.quantize(np.ascontiguousarray(v[held]), fmt))
    s = (q @ hk.T) / np.float32(np.sqrt(D))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return ((p / p.sum(axis=1, keepdims=True)) @ hv).astype(np.float32)


@pytest.mark.parametrize("fmt", ["fp16", "int8/token", "int4/token", "int4/group-g32"])
def test_a_correct_compressed_step_holds(fmt):
    q, k, v = inputs()
    held = np.r_[0:4, 20:48]  # sinks and a window: 16 tokens pruned
    c = kvcheck.check_decode_step(q, k, v, held, engine(q, k, v, held, fmt), key_format=fmt, value_format=fmt)
    assert c.ok and c.held_error <= c.held_tolerance and c.full_error <= c.full_bound
    assert c.pruned_mass > 0 and c.prune_bound > 0
    if fmt != "fp16":
        assert c.quant_bound > 0


def test_an_output_perturbed_beyond_the_bound_is_flagged_on_its_head():
    q, k, v = inputs(seed=2)
    held = np.r_[0:4, 20:48]
    out = engine(q, k, v, held, "int4/token")
    ok = kvcheck.check_decode_step(q, k, v, held, out, key_format="int4/token", value_format="int4/token")
    # Just over the held-set tolerance, on head 2: the held check fails, the full bound still holds.
    bad = out.copy()
    bad[2, 7] += np.float32(4 * ok.held_tolerance + 1e-6)
    c = kvcheck.check_decode_step(q, k, v, held, bad, key_format="int4/token", value_format="int4/token",
                                  raise_on_violation=False)
    assert not c.held_ok and c.full_ok and c.worst_head == 2
    assert c.worst_element == (2, 7) and c.worst_against == "held set"
    # Beyond the full bound on head 1: both fail, and the exception names the head.
    bad = out.copy()
    bad[1, 0] += np.float32(2 * ok.full_bound)
    with pytest.raises(kvcheck.OracleViolation, match="worst query head 1") as e:
        kvcheck.check_decode_step(q, k, v, held, bad, key_format="int4/token", value_format="int4/token")
    assert not e.value.check.full_ok and e.value.check.full_error > e.value.check.full_bound
    assert e.value.check.worst_element == (1, 0) and "output[1, 0]" in str(e.value)
    assert e.value.check.worst_against == "held set"  # both fail; the held check is named first


def test_held_rows_can_be_given_instead_of_a_format():
    q, k, v = inputs(seed=4)
    held = np.arange(10, 48)
    out = engine(q, k, v, held, "int8/token")
    hk = kvcheck.dequantize(kvcheck.quantize(np.ascontiguousarray(k[held]), "int8/token"))
    hv = kvcheck.dequantize(kvcheck.quantize(np.ascontiguousarray(v[held]), "int8/token"))
    assert kvcheck.check_decode_step(q, k, v, held, out, held_keys=hk, held_values=hv).ok
    # The engine claims fp32 rows but computed on int8 ones: the held check catches it.
    c = kvcheck.check_decode_step(q, k, v, held, out, raise_on_violation=False)
    assert not c.held_ok
    with pytest.raises(ValueError, match="not both"):
        kvcheck.check_decode_step(q, k, v, held, out, held_keys=hk, key_format="int8/token")
