// The checks on every array that enters the binding, the numpy arrays that leave it, and the
// format names (python/src/arrays.h).
#include <cstdio>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/ndarray.h>

#include "python/src/arrays.h"

namespace nb = nanobind;

namespace kvcheck::py {

namespace {

std::string py_type_name(nb::handle obj) {
  return nb::cast<std::string>(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()))).attr("__name__"));
}

std::string layout_of(const AnyArray& a) {
  std::string s = "shape (";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + ")";
}

std::string dtype_name(const nb::dlpack::dtype& d) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
  }
  return std::string(kind) + std::to_string(d.bits);
}

AnyArray as_array(nb::handle obj, const char* fn, const char* arg, const char* expected) {
  AnyArray a;
  if (!nb::try_cast(obj, a, /*convert=*/false)) {
    raise_type(std::string(fn) + ": " + arg + " must be an array (numpy, torch CPU tensor, DLPack) of " + expected +
               ", got " + py_type_name(obj));
  }
  if (a.device_type() != nb::device::cpu::value) {
    raise_type(std::string(fn) + ": " + arg + " must be on the CPU (host memory), got a device array (DLPack device type " +
               std::to_string(a.device_type()) + "); copy it with .cpu() first");
  }
  return a;
}

template <typename T>
View<T> checked(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max, const char* expected) {
  AnyArray a = as_array(obj, fn, arg, expected);
  if (a.dtype() != nb::dtype<T>()) {
    raise_type(std::string(fn) + ": " + arg + " must have dtype " + expected + ", got " + dtype_name(a.dtype()) +
               " (kvcheck converts nothing; cast it yourself)");
  }
  const int nd = static_cast<int>(a.ndim());
  if (nd < ndim_min || nd > ndim_max) {
    raise_value(std::string(fn) + ": " + arg + " must have " +
                (ndim_min == ndim_max ? std::to_string(ndim_min) : std::to_string(ndim_min) + " to " + std::to_string(ndim_max)) +
                " dimensions, got " + layout_of(a));
  }
  // C-contiguous: the last stride 1, each other the product of the dims after it (size-1 dims free).
  std::int64_t expect = 1;
  for (int i = nd - 1; i >= 0; --i) {
    if (a.shape(i) != 1 && a.stride(i) != expect) {
      raise_value(std::string(fn) + ": " + arg + " must be C-contiguous (row-major, no gaps), got " + layout_of(a) +
                  " with stride " + std::to_string(a.stride(i)) + " in dimension " + std::to_string(i) + " where " +
                  std::to_string(expect) + " was expected; pass np.ascontiguousarray(" + arg + ") or .contiguous()");
    }
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  View<T> v;
  for (int i = 0; i < nd; ++i) v.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
  v.data = std::span<const T>(static_cast<const T*>(a.data()), a.size());
  return v;
}

}  // namespace

[[noreturn]] void raise_value(const std::string& message) { throw nb::value_error(message.c_str()); }
[[noreturn]] void raise_type(const std::string& message) { throw nb::type_error(message.c_str()); }

