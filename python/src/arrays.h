// Arrays in and out of the binding: every input is checked for dtype, shape, strides and device,
// and a mismatch raises a Python exception naming the function, the argument and what was
// expected. Nothing is converted or copied to fit: a caller's float64 or transposed array is an
// error, not a silent copy (python/README in docs/python.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "kernels/kv_format.h"

namespace kvcheck::py {

namespace nb = nanobind;

// A read-only view of a caller's array: any DLPack / buffer-protocol object (numpy, torch CPU).
using AnyArray = nb::ndarray<nb::ro>;

// A checked, C-contiguous host array of element type T, viewed without a copy.
template <typename T>
struct View {
  std::span<const T> data;
  std::vector<std::int64_t> shape;
  std::int64_t rows() const;  // product of every dim but the last (1 for a 1-D array)
  std::int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
};

// `fn`, `arg`: names for the message ("kvcheck.quantize", "x"). ndim_min..ndim_max dims.
// Raises TypeError for a non-array, a wrong dtype or a device array; ValueError for a wrong rank
// or a non-contiguous layout.
View<float> float32_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max);
View<std::int32_t> index_view(nb::handle obj, const char* fn, const char* arg, std::vector<std::int32_t>& storage);
View<std::uint8_t> uint8_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max);
View<std::uint16_t> f16_bits_view(nb::handle obj, const char* fn, const char* arg, int ndim_min, int ndim_max);

// New numpy arrays owning their data.
nb::object numpy_f32(std::vector<float>&& data, const std::vector<std::int64_t>& shape);
nb::object numpy_f64(std::vector<double>&& data, const std::vector<std::int64_t>& shape);
nb::object numpy_u8(std::vector<std::uint8_t>&& data, const std::vector<std::int64_t>& shape);
nb::object numpy_f16(std::vector<std::uint16_t>&& data, const std::vector<std::int64_t>& shape);  // fp16 bits

// "int4/token", "int2/channel-G32", "int4/group-g32", "int8/token", "fp8-e4m3", "fp16", "fp32".
// ValueError naming `arg` and listing the accepted names otherwise.
KvFormat parse_format(const std::string& name, const char* fn, const char* arg);

[[noreturn]] void raise_value(const std::string& message);
[[noreturn]] void raise_type(const std::string& message);

template <typename T>
std::int64_t View<T>::rows() const {
  std::int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

}  // namespace kvcheck::py
