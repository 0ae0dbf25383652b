#include "cli/accuracy_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/fp8_calibration.h"
#include "kernels/cpu/kv_bytes.h"
#include "optimized/engine.h"
#include "oracles/engine_step_oracle.h"
#include "oracles/eval_retrieval.h"
#include "reference/errors.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

AccuracyInputs prepare_accuracy_inputs(const ReferenceModel& model, const std::filesystem::path& dir,
                                       const VerifyArgs& args) {
  const ModelConfig& c = model.config();
  AccuracyInputs in;
  VerifyArgs text_args = args;
  text_args.feed = "text";
  // One read of the tokenizer for the prompts and the retrieval items (a tokenizer.json is ~10 MB).
  const std::optional<Tokenizer> tokenizer_found = Tokenizer::find(dir);
  in.prompts = make_prompts(text_args, dir, c, tokenizer_found ? &*tokenizer_found : nullptr, in.origin,
                            &in.heldout_file);
  in.prompt_tokens = args.prompt_tokens;
  if (args.sweep_retrieval > 0 && !tokenizer_found && !args.retrieval_file.empty()) {
    throw input_error("--retrieval", args.retrieval_file,
                      "needs the model's tokenizer (tokenizer.json or tokenizer.model); {} has none", dir.string());
  }
  if (args.sweep_retrieval > 0 && tokenizer_found) {
    const Tokenizer& tokenizer = *tokenizer_found;
    const std::filesystem::path file = retrieval_path(args.retrieval_file);
    in.retrieval_file = file;
    const std::vector<RetrievalItem> items = retrieval_subset(load_retrieval(file), args.sweep_retrieval);
    std::int64_t longest_skipped = 0;
    for (const RetrievalItem& it : items) {
      RetrievalCase rc{it, tokenizer.encode(it.prompt, true),
                       retrieval_answer_ids(tokenizer, it, fmt::format("{}:{}", file.string(), it.line))};
      const auto n = static_cast<std::int64_t>(rc.prompt.size() + rc.answer.size());
      if (n > c.max_position_embeddings) {
        // A model with a shorter context than the longest items still gets the items it can run.
        ++in.retrieval_skipped;
        longest_skipped = std::max(longest_skipped, n);
        continue;
      }
      in.retrieval.push_back(std::move(rc));
    }
    if (in.retrieval_skipped > 0) {
      fmt::print(stderr,
                 "kvcheck: warning: {} of the {} retrieval items do not fit max_position_embeddings {} of {} (up to {} "
                 "prompt and answer tokens) and are skipped; accuracy is over the other {}\n",
                 in.retrieval_skipped, items.size(), c.max_position_embeddings, dir.string(), longest_skipped,
                 in.retrieval.size());
    }
  }
  return in;
}

TextReference compute_text_reference(const ReferenceModel& model, const AccuracyInputs& inputs, bool attention) {
  const auto V = static_cast<std::size_t>(model.config().vocab_size);
  const std::int64_t P = inputs.prompt_tokens;
  TextReference ref;
  for (const Prompt& p : inputs.prompts) {
    const MatrixRM logits = model.forward(p.tokens);
    std::vector<float> rows;
    for (std::int64_t r = P - 1; r + 1 < static_cast<std::int64_t>(p.tokens.size()); ++r) {
      const std::span<const float> row(logits.data() + r * static_cast<std::int64_t>(V), V);
      rows.insert(rows.end(), row.begin(), row.end());
      ref.nll += token_nll(row, p.tokens[static_cast<std::size_t>(r + 1)]);
      ++ref.predicted;
    }
    ref.rows.push_back(std::move(rows));
  }
  if (attention && !inputs.prompts.empty()) {
    std::vector<std::vector<std::int32_t>> tokens;
    for (const Prompt& p : inputs.prompts) tokens.push_back(p.tokens);
    const auto continuation = static_cast<std::int64_t>(tokens.front().size()) - P;
    ref.attention = attention_structure(model, tokens, std::max<std::int64_t>(1, continuation));
  }
  return ref;
}

