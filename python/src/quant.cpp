// Quantization from Python: kvcheck's quantizers (kernels/cpu/quantize.h, kernels/cpu/fp8_e4m3.h),
// their dequantization and the per-element bounds of oracles/quant_bounds.h.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "oracles/held_rows_ref.h"
#include "oracles/quant_bounds.h"
#include "python/src/arrays.h"
#include "reference/tensor.h"

namespace kvcheck::py {

namespace {

// A quantized block as kvcheck stores it. Layouts: kernels/quant_format.h (integer formats),
// kernels/cpu/fp8_e4m3.h (FP8). fp16 / fp32 keep the values themselves.
struct Quantized {
  std::string format;
  KvFormat kv;
  std::vector<std::int64_t> shape;  // of x
  std::int64_t tokens = 0, head_dim = 0;
  std::vector<std::uint8_t> codes;    // int: [tokens][head_dim / codes_per_byte]; fp8: [tokens][head_dim]
  std::vector<std::uint16_t> scales;  // int: [meta_count] fp16 bits
  std::vector<std::uint16_t> zeros;   // int: [meta_count] fp16 bits
  float fp8_scale = 0.0f;             // fp8: per block
  std::vector<float> values;          // fp16 / fp32: the stored values, as floats
};

std::vector<std::int64_t> meta_shape(const QuantSpec& s, std::int64_t tokens, std::int64_t d) {
  switch (s.granularity) {
    case Granularity::kPerToken: return {tokens};
    case Granularity::kPerChannel: return {tokens / s.group, d};
    case Granularity::kPerTokenGroup: return {tokens, d / s.group};
  }
  return {};
}

// x: [..., head_dim]; per-channel and FP8 formats share metadata across tokens, so they take one
// head's block [tokens, head_dim] only.
Quantized quantize_any(nb::handle x_obj, const std::string& format, const char* fn) {
  Quantized q;
  q.kv = parse_format(format, fn, "format");
  q.format = kv_format_name(q.kv);
  const bool whole_block = q.kv.dtype == KvDType::kFp8E4M3 ||
                           (q.kv.dtype == KvDType::kInt && q.kv.spec.granularity == Granularity::kPerChannel);
  View<float> x = float32_view(x_obj, fn, "x", whole_block ? 2 : 1, whole_block ? 2 : 8);
  q.shape = x.shape;
  q.tokens = x.rows();
  q.head_dim = x.cols();
  const KvLocation at{0, 0, 0, "x"};
  switch (q.kv.dtype) {
    case KvDType::kFp32:
    case KvDType::kFp16:
      q.values = stored_rows_ref(q.kv, x.data, q.tokens, q.head_dim, 0.0f);
      break;
    case KvDType::kFp8E4M3:
      q.codes.resize(x.data.size());
      q.fp8_scale = quantize_fp8_e4m3(x.data, q.tokens, q.head_dim, at, q.codes);
      break;
    case KvDType::kInt: {
      const QuantSpec& s = q.kv.spec;
      validate(s, q.head_dim);
      if (q.tokens % s.token_group() != 0) {
        raise_value(std::string(fn) + ": x has " + std::to_string(q.tokens) + " tokens; format " + q.format +
                    " needs a multiple of " + std::to_string(s.token_group()));
      }
      q.codes.resize(static_cast<std::size_t>(q.tokens * s.row_bytes(q.head_dim)));
      q.scales.resize(static_cast<std::size_t>(s.meta_count(q.tokens, q.head_dim)));
      q.zeros.resize(q.scales.size());
      quantize(s, x.data, q.tokens, q.head_dim, at, q.codes, q.scales, q.zeros);
      break;
    }
  }
  return q;
}

std::vector<float> dequantize_any(const Quantized& q) {
  switch (q.kv.dtype) {
    case KvDType::kFp32:
    case KvDType::kFp16: return q.values;
    case KvDType::kFp8E4M3: {
      std::vector<float> out(q.codes.size());
      dequantize_fp8_e4m3(q.codes, q.fp8_scale, out);
      return out;
    }
    case KvDType::kInt: {
      std::vector<float> out(static_cast<std::size_t>(q.tokens * q.head_dim));
      dequantize(q.kv.spec, q.codes, q.scales, q.zeros, q.tokens, q.head_dim, out);
      return out;
    }
  }
  return {};
}

// The metadata index of element (t, c): kernels/quant_format.h's layouts.
std::int64_t meta_index(const QuantSpec& s, std::int64_t t, std::int64_t c, std::int64_t d) {
  if (s.granularity == Granularity::kPerChannel) return t / s.group * d + c;
  if (s.granularity == Granularity::kPerTokenGroup) return t * (d / s.group) + c / s.group;
  return t;
}

// Per element: the bound oracles/quant_bounds.h gives x̂ against x under q's stored metadata. For
// fp16 / fp32 the stored value is exact rounding, so the bound is its own error.
std::vector<double> bounds_of(const Quantized& q, std::span<const float> x, std::span<const float> x_hat) {
  std::vector<double> b(x.size());
  const std::int64_t d = q.head_dim;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(x.size()); ++i) {
    const auto k = static_cast<std::size_t>(i);
    switch (q.kv.dtype) {
      case KvDType::kFp32:
      case KvDType::kFp16: b[k] = std::fabs(double{x[k]} - double{q.values[k]}); break;
      case KvDType::kFp8E4M3: b[k] = fp8_error_bound(x[k], x_hat[k], q.fp8_scale); break;
      case KvDType::kInt: {
        const auto m = static_cast<std::size_t>(meta_index(q.kv.spec, i / d, i % d, d));
        b[k] = int_quant_error_bound(x[k], x_hat[k], f16_bits_to_float(q.scales[m]), f16_bits_to_float(q.zeros[m]));
        break;
      }
    }
  }
  return b;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace

void bind_quant(nb::module_& m) {
  nb::class_<Quantized>(m, "Quantized", "A block as kvcheck stores it in a format (kernels/quant_format.h layouts)")
      .def_ro("format", &Quantized::format)
      .def_prop_ro("shape", [](const Quantized& q) { return q.shape; })
      .def_prop_ro("codes", [](const Quantized& q) -> nb::object {
        if (q.codes.empty()) return nb::none();
        std::vector<std::uint8_t> c = q.codes;
        return numpy_u8(std::move(c), {q.tokens, static_cast<std::int64_t>(q.codes.size()) / std::max<std::int64_t>(q.tokens, 1)});
      }, "uint8 [tokens, packed bytes]: int codes, first channel in the low bits; fp8: E4M3 bytes")
      .def_prop_ro("scales", [](const Quantized& q) -> nb::object {
        if (q.kv.dtype != KvDType::kInt) return nb::none();
        std::vector<std::uint16_t> s = q.scales;
        return numpy_f16(std::move(s), meta_shape(q.kv.spec, q.tokens, q.head_dim));
      }, "float16: per token [tokens], per channel [tokens / G, head_dim], per group [tokens, head_dim / g]")
      .def_prop_ro("zeros", [](const Quantized& q) -> nb::object {
        if (q.kv.dtype != KvDType::kInt) return nb::none();
        std::vector<std::uint16_t> z = q.zeros;
        return numpy_f16(std::move(z), meta_shape(q.kv.spec, q.tokens, q.head_dim));
      })
      .def_prop_ro("fp8_scale", [](const Quantized& q) -> nb::object {
        if (q.kv.dtype != KvDType::kFp8E4M3) return nb::none();
        return nb::float_(q.fp8_scale);
      })
      .def("__repr__", [](const Quantized& q) {
        return "kvcheck.Quantized(" + q.format + ", " + std::to_string(q.tokens) + " tokens x " +
               std::to_string(q.head_dim) + " channels)";
      });

  m.def("quantize", [](nb::handle x, const std::string& format) { return quantize_any(x, format, "kvcheck.quantize"); },
        nb::arg("x").none(), nb::arg("format"),
        "Quantize x [..., head_dim] (float32, C-contiguous) as kvcheck stores it in `format`.");
  m.def("dequantize", [](const Quantized& q) {
        std::vector<float> out = dequantize_any(q);
        return numpy_f32(std::move(out), q.shape);
      }, nb::arg("q").none(), "x̂, float32, shaped as the x that was quantized.");
  m.def("bound", [](nb::handle x, const std::string& format) {
        Quantized q = quantize_any(x, format, "kvcheck.bound");
        View<float> xv = float32_view(x, "kvcheck.bound", "x", 1, 8);
        const std::vector<float> x_hat = dequantize_any(q);
        std::vector<double> b = bounds_of(q, xv.data, x_hat);
        return numpy_f64(std::move(b), q.shape);
      }, nb::arg("x").none(), nb::arg("format"),
      "Per element, the bound on |x - x̂| (float64) that kvcheck's format guarantees (docs/design.md §4).");
  // The worst element of a candidate x̂ against the bound kvcheck's own stored metadata gives:
  // (flat index, |x - x̂|, bound, ratio, first violation flat index or -1, and its text).
  m.def("_check_quantized", [](nb::handle x, nb::handle x_hat, const std::string& format) {
        const char* fn = "kvcheck.check_quantized";
        Quantized q = quantize_any(x, format, fn);
        View<float> xv = float32_view(x, fn, "x", 1, 8);
        View<float> hv = float32_view(x_hat, fn, "x_hat", 1, 8);
        if (hv.shape != xv.shape) {
          raise_value(std::string(fn) + ": x_hat must have the shape of x, " + shape_text(xv.shape) + ", got " +
                      shape_text(hv.shape));
        }
        const std::vector<float> kv_hat = dequantize_any(q);
        // The bound's slack terms use the candidate's own x̂.
        const std::vector<double> b = bounds_of(q, xv.data, hv.data);
        std::int64_t worst = 0, first_bad = -1;
        double worst_ratio = -1.0;
        for (std::size_t i = 0; i < b.size(); ++i) {
          const double err = std::fabs(double{xv.data[i]} - double{hv.data[i]});
          const double ratio = b[i] > 0 ? err / b[i] : (err > 0 ? INFINITY : 0.0);
          if (std::isnan(err) || ratio > worst_ratio) {
            worst_ratio = std::isnan(err) ? INFINITY : ratio;
            worst = static_cast<std::int64_t>(i);
          }
          if (first_bad < 0 && !(err <= b[i])) first_bad = static_cast<std::int64_t>(i);
        }
        const auto w = static_cast<std::size_t>(worst);
        std::string meta;
        if (q.kv.dtype == KvDType::kInt) {
          const auto mi = static_cast<std::size_t>(meta_index(q.kv.spec, worst / q.head_dim, worst % q.head_dim, q.head_dim));
          char buf[96];
          std::snprintf(buf, sizeof buf, "scale %.9g, zero %.9g", double{f16_bits_to_float(q.scales[mi])},
                        double{f16_bits_to_float(q.zeros[mi])});
          meta = buf;
        } else if (q.kv.dtype == KvDType::kFp8E4M3) {
          meta = "scale " + std::to_string(q.fp8_scale);
        }
        nb::tuple index = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(xv.shape.size())));
        std::int64_t flat = worst;
        for (std::size_t i = xv.shape.size(); i-- > 0;) {
          PyTuple_SET_ITEM(index.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(flat % xv.shape[i]));
          flat /= xv.shape[i];
        }
        nb::dict r;
        r["index"] = index;
        r["x"] = double{xv.data[w]};
        r["x_hat"] = double{hv.data[w]};
        r["kvcheck_x_hat"] = double{kv_hat[w]};
        r["error"] = std::fabs(double{xv.data[w]} - double{hv.data[w]});
        r["bound"] = b[w];
        r["share_of_bound"] = worst_ratio;
        r["ok"] = first_bad < 0;
        r["format"] = q.format;
        r["metadata"] = meta;
        return r;
      }, nb::arg("x").none(), nb::arg("x_hat").none(), nb::arg("format"));

  // The C++ call the bindings overhead is measured against (python/benchmarks): `repeats`
  // quantize calls on the same input, each allocating its outputs as the binding does; seconds per call.
  m.def("_time_quantize_cpp", [](nb::handle x_obj, const std::string& format, int repeats) {
        View<float> x = float32_view(x_obj, "kvcheck._time_quantize_cpp", "x", 2, 2);
        const KvFormat kv = parse_format(format, "kvcheck._time_quantize_cpp", "format");
        if (kv.dtype != KvDType::kInt) raise_value("kvcheck._time_quantize_cpp: integer formats only");
        const std::int64_t t = x.rows(), d = x.cols();
        nb::gil_scoped_release release;
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < repeats; ++r) {
          std::vector<std::uint8_t> codes(static_cast<std::size_t>(t * kv.spec.row_bytes(d)));
          std::vector<std::uint16_t> scales(static_cast<std::size_t>(kv.spec.meta_count(t, d))), zeros(scales.size());
          validate(kv.spec, d);
          quantize(kv.spec, x.data, t, d, KvLocation{}, codes, scales, zeros);
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
      }, nb::arg("x").none(), nb::arg("format"), nb::arg("repeats"));
}

}  // namespace kvcheck::py
