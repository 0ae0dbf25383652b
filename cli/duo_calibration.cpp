#include "cli/duo_calibration.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/json_file.h"
#include "oracles/eval_data.h"
#include "oracles/eval_retrieval.h"
#include "oracles/retained_attention.h"
#include "optimized/duo_policy.h"
#include "reference/errors.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

DuoCalibration calibrate_duo(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec, std::int64_t count, DuoRank rank) {
  const ModelConfig& c = model.config();
  const std::optional<DuoParams> params = duo_params_of(*make_policy(spec));
  if (!params || !params->heads.empty()) {
    throw input_error("--duo-calibrate", "policy",
                      "needs a duo spec without heads (its retrieval share, sinks and recent), e.g. "
                      "duo:retrieval=0.25,sinks=4,recent=60; got '{}'",
                      spec);
  }
  const std::optional<Tokenizer> tokenizer = Tokenizer::find(dir);
  if (!tokenizer) {
    throw input_error("--duo-calibrate", dir.string(), "runs retrieval items and needs the model's tokenizer");
  }
  // The items the sweep evaluates are left out; the calibration's are spread over the groups.
  const std::filesystem::path file = retrieval_path(args.retrieval_file);
  const std::vector<RetrievalItem> all = load_retrieval(file);
  std::set<std::string> evaluated;
  for (const RetrievalItem& it : retrieval_subset(all, args.sweep_retrieval)) evaluated.insert(it.id);
  std::vector<RetrievalItem> held_out;
  for (const RetrievalItem& it : all) {
    if (!evaluated.contains(it.id)) held_out.push_back(it);
  }
  struct Case {
    std::string id;
    std::vector<std::int32_t> prompt, forced;  // prompt less its last token; that token, then the answer
  };
  std::vector<Case> cases;
  for (const RetrievalItem& it : retrieval_subset(held_out, static_cast<std::int64_t>(held_out.size()))) {
    std::vector<std::int32_t> prompt = tokenizer->encode(it.prompt, true);
    const std::vector<std::int32_t> answer = retrieval_answer_ids(*tokenizer, it, fmt::format("{}:{}", file.string(), it.line));
    if (prompt.size() < 2 || static_cast<std::int64_t>(prompt.size() + answer.size()) > c.max_position_embeddings) continue;
    std::vector<std::int32_t> forced{prompt.back()};
    forced.insert(forced.end(), answer.begin(), answer.end());
    prompt.pop_back();
    cases.push_back({it.id, std::move(prompt), std::move(forced)});
    if (static_cast<std::int64_t>(cases.size()) == count) break;
  }
  if (static_cast<std::int64_t>(cases.size()) < count) {
    throw input_error("--duo-calibrate", file.string(),
                      "{} items asked for, {} of its items are left beyond the {} the sweep evaluates "
                      "(--sweep-retrieval) that fit the model",
                      count, cases.size(), evaluated.size());
  }

  const std::int64_t kvh = c.num_key_value_heads, heads = c.num_hidden_layers * kvh, d = c.head_dim;
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, "full-fp32"));
  const std::int64_t tokens_per_page = engine->cache->manager().pool().tokens_per_page(kHighTier);
  DuoCalibration out;
  out.from_spec = make_policy(spec)->name();
  out.rank = rank;
  out.far_mass.assign(static_cast<std::size_t>(heads), 0.0);
  out.output_error.assign(static_cast<std::size_t>(heads), 0.0);
  std::vector<std::vector<float>> layer_keys(static_cast<std::size_t>(c.num_hidden_layers)), layer_values(layer_keys.size());
  std::vector<LiveToken> live;
  std::vector<SlotRef> slots;
  RunnerTrace trace;
  trace.on_kv = [&](std::int64_t, std::int32_t layer, std::int32_t first, std::int64_t tokens, std::span<const float> k,
                    std::span<const float> v) {
    std::vector<float>& ks = layer_keys[static_cast<std::size_t>(layer)];
    std::vector<float>& vs = layer_values[static_cast<std::size_t>(layer)];
    ks.resize((static_cast<std::size_t>(first) + static_cast<std::size_t>(tokens)) * kv_dim);
    vs.resize(ks.size());
    std::copy(k.begin(), k.end(), ks.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first) * kv_dim));
    std::copy(v.begin(), v.end(), vs.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first) * kv_dim));
  };
  trace.on_decode_head = [&](const DecodeHeadTrace& s) {
    const auto head = static_cast<std::size_t>(s.layer * kvh + s.kv_head);
    // Far mass: the engine's probabilities of the far positions (max over the group).
    engine->cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
    double far = 0.0;
    for (std::size_t i = 0; i < live.size(); ++i) {
      const std::int64_t j = live[i].position;
      if (j >= params->sinks && j <= s.position - params->recent) {
        far += s.slot_probs[static_cast<std::size_t>(slots[i].page_index * tokens_per_page + slots[i].slot)];
      }
    }
    out.far_mass[head] += far;
    // Output error: exact attention over the context against exact attention over what a
    // streaming head holds, in double, the L2 distance averaged over the group.
    const std::vector<float>& ks = layer_keys[static_cast<std::size_t>(s.layer)];
    const std::vector<float>& vs = layer_values[static_cast<std::size_t>(s.layer)];
    std::vector<float> all_k, all_v, kept_k, kept_v;
    for (std::int64_t j = 0; j <= s.position; ++j) {
      const auto at = ks.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(j) * kv_dim +
                                                               static_cast<std::size_t>(s.kv_head * d));
      const auto vat = vs.begin() + (at - ks.begin());
      all_k.insert(all_k.end(), at, at + d);
      all_v.insert(all_v.end(), vat, vat + d);
      if (j < params->sinks || j > s.position - params->recent) {
        kept_k.insert(kept_k.end(), at, at + d);
        kept_v.insert(kept_v.end(), vat, vat + d);
      }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const std::int64_t group = c.group_size();
    const RetainedAttentionRef full = retained_attention_ref(s.q, all_k, all_v, group, d, scale);
    const RetainedAttentionRef kept = retained_attention_ref(s.q, kept_k, kept_v, group, d, scale);
    double error = 0.0;
    for (std::int64_t g = 0; g < group; ++g) {
      double sq = 0.0;
      for (std::int64_t x = g * d; x < (g + 1) * d; ++x) {
        const double e = full.out[static_cast<std::size_t>(x)] - kept.out[static_cast<std::size_t>(x)];
        sq += e * e;
      }
      error += std::sqrt(sq) / static_cast<double>(group);
    }
    out.output_error[head] += error;
  };
  engine->runner->set_trace(&trace);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EngineGenerateOptions eg;
    eg.max_new_tokens = static_cast<std::int64_t>(cases[i].forced.size());  // a decode step per forced token but the last
    eg.stop_at_eos = false;
    eg.forced = cases[i].forced;
    engine_generate(*engine, static_cast<std::int64_t>(i), cases[i].prompt, eg);
    out.items.push_back(cases[i].id);
    out.queries += static_cast<std::int64_t>(cases[i].forced.size()) - 1;
  }
  engine->runner->set_trace(nullptr);
  for (double& m : out.far_mass) m /= static_cast<double>(std::max<std::int64_t>(out.queries, 1));
  for (double& m : out.output_error) m /= static_cast<double>(std::max<std::int64_t>(out.queries, 1));
  const std::vector<double>& statistic = rank == DuoRank::kFarMass ? out.far_mass : out.output_error;
  std::vector<std::int64_t> order(static_cast<std::size_t>(heads));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return statistic[static_cast<std::size_t>(a)] > statistic[static_cast<std::size_t>(b)];
  });
  order.resize(static_cast<std::size_t>(duo_default_retrieval_heads(params->retrieval, heads)));
  std::sort(order.begin(), order.end());
  out.heads = order;
  DuoParams calibrated = *params;
  calibrated.heads = out.heads;
  out.spec = out.heads.empty() ? make_policy(spec)->name() : make_duo_policy(calibrated)->name();
  return out;
}

