// Attention from Python: exact attention over a set of keys and values
// (oracles/retained_attention.h) and the per-step oracle of one decode step
// (oracles/step_oracle.h), each query head held to its own tolerance and bound.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "oracles/held_rows_ref.h"
#include "oracles/retained_attention.h"
#include "oracles/step_oracle.h"
#include "python/src/arrays.h"

namespace kvcheck::py {

namespace {

double default_scale(std::int64_t d, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(d));
}

// q: [group, head_dim] or [head_dim]; keys, values: [n, head_dim].
struct HeadInputs {
  View<float> q, keys, values;
  std::int64_t group = 1, d = 0, n = 0;
};

HeadInputs head_inputs(nb::handle q, nb::handle keys, nb::handle values, const char* fn) {
  HeadInputs h{float32_view(q, fn, "q", 1, 2), float32_view(keys, fn, "keys", 2, 2), float32_view(values, fn, "values", 2, 2)};
  h.d = h.q.cols();
  h.group = h.q.rows();
  h.n = h.keys.rows();
  if (h.keys.cols() != h.d) {
    raise_value(std::string(fn) + ": keys must be [n, head_dim] with head_dim " + std::to_string(h.d) +
                " (the last dim of q), got " + std::to_string(h.keys.cols()) + " columns");
  }
  if (h.values.shape != h.keys.shape) {
    raise_value(std::string(fn) + ": values must have the shape of keys [" + std::to_string(h.n) + ", " +
                std::to_string(h.d) + "], got [" + std::to_string(h.values.rows()) + ", " + std::to_string(h.values.cols()) + "]");
  }
  if (h.n == 0) raise_value(std::string(fn) + ": keys must hold at least one token");
  return h;
}

struct StepResult {
  bool ok = true;
  bool held_ok = true, full_ok = true;
  std::int64_t worst_head = 0;   // the query head with the largest share of its full bound used
  double held_error = 0, held_tolerance = 0, full_error = 0, full_bound = 0, quant_bound = 0, prune_bound = 0;
  double pruned_mass = 0, delta = 0;
  // The output element farthest from what it is held to, on the worst head: against exact
  // attention over the held set when the held check fails (or passes everywhere), else against
  // exact attention over every token.
  std::int64_t worst_channel = 0;
  double worst_output = 0, worst_expected = 0;
  std::string worst_against;  // "held set" or "full context"
  std::string describe;
};

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention", [](nb::handle q, nb::handle keys, nb::handle values, std::optional<double> scale) {
        HeadInputs h = head_inputs(q, keys, values, "kvcheck.attention");
        RetainedAttentionRef r = retained_attention_ref(h.q.data, h.keys.data, h.values.data, h.group, h.d,
                                                        default_scale(h.d, scale));
        return numpy_f64(std::move(r.out), h.q.shape);
      }, nb::arg("q").none(), nb::arg("keys").none(), nb::arg("values").none(), nb::arg("scale") = nb::none(),
      "Exact attention in double: softmax(scale q·k) · v for each query head of q [group, head_dim] or "
      "[head_dim] over keys, values [n, head_dim] (float32). scale defaults to 1/sqrt(head_dim).");

  nb::class_<StepResult>(m, "StepCheck", "The per-step oracle's verdict on one decode step (docs/design.md §7)")
      .def_ro("ok", &StepResult::ok)
      .def_ro("held_ok", &StepResult::held_ok, "the output equals exact attention over the held set, within float rounding")
      .def_ro("full_ok", &StepResult::full_ok, "its distance from exact attention over every token is within the bound")
      .def_ro("worst_head", &StepResult::worst_head, "the query head (row of q) with the largest share of its bound used")
      .def_ro("held_error", &StepResult::held_error)
      .def_ro("held_tolerance", &StepResult::held_tolerance)
      .def_ro("full_error", &StepResult::full_error)
      .def_ro("full_bound", &StepResult::full_bound)
      .def_ro("quant_bound", &StepResult::quant_bound)
      .def_ro("prune_bound", &StepResult::prune_bound)
      .def_ro("pruned_mass", &StepResult::pruned_mass)
      .def_ro("delta", &StepResult::delta)
      .def_prop_ro("worst_element", [](const StepResult& r) { return nb::make_tuple(r.worst_head, r.worst_channel); },
                   "(query head, channel) of the output element farthest from what it is held to")
      .def_ro("worst_output", &StepResult::worst_output)
      .def_ro("worst_expected", &StepResult::worst_expected, "exact attention there, over worst_against")
      .def_ro("worst_against", &StepResult::worst_against)
      .def("__repr__", [](const StepResult& r) { return "kvcheck.StepCheck(" + r.describe + ")"; })
      .def("__bool__", [](const StepResult& r) { return r.ok; });

  m.def("check_decode_step",
        [](nb::handle q, nb::handle keys, nb::handle values, nb::handle held, nb::handle output,
           std::optional<std::string> key_format, std::optional<std::string> value_format, nb::handle held_keys,
           nb::handle held_values, std::optional<double> scale) {
          const char* fn = "kvcheck.check_decode_step";
          HeadInputs h = head_inputs(q, keys, values, fn);
          std::vector<std::int32_t> held_storage;
          View<std::int32_t> hv = index_view(held, fn, "held", held_storage);
          const auto nh = static_cast<std::int64_t>(hv.data.size());
          if (nh == 0) raise_value(std::string(fn) + ": held must list at least one token");
          for (std::int64_t i = 0; i < nh; ++i) {
            const std::int32_t j = hv.data[static_cast<std::size_t>(i)];
            if (j < 0 || j >= h.n || (i > 0 && j <= hv.data[static_cast<std::size_t>(i - 1)])) {
              raise_value(std::string(fn) + ": held must be ascending token indices in [0, " + std::to_string(h.n) +
                          "); held[" + std::to_string(i) + "] = " + std::to_string(j));
            }
          }
          View<float> out = float32_view(output, fn, "output", 1, 2);
          if (out.shape != h.q.shape) raise_value(std::string(fn) + ": output must have the shape of q");
          // What the cache held, dequantized: given, or derived from the exact rows and the formats.
          std::vector<float> hk, hvals;
          auto held_rows = [&](nb::handle given, const std::optional<std::string>& format, std::span<const float> exact,
                               const char* given_name, const char* format_name) -> std::vector<float> {
            if (!given.is_none()) {
              if (format) raise_value(std::string(fn) + ": pass " + given_name + " or " + format_name + ", not both");
              View<float> g = float32_view(given, fn, given_name, 2, 2);
              if (g.rows() != nh || g.cols() != h.d) {
                raise_value(std::string(fn) + ": " + given_name + " must be [len(held), head_dim] = [" + std::to_string(nh) +
                            ", " + std::to_string(h.d) + "]");
              }
              return {g.data.begin(), g.data.end()};
            }
            const KvFormat f = parse_format(format.value_or("fp32"), fn, format_name);
            std::vector<float> rows(static_cast<std::size_t>(nh * h.d));
            for (std::int64_t i = 0; i < nh; ++i) {
              const auto j = static_cast<std::int64_t>(hv.data[static_cast<std::size_t>(i)]);
              std::copy_n(exact.begin() + j * h.d, h.d, rows.begin() + i * h.d);
            }
            if (f.dtype == KvDType::kInt) validate(f.spec, h.d);
            if (f.dtype == KvDType::kInt && nh % f.spec.token_group() != 0) {
              raise_value(std::string(fn) + ": " + format_name + " " + kv_format_name(f) + " stores whole groups of " +
                          std::to_string(f.spec.token_group()) + " tokens; held has " + std::to_string(nh));
            }
            float fp8_scale = 0.0f;
            if (f.dtype == KvDType::kFp8E4M3) {  // the head's scale: amax of what it holds / 448
              double amax = 0;
              for (float v : rows) amax = std::max(amax, std::fabs(double{v}));
              fp8_scale = std::max(static_cast<float>(amax / 448.0), 0x1.0p-126f);
            }
            return stored_rows_ref(f, rows, nh, h.d, fp8_scale);
          };
          hk = held_rows(held_keys, key_format, h.keys.data, "held_keys", "key_format");
          hvals = held_rows(held_values, value_format, h.values.data, "held_values", "value_format");

          StepResult r;
          double worst_share = -1;
          for (std::int64_t g = 0; g < h.group; ++g) {
            DecodeStepInputs in;
            in.group = 1;
            in.head_dim = h.d;
            in.scale = default_scale(h.d, scale);
            in.q = h.q.data.subspan(static_cast<std::size_t>(g * h.d), static_cast<std::size_t>(h.d));
            in.engine_out = out.data.subspan(static_cast<std::size_t>(g * h.d), static_cast<std::size_t>(h.d));
            in.keys = h.keys.data;
            in.values = h.values.data;
            in.held = hv.data;
            in.held_keys = hk;
            in.held_values = hvals;
            const DecodeStepCheck c = check_decode_step(in);
            const double share = std::isnan(c.full_error) ? INFINITY
                                 : std::max(c.full_error / c.full_bound, c.held_error / c.held_tolerance);
            if (share > worst_share || g == 0) {
              worst_share = share;
              r.worst_head = g;
              r.describe = "head " + std::to_string(g) + ": " + c.describe();
            }
            r.held_ok = r.held_ok && !c.held_violated;
            r.full_ok = r.full_ok && !c.full_violated;
            r.held_error = std::max(r.held_error, c.held_error);
            r.held_tolerance = std::max(r.held_tolerance, c.held_tolerance);
            r.full_error = std::max(r.full_error, c.full_error);
            r.full_bound = std::max(r.full_bound, c.full_bound);
            r.quant_bound = std::max(r.quant_bound, c.quant_bound);
            r.prune_bound = std::max(r.prune_bound, c.prune_bound);
            r.pruned_mass = std::max(r.pruned_mass, c.pruned_mass);
            r.delta = std::max(r.delta, c.delta);
          }
          r.ok = r.held_ok && r.full_ok;
          {  // the worst element of the worst head
            const auto g = static_cast<std::size_t>(r.worst_head);
            const auto qg = h.q.data.subspan(g * static_cast<std::size_t>(h.d), static_cast<std::size_t>(h.d));
            const auto og = out.data.subspan(g * static_cast<std::size_t>(h.d), static_cast<std::size_t>(h.d));
            const bool against_held = !r.held_ok || r.full_ok;
            const RetainedAttentionRef exact =
                against_held ? retained_attention_ref(qg, hk, hvals, 1, h.d, default_scale(h.d, scale))
                             : retained_attention_ref(qg, h.keys.data, h.values.data, 1, h.d, default_scale(h.d, scale));
            double worst = -1;
            for (std::int64_t c = 0; c < h.d; ++c) {
              const auto k = static_cast<std::size_t>(c);
              const double diff = std::fabs(double{og[k]} - exact.out[k]);
              if (std::isnan(diff) || diff > worst) {
                worst = std::isnan(diff) ? INFINITY : diff;
                r.worst_channel = c;
                r.worst_output = og[k];
                r.worst_expected = exact.out[k];
              }
            }
            r.worst_against = against_held ? "held set" : "full context";
          }
          return r;
        },
        nb::arg("q").none(), nb::arg("keys").none(), nb::arg("values").none(), nb::arg("held").none(), nb::arg("output").none(),
        nb::arg("key_format") = nb::none(), nb::arg("value_format") = nb::none(), nb::arg("held_keys") = nb::none(),
        nb::arg("held_values") = nb::none(), nb::arg("scale") = nb::none(),
        "The per-step oracle (docs/design.md §7) for one kv head's decode step.");
}

}  // namespace kvcheck::py