AccuracyRow measure_accuracy(const ReferenceModel& model, const AccuracyInputs& inputs, const VerifyArgs& args,
                             const std::string& spec, std::int64_t oracle_prompts, bool retrieval,
                             EngineCapture* capture) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& c = model.config();
  const auto V = static_cast<std::size_t>(c.vocab_size);
  const std::int64_t P = inputs.prompt_tokens;
  const double fp16_bytes_per_token = tier_bytes_per_token({fp16_format(), fp16_format()}, c.head_dim);
  const std::string run_spec = resolve_fp8_calibration(
      model, args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model), args,
      spec);
  std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, run_spec));
  AccuracyRow row;
  row.name = engine->policy->name();
  // fp8:scale=page: each FP8 page's two fp32 scales (keys, values) count with the page's tokens.
  const bool page_scales = engine->policy->fp8_scale() == Fp8Scale::kPage;
  // Bytes and tokens held at each head's latest decode step.
  struct Held {
    double bytes = 0.0;
    double read = 0.0;  // the bytes the step's attention read (a page-selecting policy: its pages)
    std::int64_t high = 0, low = 0;
  };
  std::map<std::pair<std::int32_t, std::int32_t>, Held> head_held;
  std::vector<double> fragmentation;  // this prompt's, per decode step
  std::vector<LiveToken> live;
  std::vector<SlotRef> slots;
  RunnerTrace trace;
  trace.on_decode_head = [&](const DecodeHeadTrace& s) {
    if (s.layer == 0 && s.kv_head == 0) fragmentation.push_back(engine->cache->manager().stats().internal_fragmentation);
    engine->cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
    Held h;
    std::set<std::pair<int, std::int64_t>> pages, all_pages;
    const std::int64_t high_pages = engine->cache->manager().table(s.request, s.layer, s.kv_head).count(kHighTier);
    for (const SlotRef& r : slots) {
      const double token = tier_bytes_per_token(engine->cache->tiers()[static_cast<std::size_t>(r.tier)].tier, c.head_dim);
      h.bytes += token;
      const auto walk = static_cast<std::size_t>(r.page_index + (r.tier == kHighTier ? 0 : high_pages));
      if (s.pages_read.empty() || std::binary_search(s.pages_read.begin(), s.pages_read.end(), walk)) h.read += token;
      ++(r.tier == 0 ? h.high : h.low);
      if (page_scales && r.tier == kLowTier) pages.insert({r.tier, r.page_index});
      all_pages.insert({r.tier, r.page_index});
    }
    h.bytes += static_cast<double>(pages.size() * 2 * sizeof(float));
    h.read += static_cast<double>(pages.size() * 2 * sizeof(float));  // (read only with their pages: every page)
    // A key-range tier's metadata (Quest's): held in every page, and all of it read to choose.
    double metadata = 0.0;
    for (const auto& [tier, page] : all_pages) {
      if (engine->cache->tiers()[static_cast<std::size_t>(tier)].tier.key_range) {
        metadata += static_cast<double>(key_range_bytes(c.head_dim));
      }
    }
    h.bytes += metadata;
    h.read += metadata;
    head_held[{s.layer, s.kv_head}] = h;
  };
  engine->runner->set_trace(&trace);
  DistributionComparison dist;
  double nll = 0.0, bytes_ratio_sum = 0.0, read_ratio_sum = 0.0, high_sum = 0.0, low_sum = 0.0;
  std::int64_t predicted = 0;
  const double heads = static_cast<double>(c.num_hidden_layers * c.num_key_value_heads);
  const auto layers = static_cast<std::size_t>(c.num_hidden_layers), kv_heads = static_cast<std::size_t>(c.num_key_value_heads);
  row.layer_tokens.assign(layers, 0.0);
  row.head_bytes_ratio.assign(layers, std::vector<double>(kv_heads, 0.0));
  std::vector<std::int64_t> fragmentation_samples;
  for (std::size_t p = 0; p < inputs.prompts.size(); ++p) {
    const std::span<const std::int32_t> all(inputs.prompts[p].tokens);
    EngineGenerateOptions eg;
    eg.forced = all.subspan(static_cast<std::size_t>(P));
    eg.max_new_tokens = static_cast<std::int64_t>(eg.forced.size());
    eg.stop_at_eos = false;
    eg.keep_logits = true;
    head_held.clear();
    fragmentation.clear();
    const EngineGenerateResult er =
        engine_generate(*engine, static_cast<std::int64_t>(p), all.first(static_cast<std::size_t>(P)), eg);
    const std::vector<float>& rr = inputs.reference.rows[p];
    const std::int64_t n = static_cast<std::int64_t>(rr.size() / V);
    if (capture) {
      const auto first = er.logits.begin() + (P - 1) * static_cast<std::int64_t>(V);
      capture->text_rows.emplace_back(first, first + n * static_cast<std::int64_t>(V));
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const std::span<const float> e(er.logits.data() + (P - 1 + i) * static_cast<std::int64_t>(V), V);
      dist.add(std::span<const float>(rr.data() + i * static_cast<std::int64_t>(V), V), e);
      nll += token_nll(e, all[static_cast<std::size_t>(P + i)]);
      ++predicted;
    }
    // The last decode step added the last fed token: the context is the whole window.
    const double context = static_cast<double>(all.size());
    double held = 0.0, read = 0.0;
    for (const auto& [head, h] : head_held) {
      held += h.bytes;
      read += h.read;
      high_sum += static_cast<double>(h.high) / heads;
      low_sum += static_cast<double>(h.low) / heads;
      const auto [l, k] = head;
      row.layer_tokens[static_cast<std::size_t>(l)] += static_cast<double>(h.high + h.low) / static_cast<double>(kv_heads);
      row.head_bytes_ratio[static_cast<std::size_t>(l)][static_cast<std::size_t>(k)] += h.bytes / (context * fp16_bytes_per_token);
    }
    bytes_ratio_sum += held / (context * heads * fp16_bytes_per_token);
    read_ratio_sum += read / (context * heads * fp16_bytes_per_token);
    if (fragmentation.size() > row.fragmentation_by_step.size()) {
      row.fragmentation_by_step.resize(fragmentation.size(), 0.0);
      fragmentation_samples.resize(fragmentation.size(), 0);
    }
    for (std::size_t t = 0; t < fragmentation.size(); ++t) {
      row.fragmentation_by_step[t] += fragmentation[t];
      ++fragmentation_samples[t];
    }
  }
  engine->runner->set_trace(nullptr);
  row.stores_fp8 = stores_fp8(*engine->policy);
  row.fp8_saturated = engine->cache->fp8_saturated();  // over the text prompts
  row.fp8_stored = engine->cache->fp8_stored();
  for (std::size_t i = 0; retrieval && i < inputs.retrieval.size(); ++i) {
    const RetrievalCase& rc = inputs.retrieval[i];
    EngineGenerateOptions eg;
    eg.max_new_tokens = static_cast<std::int64_t>(rc.answer.size());
    eg.stop_at_eos = false;
    const EngineGenerateResult er = engine_generate(*engine, 100000 + static_cast<std::int64_t>(i), rc.prompt, eg);
    const bool ok = exact_match(er.generated, rc.answer);
    if (capture) capture->generated.push_back(er.generated);
    row.overall.add(ok);
    row.by_length[rc.item.length_bucket].add(ok);
    row.by_task[rc.item.task].add(ok);
  }
  row.dist = dist.summary();
  row.ppl = perplexity(nll, predicted);
  const double count = static_cast<double>(inputs.prompts.size());
  row.bytes_ratio = bytes_ratio_sum / count;
  row.read_ratio = read_ratio_sum / count;
  row.high_per_head = high_sum / count;
  row.low_per_head = low_sum / count;
  for (double& t : row.layer_tokens) t /= count;
  for (std::vector<double>& layer : row.head_bytes_ratio) {
    for (double& b : layer) b /= count;
  }
  for (std::size_t t = 0; t < row.fragmentation_by_step.size(); ++t) {
    row.fragmentation_by_step[t] /= static_cast<double>(fragmentation_samples[t]);
  }

  if (oracle_prompts > 0) {
    std::unique_ptr<Engine> checked = make_engine(model, single_request_engine_options(args, run_spec));
    EngineStepOracle oracle(*checked);
    const auto n = std::min<std::size_t>(static_cast<std::size_t>(oracle_prompts), inputs.prompts.size());
    for (std::size_t p = 0; p < n; ++p) {
      oracle.begin(inputs.prompts[p].source);
      const std::span<const std::int32_t> all(inputs.prompts[p].tokens);
      EngineGenerateOptions eg;
      eg.forced = all.subspan(static_cast<std::size_t>(P));
      eg.max_new_tokens = static_cast<std::int64_t>(eg.forced.size());
      eg.stop_at_eos = false;
      engine_generate(*checked, static_cast<std::int64_t>(p), all.first(static_cast<std::size_t>(P)), eg);
    }
    row.oracle_checks = oracle.checks();
    row.oracle_violations = oracle.violations();
  }
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return row;
}