DuoRank duo_rank(const std::string& name) {
  if (name == "far-mass") return DuoRank::kFarMass;
  if (name == "output-error") return DuoRank::kOutputError;
  throw input_error("--duo-rank", name, "must be far-mass or output-error");
}

int run_duo_calibrate(const VerifyArgs& args) {
  const DuoRank rank = duo_rank(args.duo_rank);
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const DuoCalibration cal = calibrate_duo(model, dir, args, args.policy, args.duo_calibrate, rank);
  const std::int64_t kvh = model.config().num_key_value_heads;
  fmt::print("duo calibration of {} on {} held-out retrieval items ({} answer queries), ranked by {}:\n",
             cal.from_spec, cal.items.size(), cal.queries, args.duo_rank);
  for (std::size_t h = 0; h < cal.far_mass.size(); ++h) {
    const bool retrieval = std::binary_search(cal.heads.begin(), cal.heads.end(), static_cast<std::int64_t>(h));
    fmt::print("  kv head {:>3} (layer {}, head {}): far mass {:.4f}, output error {:.4f}{}\n", h,
               static_cast<std::int64_t>(h) / kvh, static_cast<std::int64_t>(h) % kvh, cal.far_mass[h],
               cal.output_error[h], retrieval ? "  retrieval" : "");
  }
  fmt::print("retrieval heads: {}\n", cal.heads.empty() ? std::string("none") : fmt::format("{}", fmt::join(cal.heads, "/")));
  fmt::print("policy spec: {}\n", cal.spec);
  if (!args.json.empty()) {
    write_json_atomically(args.json,
                          {{"format", "kvcheck-duo-calibration"},
                           {"version", 1},
                           {"model", dir.string()},
                           {"from_spec", cal.from_spec},
                           {"rank", args.duo_rank},
                           {"items", cal.items},
                           {"queries", cal.queries},
                           {"far_mass", cal.far_mass},
                           {"output_error", cal.output_error},
                           {"heads", cal.heads},
                           {"spec", cal.spec}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
