"""Bad input: every argument is checked; the exception names it and what was expected. Nothing
is converted or copied to fit."""

import numpy as np
import pytest

import kvcheck

X = np.ones((4, 8), dtype=np.float32)
Q = np.ones((2, 8), dtype=np.float32)
K = np.ones((5, 8), dtype=np.float32)


def test_wrong_dtype():
    with pytest.raises(TypeError, match=r"kvcheck.quantize: x must have dtype float32, got float64"):
        kvcheck.quantize(X.astype(np.float64), "int8/token")
    with pytest.raises(TypeError, match=r"x_hat must have dtype float32, got float16"):
        kvcheck.check_quantized(X, X.astype(np.float16), "int8/token")
    with pytest.raises(TypeError, match=r"held must have dtype int32 or int64, got float32"):
        kvcheck.check_decode_step(Q, K, K, np.arange(5, dtype=np.float32), Q)
    with pytest.raises(TypeError, match=r"logits must have dtype float32, got int64"):
        kvcheck.kl_divergence(X, np.ones((4, 8), dtype=np.int64))


def test_not_an_array():
    with pytest.raises(TypeError, match=r"kvcheck.quantize: x must be an array .* got list"):
        kvcheck.quantize([[1.0, 2.0]], "int8/token")
    with pytest.raises(TypeError, match=r"keys must be an array .* got NoneType"):
        kvcheck.attention(Q, None, K)


def test_wrong_shape():
    with pytest.raises(ValueError, match=r"keys must have 2 dimensions, got shape \(8\)"):
        kvcheck.attention(Q, K[0], K)
    with pytest.raises(ValueError, match=r"keys must be \[n, head_dim\] with head_dim 8"):
        kvcheck.attention(Q, np.ones((5, 4), np.float32), K)
    with pytest.raises(ValueError, match=r"values must have the shape of keys"):
        kvcheck.attention(Q, K, K[:4])
    with pytest.raises(ValueError, match=r"x_hat must have the shape of x, \(4, 8\), got \(8, 4\)"):
        kvcheck.check_quantized(X, np.ones((8, 4), np.float32), "int8/token")
    with pytest.raises(ValueError, match=r"logits must have the shape of ref_logits"):
        kvcheck.compare_logits(X, X[:3])
    with pytest.raises(ValueError, match=r"fp8-e4m3|x must have 2 dimensions"):
        kvcheck.quantize(np.ones((2, 4, 8), np.float32), "fp8-e4m3")  # one head's block only
    with pytest.raises(ValueError, match=r"held must be ascending token indices in \[0, 5\); held\[1\] = 0"):
        kvcheck.check_decode_step(Q, K, K, np.array([1, 0]), Q)
    with pytest.raises(ValueError, match=r"targets\[0\] = 9 is outside \[0, 8\)"):
        kvcheck.compare_logits(X, X, targets=np.array([9, 0, 0, 0]))


def test_wrong_stride():
    wide = np.ones((4, 16), dtype=np.float32)
    with pytest.raises(ValueError, match=r"x must be C-contiguous .* stride 2 in dimension 1"):
        kvcheck.quantize(wide[:, ::2], "int8/token")
    with pytest.raises(ValueError, match=r"q must be C-contiguous"):
        kvcheck.attention(np.ones((8, 2), np.float32).T, K, K)


def test_no_silent_copy_the_input_is_read_in_place():
    # A read-only view is accepted as it is (no copy needed, none made): same numbers as the original.
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    ro = x.view()
    ro.flags.writeable = False
    assert np.array_equal(kvcheck.bound(ro, "int4/token"), kvcheck.bound(x, "int4/token"))


def test_wrong_format_name():
    for bad in ["int5/token", "int4", "int4/channel-G33x", "bf16", "int4/group-g"]:
        with pytest.raises(ValueError, match=r"format must name a kvcheck format .* got '" + bad):
            kvcheck.quantize(X, bad)
    with pytest.raises(ValueError, match=r"key_format must name a kvcheck format"):
        kvcheck.check_decode_step(Q, K, K, np.arange(5), Q, key_format="int3/token")
    with pytest.raises(ValueError, match=r"group: channels per group must be positive and divide head_dim 8"):
        kvcheck.quantize(X, "int4/group-g3")
    with pytest.raises(TypeError):
        kvcheck.quantize(X, 4)


def test_wrong_device():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        meta = torch.ones((4, 8), device="meta")
        with pytest.raises(TypeError, match=r"x must"):
            kvcheck.quantize(meta, "int8/token")
        pytest.skip("no CUDA device: checked a meta tensor only")
    with pytest.raises(TypeError, match=r"x must be on the CPU"):
        kvcheck.quantize(torch.ones((4, 8), device="cuda"), "int8/token")


def cuda_capsule_holder(array):
    """An object whose DLPack capsule says its data is on CUDA device 0 (kDLCUDA = 2), built with
    ctypes so that the test runs without torch or a GPU. The pointer is a host buffer that the
    binding must never read."""
    import ctypes

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                    ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    shape = (ctypes.c_int64 * 2)(*array.shape)
    managed = DLManagedTensor(DLTensor(array.ctypes.data, DLDevice(2, 0), 2, DLDataType(2, 32, 1), shape, None, 0),
                              None, None)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

    class OnCuda:
        keep = (array, shape, managed)

        def __dlpack__(self, *args, **kwargs):
            return new_capsule(ctypes.addressof(managed), b"dltensor", None)

        def __dlpack_device__(self):
            return (2, 0)

    return OnCuda()


def test_wrong_device_through_dlpack():
    with pytest.raises(TypeError, match=r"kvcheck.quantize: x must be on the CPU \(host memory\), got a device array"):
        kvcheck.quantize(cuda_capsule_holder(X), "int8/token")
    with pytest.raises(TypeError, match=r"keys must be on the CPU"):
        kvcheck.attention(Q, cuda_capsule_holder(K), K)


def test_torch_cpu_tensors_are_taken_without_a_copy():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x = torch.randn(16, 32)
    assert np.array_equal(kvcheck.bound(x, "int4/token"), kvcheck.bound(x.numpy(), "int4/token"))
    with pytest.raises(TypeError, match=r"dtype float32, got bfloat16"):
        kvcheck.quantize(x.to(torch.bfloat16), "int4/token")
    with pytest.raises(ValueError, match=r"C-contiguous"):
        kvcheck.quantize(x.t(), "int4/token")