nlohmann::json accuracy_row_json(const AccuracyRow& row, const std::string& spec, std::int64_t budget) {
  nlohmann::json lengths = nlohmann::json::object(), tasks = nlohmann::json::object();
  for (const auto& [len, a] : row.by_length) lengths[std::to_string(len)] = a.accuracy();
  for (const auto& [task, a] : row.by_task) tasks[task] = a.accuracy();
  return {{"policy", row.name},
          {"spec", spec},
          {"budget", budget == 0 ? nlohmann::json(nullptr) : nlohmann::json(budget)},
          {"kv_bytes_vs_fp16", row.bytes_ratio},
          {"kv_bytes_read_vs_fp16", row.read_ratio},
          {"high_tokens_per_head", row.high_per_head},
          {"low_tokens_per_head", row.low_per_head},
          {"tokens_per_layer", row.layer_tokens},
          {"bytes_vs_fp16_per_head", row.head_bytes_ratio},
          {"fragmentation_by_step", row.fragmentation_by_step},
          {"kl_mean", row.dist.kl_mean},
          {"kl_stderr", row.dist.kl_stderr},
          {"kl_p99", row.dist.kl_p99},
          {"top1_agreement", row.dist.top1_agreement},
          {"perplexity", row.ppl},
          {"retrieval_items", row.overall.total},
          {"retrieval_accuracy", row.overall.total ? nlohmann::json(row.overall.accuracy()) : nlohmann::json(nullptr)},
          {"retrieval_accuracy_by_length", lengths},
          {"retrieval_accuracy_by_task", tasks}};
}

}  // namespace kvcheck::cli
