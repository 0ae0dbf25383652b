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
    // The logits of rows P - 1 .. T - 1 only (forward_from: the same bits as the whole forward's).
    const MatrixRM logits = model.forward_from(p.tokens, P - 1);
    std::vector<float> rows;
    for (std::int64_t r = P - 1; r + 1 < static_cast<std::int64_t>(p.tokens.size()); ++r) {
      const std::span<const float> row(logits.data() + (r - (P - 1)) * static_cast<std::int64_t>(V), V);
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

AccuracyRun::AccuracyRun(Engine& engine, const ModelConfig& c) : engine_(engine), c_(c) {
  fp16_bytes_per_token_ = tier_bytes_per_token({fp16_format(), fp16_format()}, c.head_dim);
  row_.name = engine.policy->name();
  // fp8:scale=page: each FP8 page's two fp32 scales (keys, values) count with the page's tokens.
  page_scales_ = engine.policy->fp8_scale() == Fp8Scale::kPage;
  heads_ = static_cast<double>(c.num_hidden_layers * c.num_key_value_heads);
  row_.layer_tokens.assign(static_cast<std::size_t>(c.num_hidden_layers), 0.0);
  row_.head_bytes_ratio.assign(static_cast<std::size_t>(c.num_hidden_layers),
                               std::vector<double>(static_cast<std::size_t>(c.num_key_value_heads), 0.0));
  trace_.on_decode_head = [this](const DecodeHeadTrace& s) { on_decode_head(s); };
}

void AccuracyRun::on_decode_head(const DecodeHeadTrace& s) {
  Engine& engine = engine_;
  if (s.layer == 0 && s.kv_head == 0) {
    fragmentation_[s.request].push_back(engine.cache->manager().stats().internal_fragmentation);
  }
  engine.cache->live_tokens(s.request, s.layer, s.kv_head, live_, slots_);
  Held h;
  std::set<std::pair<int, std::int64_t>> pages, all_pages;
  const std::int64_t high_pages = engine.cache->manager().table(s.request, s.layer, s.kv_head).count(kHighTier);
  for (const SlotRef& r : slots_) {
    const double token = tier_bytes_per_token(engine.cache->tiers()[static_cast<std::size_t>(r.tier)].tier, c_.head_dim);
    h.bytes += token;
    const auto walk = static_cast<std::size_t>(r.page_index + (r.tier == kHighTier ? 0 : high_pages));
    if (s.pages_read.empty() || std::binary_search(s.pages_read.begin(), s.pages_read.end(), walk)) h.read += token;
    ++(r.tier == 0 ? h.high : h.low);
    if (page_scales_ && r.tier == kLowTier) pages.insert({r.tier, r.page_index});
    all_pages.insert({r.tier, r.page_index});
  }
  h.bytes += static_cast<double>(pages.size() * 2 * sizeof(float));
  h.read += static_cast<double>(pages.size() * 2 * sizeof(float));  // (read only with their pages: every page)
  // A key-range tier's metadata (Quest's): held in every page, and all of it read to choose.
  double metadata = 0.0;
  for (const auto& [tier, page] : all_pages) {
    if (engine.cache->tiers()[static_cast<std::size_t>(tier)].tier.key_range) {
      metadata += static_cast<double>(key_range_bytes(c_.head_dim));
    }
  }
  h.bytes += metadata;
  h.read += metadata;
  head_held_[{s.request, s.layer, s.kv_head}] = h;
}

void AccuracyRun::add_text(std::int64_t request, std::span<const std::int32_t> all, std::int64_t P,
                           std::span<const float> reference_rows, EngineCapture* capture, const PrefillCapture* prefill) {
  const TextWindow w{request, all, P, reference_rows, prefill};
  add_texts({&w, 1}, capture);
}

void AccuracyRun::add_texts(std::span<const TextWindow> windows, EngineCapture* capture) {
  const auto V = static_cast<std::size_t>(c_.vocab_size);
  const auto kv_heads = static_cast<std::size_t>(c_.num_key_value_heads);
  std::vector<EngineGenerateRequest> batch(windows.size());
  for (std::size_t b = 0; b < windows.size(); ++b) {
    const TextWindow& w = windows[b];
    EngineGenerateOptions& eg = batch[b].options;
    batch[b].request = w.request;
    batch[b].prompt = w.all.first(static_cast<std::size_t>(w.P));
    eg.forced = w.all.subspan(static_cast<std::size_t>(w.P));
    eg.max_new_tokens = static_cast<std::int64_t>(eg.forced.size());
    eg.stop_at_eos = false;
    // From a shared prefill: the last prompt row and the steps' only; the row of position P - 1 is
    // then row 0.
    eg.prefill = w.prefill;
    eg.keep_logits = w.prefill == nullptr;
    eg.keep_step_logits = w.prefill != nullptr;
  }
  head_held_.clear();
  fragmentation_.clear();
  engine_.runner->set_trace(&trace_);
  const std::vector<EngineGenerateResult> results = [&] {
    try {
      return engine_generate_batch(engine_, batch);
    } catch (...) {
      engine_.runner->set_trace(nullptr);
      throw;
    }
  }();
  engine_.runner->set_trace(nullptr);
  // Each window in turn, as if run alone (the runner is batch-invariant; the trace keeps each
  // request's heads and steps apart).
  for (std::size_t b = 0; b < windows.size(); ++b) {
    const TextWindow& w = windows[b];
    const EngineGenerateResult& er = results[b];
    const std::int64_t first_row = w.prefill ? 0 : w.P - 1;
    const std::int64_t n = static_cast<std::int64_t>(w.reference_rows.size() / V);
    if (capture) {
      const auto first = er.logits.begin() + first_row * static_cast<std::int64_t>(V);
      capture->text_rows.emplace_back(first, first + n * static_cast<std::int64_t>(V));
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const std::span<const float> e(er.logits.data() + (first_row + i) * static_cast<std::int64_t>(V), V);
      dist_.add(w.reference_rows.subspan(static_cast<std::size_t>(i) * V, V), e);
      nll_ += token_nll(e, w.all[static_cast<std::size_t>(w.P + i)]);
      ++predicted_;
    }
    // The last decode step added the last fed token: the context is the whole window.
    const double context = static_cast<double>(w.all.size());
    double held = 0.0, read = 0.0;
    for (const auto& [head, h] : head_held_) {
      const auto [request, l, k] = head;
      if (request != w.request) continue;
      held += h.bytes;
      read += h.read;
      high_sum_ += static_cast<double>(h.high) / heads_;
      low_sum_ += static_cast<double>(h.low) / heads_;
      row_.layer_tokens[static_cast<std::size_t>(l)] += static_cast<double>(h.high + h.low) / static_cast<double>(kv_heads);
      row_.head_bytes_ratio[static_cast<std::size_t>(l)][static_cast<std::size_t>(k)] +=
          h.bytes / (context * fp16_bytes_per_token_);
    }
    bytes_ratio_sum_ += held / (context * heads_ * fp16_bytes_per_token_);
    read_ratio_sum_ += read / (context * heads_ * fp16_bytes_per_token_);
    const std::vector<double>& fragmentation = fragmentation_[w.request];
    if (fragmentation.size() > row_.fragmentation_by_step.size()) {
      row_.fragmentation_by_step.resize(fragmentation.size(), 0.0);
      fragmentation_samples_.resize(fragmentation.size(), 0);
    }
    for (std::size_t t = 0; t < fragmentation.size(); ++t) {
      row_.fragmentation_by_step[t] += fragmentation[t];
      ++fragmentation_samples_[t];
    }
    ++windows_;
  }
}

std::vector<std::int32_t> AccuracyRun::add_retrieval(std::int64_t request, const RetrievalCase& rc,
                                                     const PrefillCapture* prefill) {
  const RetrievalRun item{request, &rc, prefill};
  return std::move(add_retrievals({&item, 1}).front());
}

std::vector<std::vector<std::int32_t>> AccuracyRun::add_retrievals(std::span<const RetrievalRun> items) {
  // Retrieval runs after the text windows: the FP8 counts are the text windows' (finish_text).
  finish_text();
  std::vector<EngineGenerateRequest> batch(items.size());
  for (std::size_t b = 0; b < items.size(); ++b) {
    batch[b].request = items[b].request;
    batch[b].prompt = items[b].item->prompt;
    batch[b].options.max_new_tokens = static_cast<std::int64_t>(items[b].item->answer.size());
    batch[b].options.stop_at_eos = false;
    batch[b].options.prefill = items[b].prefill;
  }
  std::vector<EngineGenerateResult> results = engine_generate_batch(engine_, batch);
  std::vector<std::vector<std::int32_t>> generated;
  for (std::size_t b = 0; b < items.size(); ++b) {
    const RetrievalCase& rc = *items[b].item;
    const bool ok = exact_match(results[b].generated, rc.answer);
    row_.overall.add(ok);
    row_.by_length[rc.item.length_bucket].add(ok);
    row_.by_task[rc.item.task].add(ok);
    generated.push_back(std::move(results[b].generated));
  }
  return generated;
}

void AccuracyRun::finish_text() {
  if (text_finished_) return;
  text_finished_ = true;
  row_.stores_fp8 = stores_fp8(*engine_.policy);
  row_.fp8_saturated = engine_.cache->fp8_saturated();  // over the text prompts
  row_.fp8_stored = engine_.cache->fp8_stored();
}

AccuracyRow AccuracyRun::finish() {
  finish_text();
  row_.dist = dist_.summary();
  row_.ppl = perplexity(nll_, predicted_);
  const double count = static_cast<double>(windows_);
  row_.bytes_ratio = bytes_ratio_sum_ / count;
  row_.read_ratio = read_ratio_sum_ / count;
  row_.high_per_head = high_sum_ / count;
  row_.low_per_head = low_sum_ / count;
  for (double& t : row_.layer_tokens) t /= count;
  for (std::vector<double>& layer : row_.head_bytes_ratio) {
    for (double& b : layer) b /= count;
  }
  for (std::size_t t = 0; t < row_.fragmentation_by_step.size(); ++t) {
    row_.fragmentation_by_step[t] /= static_cast<double>(fragmentation_samples_[t]);
  }
  return std::move(row_);
}

AccuracyRow measure_accuracy(const ReferenceModel& model, const AccuracyInputs& inputs, const VerifyArgs& args,
                             const std::string& spec, std::int64_t oracle_prompts, bool retrieval,
                             EngineCapture* capture) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& c = model.config();
  const std::int64_t P = inputs.prompt_tokens;
  const std::string run_spec = resolve_fp8_calibration(
      model, args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model), args,
      spec);
  std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, run_spec));
  AccuracyRow row;
  {
    AccuracyRun run(*engine, c);
    for (std::size_t p = 0; p < inputs.prompts.size(); ++p) {
      run.add_text(static_cast<std::int64_t>(p), inputs.prompts[p].tokens, P, inputs.reference.rows[p], capture);
    }
    run.finish_text();
    for (std::size_t i = 0; retrieval && i < inputs.retrieval.size(); ++i) {
      std::vector<std::int32_t> generated = run.add_retrieval(100000 + static_cast<std::int64_t>(i), inputs.retrieval[i]);
      if (capture) capture->generated.push_back(std::move(generated));
    }
    row = run.finish();
  }
  if (oracle_prompts > 0) {
    const OracleCounts counts = run_step_oracle(model, args, run_spec, inputs.prompts, P, oracle_prompts);
    row.oracle_checks = counts.checks;
    row.oracle_violations = counts.violations;
  }
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return row;
}