View<float> float32_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max) {
  return checked<float>(obj, fn, arg, ndim_min, ndim_max, "float32");
}
View<std::uint8_t> uint8_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max) {
  return checked<std::uint8_t>(obj, fn, arg, ndim_min, ndim_max, "uint8");
}
View<std::uint16_t> f16_bits_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max) {
  AnyArray a = as_array(obj, fn, arg, "float16");
  if (a.dtype() != nb::dtype<std::uint16_t>() &&
      !(a.dtype().code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && a.dtype().bits == 16)) {
    raise_type(std::string(fn) + ": " + arg + " must have dtype float16 (or uint16 fp16 bits), got " + dtype_name(a.dtype()));
  }
  // Same bits either way: view as uint16.
  nb::dlpack::dtype saved = a.dtype();
  (void)saved;
  const int nd = static_cast<int>(a.ndim());
  if (nd < ndim_min || nd > ndim_max) raise_value(std::string(fn) + ": " + arg + " has the wrong number of dimensions: " + layout_of(a));
  std::int64_t expect = 1;
  for (int i = nd - 1; i >= 0; --i) {
    if (a.shape(i) != 1 && a.stride(i) != expect) raise_value(std::string(fn) + ": " + arg + " must be C-contiguous, got " + layout_of(a));
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  View<std::uint16_t> v;
  for (int i = 0; i < nd; ++i) v.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
  v.data = std::span<const std::uint16_t>(static_cast<const std::uint16_t*>(a.data()), a.size());
  return v;
}

View<std::int32_t> index_view(nb::handle obj, const char* fn, const char* arg, std::vector<std::int32_t>& storage) {
  // Index lists are small: int32 is viewed, int64 (numpy's default) is narrowed with a range check.
  AnyArray a = as_array(obj, fn, arg, "int32 or int64");
  if (a.ndim() != 1) raise_value(std::string(fn) + ": " + arg + " must be 1-D, got " + layout_of(a));
  if (a.shape(0) > 1 && a.stride(0) != 1) raise_value(std::string(fn) + ": " + arg + " must be contiguous, got stride " + std::to_string(a.stride(0)));
  View<std::int32_t> v;
  v.shape = {static_cast<std::int64_t>(a.shape(0))};
  if (a.dtype() == nb::dtype<std::int32_t>()) {
    v.data = std::span<const std::int32_t>(static_cast<const std::int32_t*>(a.data()), a.size());
  } else if (a.dtype() == nb::dtype<std::int64_t>()) {
    const auto* p = static_cast<const std::int64_t*>(a.data());
    storage.resize(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (p[i] < INT32_MIN || p[i] > INT32_MAX) raise_value(std::string(fn) + ": " + arg + "[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " is out of range");
      storage[i] = static_cast<std::int32_t>(p[i]);
    }
    v.data = storage;
  } else {
    raise_type(std::string(fn) + ": " + arg + " must have dtype int32 or int64, got " + dtype_name(a.dtype()));
  }
  return v;
}

namespace {
template <typename T>
nb::object to_numpy(std::vector<T>&& data, const std::vector<std::int64_t>& shape) {
  auto* owner = new std::vector<T>(std::move(data));
  nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<std::size_t> sh(shape.begin(), shape.end());
  return nb::cast(nb::ndarray<nb::numpy, T>(owner->data(), sh.size(), sh.data(), cap));
}
}  // namespace

nb::object numpy_f32(std::vector<float>&& d, const std::vector<std::int64_t>& s) { return to_numpy(std::move(d), s); }
nb::object numpy_f64(std::vector<double>&& d, const std::vector<std::int64_t>& s) { return to_numpy(std::move(d), s); }
nb::object numpy_u8(std::vector<std::uint8_t>&& d, const std::vector<std::int64_t>& s) { return to_numpy(std::move(d), s); }
nb::object numpy_f16(std::vector<std::uint16_t>&& d, const std::vector<std::int64_t>& s) {
  return to_numpy(std::move(d), s).attr("view")("float16");
}

KvFormat parse_format(const std::string& name, const char* fn, const char* arg) {
  if (name == "fp32") return fp32_format();
  if (name == "fp16") return fp16_format();
  if (name == "fp8-e4m3" || name == "fp8") return fp8_e4m3_format();
  int bits = 0, group = 0;
  char rest[32] = {0};
  if (std::sscanf(name.c_str(), "int%d/%31s", &bits, rest) == 2) {
    const std::string r = rest;
    QuantSpec spec;
    if (r == "token") spec = per_token(bits);
    else if (std::sscanf(rest, "channel-G%d", &group) == 1 && r == "channel-G" + std::to_string(group)) spec = per_channel(bits, group);
    else if (std::sscanf(rest, "group-g%d", &group) == 1 && r == "group-g" + std::to_string(group)) spec = per_token_group(bits, group);
    else bits = 0;
    if (bits == 8 || bits == 4 || bits == 2) return int_format(spec);
  }
  raise_value(std::string(fn) + ": " + arg + " must name a kvcheck format (fp32, fp16, fp8-e4m3, int8/token, int4/token, "
              "int2/token, intB/channel-G{16,32,128}, intB/group-gN with B in 8, 4, 2), got '" + name + "'");
}

}  // namespace kvcheck::py

