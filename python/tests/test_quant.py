"""Quantization through the bindings: kvcheck's quantizers, their bounds, and check_quantized."""

import numpy as np
import pytest

import kvcheck

FORMATS = ["int8/token", "int4/token", "int2/token", "int4/group-g32", "int4/channel-G32", "fp8-e4m3", "fp16", "fp32"]


def block(seed=0, tokens=64, head_dim=128, scale=1.0):
    rng = np.random.default_rng(seed)
    print(f"seed {seed}")
    return (rng.standard_normal((tokens, head_dim)) * scale).astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantized_is_within_the_bound_and_the_bound_is_tight(fmt):
    x = block()
    x_hat = kvcheck.dequantize(kvcheck.quantize(x, fmt))
    b = kvcheck.bound(x, fmt)
    assert x_hat.shape == x.shape and x_hat.dtype == np.float32 and b.dtype == np.float64
    assert np.all(np.abs(x.astype(np.float64) - x_hat) <= b)
    report = kvcheck.check_quantized(x, x_hat, fmt)
    if fmt.startswith("int"):
        # Tight: some element uses nearly all of scale/2 (8192 elements, uniform rounding error).
        assert report["share_of_bound"] > 0.9
    if fmt == "fp32":
        assert np.array_equal(x_hat, x) and not b.any()


def test_int4_metadata_is_the_documented_layout():
    x = block(tokens=8, head_dim=16)
    q = kvcheck.quantize(x, "int4/token")
    assert q.codes.shape == (8, 8) and q.codes.dtype == np.uint8  # two codes a byte
    assert q.scales.shape == (8,) and q.scales.dtype == np.float16
    # x̂ = code * scale + zero, first channel in the low nibble.
    codes = np.stack([q.codes & 0xF, q.codes >> 4], axis=-1).reshape(8, 16).astype(np.float32)
    manual = codes * q.scales.astype(np.float32)[:, None] + q.zeros.astype(np.float32)[:, None]
    assert np.array_equal(manual, kvcheck.dequantize(q))
    # min-max: the scale covers each row's range in 15 steps (rounded up to fp16).
    rng_ = x.max(axis=1) - q.zeros.astype(np.float32)
    assert np.all(q.scales.astype(np.float32) * 15 >= rng_ * (1 - 1e-6))


def test_per_channel_metadata_shape_and_fp8_scale():
    x = block(tokens=64, head_dim=32)
    q = kvcheck.quantize(x, "int2/channel-G32")
    assert q.scales.shape == (2, 32)
    f = kvcheck.quantize(x, "fp8-e4m3")
    assert f.fp8_scale == pytest.approx(np.abs(x).max() / 448, rel=1e-6)


def test_leading_dims_are_tokens_for_per_token_formats():
    x = block(tokens=24).reshape(2, 3, 4, 128)
    x_hat = kvcheck.dequantize(kvcheck.quantize(x, "int8/token"))
    assert x_hat.shape == x.shape
    kvcheck.check_quantized(x, x_hat, "int8/token")


def test_check_quantized_names_the_worst_element_and_its_bound():
    x = block()
    x_hat = kvcheck.dequantize(kvcheck.quantize(x, "int4/token"))
    b = kvcheck.bound(x, "int4/token")
    bad = x_hat.copy()
    bad[3, 17] = x[3, 17] + 1.5 * b[3, 17]
    bad[9, 2] = x[9, 2] - 1.1 * b[9, 2]
    with pytest.raises(kvcheck.BoundViolation) as e:
        kvcheck.check_quantized(x, bad, "int4/token")
    assert e.value.index == (3, 17)
    assert e.value.bound == pytest.approx(b[3, 17], rel=1e-6)
    assert "x_hat[3, 17]" in str(e.value) and "bound" in str(e.value)
    assert isinstance(e.value, AssertionError)  # pytest shows it as a failed assertion


def test_a_nan_is_a_violation():
    x = block(tokens=4, head_dim=8)
    x_hat = kvcheck.dequantize(kvcheck.quantize(x, "int8/token"))
    x_hat[1, 1] = np.nan
    with pytest.raises(kvcheck.BoundViolation) as e:
        kvcheck.check_quantized(x, x_hat, "int8/token")
    assert e.value.index == (1, 1)


def test_planted_off_by_one_scale_is_caught():
    # A hand-written INT4 quantizer that divides the range by 2^4 instead of 2^4 - 1: the largest
    # element of each row then clamps at code 15 and misses by a whole step.
    x = block(seed=3)
    lo = x.min(axis=1, keepdims=True)
    scale = (x.max(axis=1, keepdims=True) - lo) / 16
    codes = np.clip(np.round((x - lo) / scale), 0, 15)
    x_hat = (codes * scale + lo).astype(np.float32)
    with pytest.raises(kvcheck.BoundViolation) as e:
        kvcheck.check_quantized(x, x_hat, "int4/token")
    row = e.value.index[0]
    assert e.value.index[1] == int(np.argmax(x[row]))  # the row's maximum
    # The same quantizer with the right level count passes.
    scale = (x.max(axis=1, keepdims=True) - lo) / 15
    x_hat = (np.clip(np.round((x - lo) / scale), 0, 15) * scale + lo).astype(np.float32)
    assert kvcheck.check_quantized(x, x_hat, "int4/token")["ok"]


def test_library_errors_come_back_as_value_errors():
    x = block(tokens=4, head_dim=8)
    x[2, 3] = np.inf
    with pytest.raises(ValueError, match="token 2, channel 3"):
        kvcheck.quantize(x, "int8/token")
    with pytest.raises(ValueError, match="multiple of 32"):
        kvcheck.quantize(block(tokens=40), "int4/channel-G32")


def test_the_kv_oracle_fixture_is_the_package(kv_oracle):
    # What a kernel author's test looks like with the plugin's fixture.
    x = block(seed=7, tokens=32, head_dim=64)
    x_hat = x.copy()
    x_hat[5, 9] += 1.0  # far outside any int8 bound
    with pytest.raises(kv_oracle.BoundViolation, match=r"x_hat\[5, 9\]"):
        kv_oracle.check_quantized(x, x_hat, "int8/token")