OracleCounts run_step_oracle(const ReferenceModel& model, const VerifyArgs& args, const std::string& run_spec,
                             const std::vector<Prompt>& prompts, std::int64_t P, std::int64_t oracle_prompts,
                             std::span<const PrefillCapture* const> prefills, std::int64_t max_steps) {
  std::unique_ptr<Engine> checked = make_engine(model, single_request_engine_options(args, run_spec));
  EngineStepOracle oracle(*checked);
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(oracle_prompts), prompts.size());
  for (std::size_t p = 0; p < n; ++p) {
    oracle.begin(prompts[p].source);
    const std::span<const std::int32_t> all(prompts[p].tokens);
    EngineGenerateOptions eg;
    eg.forced = all.subspan(static_cast<std::size_t>(P));
    if (max_steps > 0 && static_cast<std::int64_t>(eg.forced.size()) > max_steps) {
      eg.forced = eg.forced.first(static_cast<std::size_t>(max_steps));
    }
    eg.max_new_tokens = static_cast<std::int64_t>(eg.forced.size());
    eg.stop_at_eos = false;
    eg.prefill = p < prefills.size() ? prefills[p] : nullptr;
    engine_generate(*checked, static_cast<std::int64_t>(p), all.first(static_cast<std::size_t>(P)), eg);
  }
  return {oracle.checks(), oracle.violations()};
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
