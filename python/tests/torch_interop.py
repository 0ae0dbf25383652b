"""torch CPU tensors through the bindings, as a plain script: run by test_torch_interop.py with
another python3 that has torch (Debian's python3-torch), or directly:
    PYTHONPATH=build/python-site /usr/bin/python3 python/tests/torch_interop.py
"""

import numpy as np
import torch

import kvcheck


def expect(exc, pattern, fn, *args):
    try:
        fn(*args)
    except exc as e:
        assert pattern in str(e), f"{pattern!r} not in {e}"
        return
    raise AssertionError(f"{fn.__name__}{args!r}: no {exc.__name__}")


x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
# Read in place, the same numbers as through numpy.
assert np.array_equal(kvcheck.bound(x, "int4/token"), kvcheck.bound(x.numpy(), "int4/token"))
x_hat = torch.from_numpy(kvcheck.dequantize(kvcheck.quantize(x, "int4/token")))
kvcheck.check_quantized(x, x_hat, "int4/token")
bad = x_hat.clone()
bad[3, 5] += 1.0
expect(kvcheck.BoundViolation, "x_hat[3, 5]", kvcheck.check_quantized, x, bad, "int4/token")
# Wrong dtype, stride; a tensor that cannot leave through DLPack (meta) is not an array.
expect(TypeError, "x must have dtype float32, got bfloat16", kvcheck.quantize, x.to(torch.bfloat16), "int4/token")
expect(ValueError, "x must be C-contiguous", kvcheck.quantize, x.t(), "int4/token")
expect(TypeError, "x must be", kvcheck.quantize, torch.ones((4, 8), device="meta"), "int4/token")
# Attention and the oracle on torch tensors.
q, k, v = torch.randn(2, 32), torch.randn(10, 32), torch.randn(10, 32)
out = torch.from_numpy(kvcheck.attention(q, k, v).astype(np.float32))
assert kvcheck.check_decode_step(q, k, v, torch.arange(10), out).ok
print(f"torch {torch.__version__}: interop checks passed")
