#include "cli/report_long.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/fp8_calibration.h"
#include "cli/progress.h"
#include "cli/report_pipeline.h"
#include "cli/report_reference_cache.h"
#include "kernels/cpu/kv_bytes.h"
#include "optimized/engine.h"
#include "optimized/kv_policy.h"
#include "oracles/accuracy_metrics.h"
#include "oracles/eval_data.h"
#include "oracles/eval_retrieval.h"
#include "reference/chat_template.h"
#include "reference/errors.h"
#include "reference/model.h"
#include "reference/parallel.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {
namespace {

constexpr std::int64_t kUnset = -1;

// Windows or items decoded together on one engine (engine_generate_batch: each decode step reads
// the weights once for all of them; the same bits as one at a time). SmolLM2-135M at batch 4
// spends a quarter of batch 1's projection time per token (docs/perf/2026-11-28-smollm2-bench-engine.json).
constexpr std::size_t kLongBatch = 4;

// Configurations measured side by side (report --long): at most one per thread, and at most this
// many, each holding one engine's page pool at a time (at 8K tokens and kLongBatch requests, up to
// 1.5 GB for full-fp32).
constexpr std::int64_t kLongLanes = 4;

// Calls run(first, end) for consecutive batches [first, end) of at most kLongBatch of n things.
template <typename Run>
void in_batches(std::size_t n, Run run) {
  for (std::size_t first = 0; first < n; first += kLongBatch) run(first, std::min(n, first + kLongBatch));
}

// The windows and items of one length, and what the reference and the full-precision engine did
// on them.
struct LengthInputs {
  std::int64_t length = 0;
  std::vector<Prompt> windows;                 // `length` tokens each
  std::vector<std::vector<float>> reference;   // per window: [continuation][vocab]
  std::vector<double> reference_nll;           // per window
  std::vector<RetrievalCase> items;
  std::vector<std::int64_t> item_depth;        // per item
  std::vector<std::vector<std::int32_t>> full_precision;  // per item: the full-fp32 engine's greedy answer
};

// "0-1K", "4-8K"; in tokens when a bound is not a multiple of 1024 ("0-128").
std::string bin_label(std::int64_t from, std::int64_t to) {
  if (from % 1024 == 0 && to % 1024 == 0) return fmt::format("{}-{}K", from / 1024, to / 1024);
  return fmt::format("{}-{}", from, to);
}

// Text windows of `length` tokens cut from the documents: window j of length index li starts at
// token 0 of document (li + j) mod documents (BOS first), so the lengths draw on different text.
std::vector<Prompt> long_windows(const std::vector<std::vector<std::int32_t>>& docs, const std::vector<std::string>& ids,
                                 const std::filesystem::path& file, std::size_t li, std::int64_t length,
                                 std::int64_t count) {
  std::vector<Prompt> out;
  for (std::size_t tried = 0; static_cast<std::int64_t>(out.size()) < count && tried < docs.size(); ++tried) {
    const std::size_t d = (li + tried) % docs.size();
    if (static_cast<std::int64_t>(docs[d].size()) < length) continue;
    out.push_back({fmt::format("{} @ token 0, {} tokens", ids[d], length),
                   std::vector<std::int32_t>(docs[d].begin(), docs[d].begin() + length)});
  }
  if (static_cast<std::int64_t>(out.size()) < count) {
    throw input_error(file.string(), "documents", "hold only {} documents of at least {} tokens; --long asks for {} windows",
                      out.size(), length, count);
  }
  return out;
}

// The item's prompt as the model reads it: the user message in the model's chat template (when it
// has one) with the answer's prefix opening the assistant's turn; otherwise the prompt and prefix
// as plain text.
RetrievalCase long_case(const Tokenizer& tokenizer, const std::optional<std::string>& chat_template,
                        const std::filesystem::path& model, const RetrievalItem& item, const std::string& where) {
  RetrievalItem rendered = item;
  std::vector<std::int32_t> prompt;
  if (chat_template) {
    rendered.prompt = render_chat(*chat_template, {{"user", item.prompt}}, true, model.string()) + item.answer_prefix;
    prompt = tokenizer.encode(rendered.prompt, false);
  } else {
    rendered.prompt = item.answer_prefix.empty() ? item.prompt : item.prompt + " " + item.answer_prefix;
    prompt = tokenizer.encode(rendered.prompt, true);
  }
  std::vector<std::int32_t> answer = retrieval_answer_ids(tokenizer, rendered, where);
  return {item, std::move(prompt), std::move(answer)};
}

// The items of one (length, depth) cell: `count` of them, the task rotating with the cell so that
// every task covers every length and depth across the grid.
std::vector<const RetrievalItem*> cell_items(const std::vector<RetrievalItem>& all, std::int64_t length,
                                             std::int64_t depth, std::size_t rotation, std::int64_t count) {
  std::vector<const RetrievalItem*> cell;
  for (const RetrievalItem& it : all) {
    if (it.length_bucket == length && it.depth == depth) cell.push_back(&it);
  }
  std::sort(cell.begin(), cell.end(), [](const RetrievalItem* a, const RetrievalItem* b) {
    return a->task != b->task ? a->task < b->task : a->id < b->id;
  });
  if (!cell.empty()) std::rotate(cell.begin(), cell.begin() + static_cast<std::ptrdiff_t>(rotation % cell.size()), cell.end());
  if (static_cast<std::int64_t>(cell.size()) > count) cell.resize(static_cast<std::size_t>(count));
  return cell;
}

// The reference's rows of one window (the continuation's C positions), from the cache or computed.
bool window_reference(const ReferenceModel& model, const Prompt& window, std::int64_t prompt_tokens,
                      const std::filesystem::path& cache_dir, const std::string& model_key, std::vector<float>& rows,
                      double& nll) {
  AccuracyInputs one;
  one.prompts = {window};
  one.prompt_tokens = prompt_tokens;
  std::string ids;
  for (const std::int32_t t : window.tokens) ids += fmt::format("{},", t);
  const std::string key =
      file_hash_of_string(fmt::format("long|{}|{}|{}", model_key, prompt_tokens, ids));
  if (std::optional<TextReference> cached = load_cached_reference(cache_dir, key, one, model.config(), false)) {
    rows = std::move(cached->rows.front());
    nll = cached->nll;
    return true;
  }
  TextReference ref = compute_text_reference(model, one, false);
  if (!store_cached_reference(cache_dir, key, ref)) {
    fmt::print(stderr, "kvcheck report: warning: the reference cache {} could not be written; the next run computes it again\n",
               cache_dir.string());
  }
  rows = std::move(ref.rows.front());
  nll = ref.nll;
  return false;
}

// The wall and CPU seconds of a phase since its construction: "84.4 s on 1.8 cores".
struct PhaseClock {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double cpu0 = cpu_seconds();
  std::string text() const {
    const double wall = seconds_since(t0);
    return fmt::format("{:.1f} s on {:.1f} cores", wall, wall > 0.0 ? (cpu_seconds() - cpu0) / wall : 0.0);
  }
};

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }


// A budgeted policy's spec at a fraction of a window of `length` tokens: the fraction of the length
// in tokens per head; for Quest, which reads K pages per step besides the one being written, the
// pages that hold that many tokens (at least one).
std::string spec_at_length(const std::string& spec, const BudgetFraction& f, std::int64_t length, const ModelConfig& c,
                           std::int64_t page_bytes) {
  if (spec == "quest") {
    const std::int64_t per_page = tokens_per_page(make_policy("quest")->tiers().front(), c.head_dim, page_bytes);
    return fmt::format("quest:pages={}", std::max<std::int64_t>(1, f.of(length) / per_page));
  }
  return *policy_spec_at_budget(spec, f.of(length));
}

// One configuration at one length.
struct LengthRow {
  std::string spec;  // the spec run (the budget of this length, FP8 scales resolved)
  AccuracyRow row;
  double nll = 0.0, reference_nll = 0.0;
  std::int64_t predicted = 0;
  std::vector<AccuracyCounter> exact, agree;  // per depth
};
// One configuration over every length.
struct ConfigAccum {
  std::string engine_name;
  std::vector<LengthRow> lengths;
  DistributionComparison overall;
  AccuracyCounter exact, agree;
  std::map<std::string, AccuracyCounter> by_task;
  std::int64_t checks = 0, violations = 0;
  double wall_s = 0.0;
};

nlohmann::json long_row_json(const LongConfig& cfg, const ConfigAccum& acc, const std::vector<LengthInputs>& lengths) {
  double nll = 0.0, reference_nll = 0.0, bytes_sum = 0.0, read_sum = 0.0;
  std::int64_t predicted = 0, fp8_saturated = 0, fp8_stored = 0;
  bool stores_fp8_any = false;
  nlohmann::json by_position = nlohmann::json::array(), by_length = nlohmann::json::object();
  nlohmann::json grid_exact = nlohmann::json::array(), grid_agree = nlohmann::json::array(), grid_items = nlohmann::json::array();
  for (std::size_t li = 0; li < acc.lengths.size(); ++li) {
    const LengthRow& lr = acc.lengths[li];
    const std::int64_t L = lengths[li].length, from = li == 0 ? 0 : lengths[li - 1].length;
    nll += lr.nll;
    reference_nll += lr.reference_nll;
    predicted += lr.predicted;
    bytes_sum += lr.row.bytes_ratio;
    read_sum += lr.row.read_ratio;
    stores_fp8_any = stores_fp8_any || lr.row.stores_fp8;
    fp8_saturated += lr.row.fp8_saturated;
    fp8_stored += lr.row.fp8_stored;
    by_position.push_back({{"label", bin_label(from, L)},
                           {"from", from},
                           {"to", L},
                           {"spec", lr.spec},
                           {"kl_mean", lr.row.dist.kl_mean},
                           {"kl_p99", lr.row.dist.kl_p99},
                           {"top1_agreement", lr.row.dist.top1_agreement},
                           {"perplexity_ratio", std::exp((lr.nll - lr.reference_nll) / static_cast<double>(lr.predicted))},
                           {"tokens", lr.predicted},
                           {"kv_bytes_vs_fp16", lr.row.bytes_ratio},
                           {"kv_bytes_read_vs_fp16", lr.row.read_ratio}});
    nlohmann::json ge = nlohmann::json::array(), ga = nlohmann::json::array(), gi = nlohmann::json::array();
    AccuracyCounter length_exact;
    for (std::size_t d = 0; d < lr.exact.size(); ++d) {
      ge.push_back(number_or_null(lr.exact[d].accuracy()));
      ga.push_back(number_or_null(lr.agree[d].accuracy()));
      gi.push_back(lr.exact[d].total);
      length_exact.correct += lr.exact[d].correct;
      length_exact.total += lr.exact[d].total;
    }
    grid_exact.push_back(ge);
    grid_agree.push_back(ga);
    grid_items.push_back(gi);
    by_length[std::to_string(L)] = number_or_null(length_exact.accuracy());
  }
  const DistributionSummary s = acc.overall.summary();
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& [task, a] : acc.by_task) tasks[task] = number_or_null(a.accuracy());
  const double count = static_cast<double>(acc.lengths.size());
  nlohmann::json r = {{"policy", cfg.name},
                      {"spec", cfg.spec},
                      {"engine_policy", acc.engine_name},
                      {"budget", nullptr},
                      {"budget_fraction", cfg.fraction ? nlohmann::json(cfg.fraction->text()) : nlohmann::json(nullptr)},
                      {"kv_bytes_vs_fp16", bytes_sum / count},
                      {"kv_bytes_read_vs_fp16", read_sum / count},
                      {"kl_mean", s.kl_mean},
                      {"kl_stderr", s.kl_stderr},
                      {"kl_p99", s.kl_p99},
                      {"kl_p999", s.kl_p999},
                      {"kl_p95", s.kl_p95},
                      {"kl_p90", s.kl_p90},
                      {"kl_p50", s.kl_p50},
                      {"kl_max", s.kl_max},
                      {"rms_delta_p", s.rms_delta_p},
                      {"top1_agreement", s.top1_agreement},
                      {"perplexity", perplexity(nll, predicted)},
                      {"perplexity_ratio", std::exp((nll - reference_nll) / static_cast<double>(predicted))},
                      {"retrieval_items", acc.exact.total},
                      {"retrieval_accuracy", acc.exact.total ? number_or_null(acc.exact.accuracy()) : nlohmann::json(nullptr)},
                      {"retrieval_agreement", acc.agree.total ? number_or_null(acc.agree.accuracy()) : nlohmann::json(nullptr)},
                      {"retrieval_accuracy_by_length", by_length},
                      {"retrieval_accuracy_by_task", tasks},
                      {"by_position", by_position},
                      {"retrieval_grid", {{"exact", grid_exact}, {"agreement", grid_agree}, {"items", grid_items}}},
                      {"oracle_checks", acc.checks},
                      {"oracle_violations", acc.violations},
                      {"wall_s", acc.wall_s}};
  add_fp8_saturation(r, cfg.name, stores_fp8_any, fp8_saturated, fp8_stored);
  return r;
}

}  // namespace

std::string BudgetFraction::text() const { return fmt::format("{}/{}", num, den); }

BudgetFraction parse_budget_fraction(const std::string& text) {
  const std::size_t slash = text.find('/');
  BudgetFraction f;
  try {
    std::size_t used = 0;
    if (slash == std::string::npos) {
      f.num = std::stoll(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
      f.den = 1;
    } else {
      f.num = std::stoll(text.substr(0, slash), &used);
      if (used != slash) throw std::invalid_argument(text);
      const std::string den = text.substr(slash + 1);
      f.den = std::stoll(den, &used);
      if (used != den.size()) throw std::invalid_argument(text);
    }
  } catch (const std::exception&) {
    throw input_error("--fractions", text, "needs fractions of the context such as 1/8");
  }
  if (f.num <= 0 || f.den <= 0 || f.num > f.den) {
    throw input_error("--fractions", text, "must lie in (0, 1] of the context, such as 1/8");
  }
  return f;
}

LongMode long_mode(const ReportArgs& a) {
  LongMode m;
  if (a.quick) {
    m.lengths = {1024, 2048};
    m.windows = 1;
    m.continuation = 16;
    m.depths = {0, 50, 100};
    m.fractions = {{1, 8}};
  } else {
    m.lengths = {1024, 2048, 4096, 8192};
    m.windows = 2;
    m.continuation = 64;
    for (std::int64_t d = 0; d <= 100; d += 10) m.depths.push_back(d);
    m.fractions = {{1, 8}, {1, 4}, {1, 2}};
  }
  if (!a.lengths.empty()) m.lengths = a.lengths;
  std::sort(m.lengths.begin(), m.lengths.end());
  m.lengths.erase(std::unique(m.lengths.begin(), m.lengths.end()), m.lengths.end());
  if (!a.depths.empty()) m.depths = a.depths;
  if (a.prompts > 0) m.windows = a.prompts;
  if (a.max_new_tokens > 0) m.continuation = a.max_new_tokens;
  if (a.oracle_prompts != kUnset) m.oracle_windows = a.oracle_prompts;
  if (a.retrieval_items != kUnset) m.cell_items = a.retrieval_items;
  if (!a.fractions.empty()) {
    m.fractions.clear();
    for (const std::string& f : a.fractions) m.fractions.push_back(parse_budget_fraction(f));
  }
  for (const std::int64_t L : m.lengths) {
    if (L <= m.continuation) {
      throw input_error("--lengths", fmt::format("{}", L), "must exceed the {} continuation tokens (--max-new-tokens)",
                        m.continuation);
    }
  }
  for (const std::int64_t d : m.depths) {
    if (d < 0 || d > 100) throw input_error("--depths", fmt::format("{}", d), "must be a percent in 0..100");
  }
  return m;
}

std::vector<std::string> long_default_policies(bool quick) {
  if (quick) {
    return {"full-fp16", "fp8", "int8", "int4", "kv-bits", "kivi2", "kivi4", "leankv", "streaming", "h2o", "snapkv", "quest"};
  }
  std::vector<std::string> p = policy_names();
  for (const char* extra : {"fp8:scale=calibrated", "kv-bits:k=4,v=8", "kv-bits:k=4,v=2", "kv-bits:k=2,v=4",
                            "kv-bits:k=2,v=2", "kv-bits:k=2,v=2,rotate=hadamard", "int4:rotate=hadamard",
                            "kivi2:rotate=hadamard", "leankv:alpha_l=0.2"}) {
    p.emplace_back(extra);
  }
  return p;
}

std::vector<LongConfig> long_configs(const std::vector<std::string>& policies, const std::vector<BudgetFraction>& fractions) {
  std::vector<LongConfig> configs;
  for (const std::string& list : policies) {
    for (const std::string& name : split_policy_list(list)) {
      make_policy(name);  // InputError naming a bad policy, before anything runs
      if (!policy_spec_at_budget(name, 1) && name != "quest") {
        configs.push_back({make_policy(name)->name(), name, std::nullopt});
        continue;
      }
      for (const BudgetFraction& f : fractions) configs.push_back({fmt::format("{}@{}", name, f.text()), name, f});
    }
  }
  return configs;
}

int run_long_report(const ReportArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  const std::optional<ReportBaseline> baseline = report_baseline(args);
  if (!args.budgets.empty()) {
    throw input_error("kvcheck report --long", "--budgets", "budgets of --long are fractions of the context: use --fractions");
  }
  const LongMode mode = long_mode(args);
  check_retrieval_flag(args.retrieval_file);
  const std::filesystem::path heldout =
      args.heldout_file.empty() ? datasets_dir() / "eval" / "long-text.jsonl" : std::filesystem::path(args.heldout_file);
  const std::filesystem::path retrieval_file = args.retrieval_file.empty() ? datasets_dir() / "eval" / "long-retrieval.jsonl"
                                                                           : std::filesystem::path(args.retrieval_file);
  const std::vector<HeldoutDocument> documents = load_heldout(heldout);
  const std::vector<RetrievalItem> all_items = mode.depths.empty() ? std::vector<RetrievalItem>{} : load_retrieval(retrieval_file);
  const std::filesystem::path dir = report_model_dir(args.model);
  const std::vector<LongConfig> configs =
      long_configs(args.policies.empty() ? long_default_policies(args.quick) : args.policies, mode.fractions);

  const ReferenceModel model = ReferenceModel::load(dir);
  const ModelConfig& c = model.config();
  const std::optional<Tokenizer> tokenizer = Tokenizer::find(dir);
  if (!tokenizer) {
    throw input_error(dir.string(), "tokenizer", "--long reads held-out text and retrieval items: the model needs its "
                      "tokenizer (tokenizer.json, tokenizer.model or a GGUF's)");
  }
  for (const std::int64_t L : mode.lengths) {
    if (L > c.max_position_embeddings) {
      throw input_error("--lengths", fmt::format("{}", L), "exceeds max_position_embeddings {} of {}",
                        c.max_position_embeddings, dir.string());
    }
  }
  const std::optional<std::string> chat_template = find_chat_template(dir);

  // The retrieval items of every (length, depth) cell: cells[li][di].
  std::vector<std::vector<std::vector<const RetrievalItem*>>> cells(mode.lengths.size());
  std::int64_t item_count = 0;
  for (std::size_t li = 0; li < mode.lengths.size(); ++li) {
    for (std::size_t di = 0; di < mode.depths.size(); ++di) {
      cells[li].push_back(cell_items(all_items, mode.lengths[li], mode.depths[di], li + di, mode.cell_items));
      item_count += static_cast<std::int64_t>(cells[li].back().size());
    }
  }
  const std::string model_key = model_hash(dir);
  const nlohmann::json settings = {{"mode", "long"},
                                   {"lengths", mode.lengths},
                                   {"windows_per_length", mode.windows},
                                   {"continuation_tokens", mode.continuation},
                                   {"depths", mode.depths},
                                   {"cell_items", mode.cell_items},
                                   {"retrieval_items", item_count},
                                   {"fractions", [&] {
                                      std::vector<std::string> f;
                                      for (const BudgetFraction& x : mode.fractions) f.push_back(x.text());
                                      return f;
                                    }()},
                                   {"oracle_windows", mode.oracle_windows},
                                   {"oracle_steps", mode.oracle_steps},
                                   {"device", args.device},
                                   {"model_hash", model_key},
                                   {"heldout_hash", file_hash(heldout)},
                                   {"retrieval_hash", mode.depths.empty() ? std::string() : file_hash(retrieval_file)}};
  check_baseline_settings(baseline, args.baseline, settings);

  // The inputs of every length, the reference's rows and the full-precision answers.
  std::vector<std::vector<std::int32_t>> docs;
  std::vector<std::string> doc_ids;
  for (const HeldoutDocument& d : documents) {
    docs.push_back(tokenizer->encode(d.text, true));
    doc_ids.push_back(d.id);
  }
  const std::filesystem::path out_dir(args.out);
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path cache_dir = args.cache.empty() ? out_dir / "reference-cache" : std::filesystem::path(args.cache);
  VerifyArgs run;
  run.model = dir.string();
  run.device = args.device;
  run.threads = args.threads;
  run.feed = "text";
  run.prompts = mode.windows;
  run.prompt_tokens = 256;  // fp8:scale=calibrated's windows (cli/fp8_calibration.h), cut from the held-out set
  const PhaseClock ref_clock;
  std::int64_t cached_windows = 0, total_windows = 0;
  std::vector<LengthInputs> lengths;
  {
    ProgressBar bar("reference", "windows", args.quiet);
    const auto windows_total = static_cast<std::int64_t>(mode.lengths.size()) * mode.windows;
    for (std::size_t li = 0; li < mode.lengths.size(); ++li) {
      LengthInputs in;
      in.length = mode.lengths[li];
      in.windows = long_windows(docs, doc_ids, heldout, li, in.length, mode.windows);
      for (const Prompt& w : in.windows) {
        std::vector<float> rows;
        double nll = 0.0;
        cached_windows += window_reference(model, w, in.length - mode.continuation, cache_dir, model_key, rows, nll) ? 1 : 0;
        in.reference.push_back(std::move(rows));
        in.reference_nll.push_back(nll);
        bar.update(++total_windows, windows_total);
      }
      for (std::size_t di = 0; di < mode.depths.size(); ++di) {
        for (const RetrievalItem* it : cells[li][di]) {
          RetrievalCase rc = long_case(*tokenizer, chat_template, dir, *it, fmt::format("{}:{}", retrieval_file.string(), it->line));
          if (static_cast<std::int64_t>(rc.prompt.size() + rc.answer.size()) > c.max_position_embeddings) {
            throw input_error(fmt::format("{}:{}", retrieval_file.string(), it->line), "prompt",
                              "item '{}': {} prompt and {} answer tokens exceed max_position_embeddings {} of {}", it->id,
                              rc.prompt.size(), rc.answer.size(), c.max_position_embeddings, dir.string());
          }
          in.items.push_back(std::move(rc));
          in.item_depth.push_back(static_cast<std::int64_t>(di));
        }
      }
      lengths.push_back(std::move(in));
    }
  }
  const double ref_s = seconds_since(ref_clock.t0);
  if (!args.quiet) {
    fmt::print(stderr, "kvcheck report: reference over {} windows ({} from the cache, {}), {} configurations x {} lengths\n",
               total_windows, cached_windows, ref_clock.text(), configs.size(), lengths.size());
  }
  // Every configuration at every length. Per length, each prompt's prefill is computed once
  // (ModelRunner::capture_prefill, on the full-fp32 engine) and every configuration stores it (the
  // same bits as its own prefill); the captures of one length are held together, then freed.
  const std::size_t n_depths = mode.depths.size();
  std::vector<ConfigAccum> accum(configs.size());
  std::map<std::string, std::string> run_specs;  // spec -> with its FP8 calibration resolved
  // The capturing engine: capture_prefill touches no cache, so its pool is one page.
  EngineOptions capturing = single_request_engine_options(run, "full-fp32");
  capturing.pages = 1;
  std::unique_ptr<Engine> full = make_engine(model, capturing);
  // An engine for `spec` on `engine_run`'s threads whose pool holds kLongBatch of the length's windows
  // or items at once (--kv-pages, when given, instead).
  const auto long_engine = [&](const std::string& spec, const LengthInputs& in, const VerifyArgs& engine_run) {
    EngineOptions eo = single_request_engine_options(engine_run, spec);
    if (eo.pages <= 0) {
      std::int64_t tokens = in.length;
      for (const RetrievalCase& rc : in.items) {
        tokens = std::max(tokens, static_cast<std::int64_t>(rc.prompt.size() + rc.answer.size()));
      }
      const std::int64_t per_request =
          request_pages(c, make_policy(spec)->tiers(), eo.page_bytes, tokens) + c.num_hidden_layers * c.num_key_value_heads;
      eo.batch_hint = static_cast<std::int64_t>(kLongBatch);
      eo.pages = per_request * eo.batch_hint;
    }
    return make_engine(model, eo);
  };
  {
    ProgressBar bar("report", "configurations x lengths", args.quiet);
    const int threads = resolve_threads(run.threads);
    const int lanes = static_cast<int>(std::min<std::int64_t>(threads, kLongLanes));
    VerifyArgs lane_run = run;  // a lane's engine: an equal share of the threads
    lane_run.threads = std::max(1, threads / lanes);
    std::int64_t done = 0;
    const auto steps = static_cast<std::int64_t>(configs.size() * lengths.size());
    for (std::size_t li = 0; li < lengths.size(); ++li) {
      LengthInputs& in = lengths[li];
      const std::int64_t P = in.length - mode.continuation;
      // Each configuration's spec at this length; one capture per prompt serves them all.
      std::vector<std::string> specs(configs.size());
      PrefillCaptureOptions options;
      for (std::size_t k = 0; k < configs.size(); ++k) {
        const LongConfig& cfg = configs[k];
        const std::string spec = cfg.fraction ? spec_at_length(cfg.spec, *cfg.fraction, in.length, c, run.page_bytes) : cfg.spec;
        if (!run_specs.contains(spec)) run_specs[spec] = resolve_fp8_calibration(model, dir, run, spec);
        specs[k] = run_specs[spec];
        options.cover(*make_policy(specs[k]));
      }
      const PhaseClock captures_clock;
      std::vector<PrefillCapture> window_captures, item_captures;
      for (const Prompt& w : in.windows) {
        window_captures.push_back(full->runner->capture_prefill(
            std::span<const std::int32_t>(w.tokens).first(static_cast<std::size_t>(P)), options));
      }
      for (const RetrievalCase& rc : in.items) item_captures.push_back(full->runner->capture_prefill(rc.prompt, options));
      const std::string captures_time = captures_clock.text();
      const PhaseClock answers_clock;
      // The full-precision engine's own greedy answers: a policy is also judged against what the
      // model could do uncompressed (a small model misses some items at full precision).
      {
        const std::unique_ptr<Engine> answering = long_engine("full-fp32", in, run);
        in_batches(in.items.size(), [&](std::size_t first, std::size_t end) {
          std::vector<EngineGenerateRequest> batch;
          for (std::size_t i = first; i < end; ++i) {
            EngineGenerateRequest q;
            q.request = static_cast<std::int64_t>(i);
            q.prompt = in.items[i].prompt;
            q.options.max_new_tokens = static_cast<std::int64_t>(in.items[i].answer.size());
            q.options.stop_at_eos = false;
            q.options.prefill = &item_captures[i];
            batch.push_back(q);
          }
          for (EngineGenerateResult& r : engine_generate_batch(*answering, batch)) {
            in.full_precision.push_back(std::move(r.generated));
          }
        });
      }
      const std::string answers_time = answers_clock.text();
      const PhaseClock rows_clock;
      std::vector<const PrefillCapture*> oracle_prefills;
      for (const PrefillCapture& pc : window_captures) oracle_prefills.push_back(&pc);
      // One configuration at this length: measured on `lane_run.threads` threads, then its per-step
      // oracle (serial checks) on one. Writes accum[k] only.
      const auto run_config = [&](std::size_t k) {
        const auto t_cfg = std::chrono::steady_clock::now();
        ConfigAccum& acc = accum[k];
        std::unique_ptr<Engine> engine = long_engine(specs[k], in, lane_run);
        LengthRow lr;
        lr.exact.resize(n_depths);
        lr.agree.resize(n_depths);
        {
          AccuracyRun measured(*engine, c);
          // The windows, then the items, decoded kLongBatch at a time (the same bits as one by one).
          in_batches(in.windows.size(), [&](std::size_t first, std::size_t end) {
            std::vector<AccuracyRun::TextWindow> batch;
            for (std::size_t w = first; w < end; ++w) {
              batch.push_back({static_cast<std::int64_t>(w), in.windows[w].tokens, P, in.reference[w], &window_captures[w]});
              lr.reference_nll += in.reference_nll[w];
            }
            measured.add_texts(batch);
          });
          measured.finish_text();
          std::vector<std::vector<std::int32_t>> answers;
          in_batches(in.items.size(), [&](std::size_t first, std::size_t end) {
            std::vector<AccuracyRun::RetrievalRun> batch;
            for (std::size_t i = first; i < end; ++i) {
              batch.push_back({100000 + static_cast<std::int64_t>(i), &in.items[i], &item_captures[i]});
            }
            for (std::vector<std::int32_t>& a : measured.add_retrievals(batch)) answers.push_back(std::move(a));
          });
          for (std::size_t i = 0; i < in.items.size(); ++i) {
            const std::vector<std::int32_t>& got = answers[i];
            const auto d = static_cast<std::size_t>(in.item_depth[i]);
            const bool ok = exact_match(got, in.items[i].answer);
            const bool same = exact_match(got, in.full_precision[i]);
            lr.exact[d].add(ok);
            lr.agree[d].add(same);
            acc.exact.add(ok);
            acc.agree.add(same);
            acc.by_task[in.items[i].item.task].add(ok);
          }
          acc.overall.merge(measured.distribution());
          lr.nll = measured.nll();
          lr.predicted = measured.predicted();
          lr.row = measured.finish();
        }
        engine.reset();
        acc.engine_name = lr.row.name;
        lr.spec = specs[k];
        acc.lengths.push_back(std::move(lr));
        if (mode.oracle_windows > 0) {
          VerifyArgs one_thread = lane_run;
          one_thread.threads = 1;
          const OracleCounts o = run_step_oracle(model, one_thread, specs[k], in.windows, P, mode.oracle_windows,
                                                 oracle_prefills, mode.oracle_steps);
          acc.checks += o.checks;
          acc.violations += o.violations;
        }
        acc.wall_s += seconds_since(t_cfg);
      };
      // The configurations run in `lanes` lanes side by side (parallel_items: each lane takes the
      // next one not yet taken), each engine on an equal share of the threads. Run one after another on every
      // thread, the cores idled through each configuration's serial parts (storing a prompt,
      // the policy's bookkeeping, the oracle's checks): 1.5 of 2 cores busy at 1K. Each
      // configuration's numbers are the same whichever lane runs it and whenever (the engine's
      // bits do not depend on its thread count; nothing is shared but what is read).
      std::mutex progress;
      parallel_items(static_cast<std::int64_t>(configs.size()), lanes, [&](std::int64_t k, int) {
        run_config(static_cast<std::size_t>(k));
        const std::lock_guard<std::mutex> lock(progress);
        bar.update(++done, steps);
      });
      if (!args.quiet) {
        fmt::print(stderr, "kvcheck report: {} tokens: {} prefill captures {}, full-precision answers {}, {} configurations {}\n",
                   in.length, window_captures.size() + item_captures.size(), captures_time, answers_time, configs.size(),
                   rows_clock.text());
      }
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t k = 0; k < configs.size(); ++k) rows.push_back(long_row_json(configs[k], accum[k], lengths));

  // The reference side: its perplexity per bin and the full-precision engine's own exact matches.
  nlohmann::json bins = nlohmann::json::array(), ref_by_position = nlohmann::json::array(),
                 ref_exact = nlohmann::json::array();
  double ref_nll_all = 0.0;
  std::int64_t ref_predicted_all = 0;
  for (std::size_t li = 0; li < lengths.size(); ++li) {
    const LengthInputs& in = lengths[li];
    const std::int64_t from = li == 0 ? 0 : lengths[li - 1].length;
    double nll = 0.0;
    for (const double x : in.reference_nll) nll += x;
    const std::int64_t predicted = static_cast<std::int64_t>(in.windows.size()) * mode.continuation;
    ref_nll_all += nll;
    ref_predicted_all += predicted;
    bins.push_back({{"label", bin_label(from, in.length)}, {"from", from}, {"to", in.length}});
    ref_by_position.push_back({{"label", bin_label(from, in.length)}, {"perplexity", perplexity(nll, predicted)}, {"tokens", predicted}});
    std::vector<AccuracyCounter> exact(n_depths);
    for (std::size_t i = 0; i < in.items.size(); ++i) {
      exact[static_cast<std::size_t>(in.item_depth[i])].add(exact_match(in.full_precision[i], in.items[i].answer));
    }
    nlohmann::json row = nlohmann::json::array();
    for (const AccuracyCounter& e : exact) row.push_back(number_or_null(e.accuracy()));
    ref_exact.push_back(row);
  }
  const nlohmann::json report = {
      {"format", "kvcheck-report"},
      {"version", 1},
      {"mode", "long"},
      {"command", args.command_line},
      {"engine", {{"version", version_string()}, {"device", args.device}}},
      {"model", {{"path", dir.string()}, {"hash", model_key}, {"chat_template", chat_template.has_value()}}},
      {"datasets", {{"heldout", heldout.string()}, {"heldout_hash", settings.at("heldout_hash")},
                    {"retrieval", retrieval_file.string()}, {"retrieval_hash", settings.at("retrieval_hash")}}},
      {"settings", settings},
      {"position_bins", bins},
      {"retrieval_grid", {{"lengths", mode.lengths}, {"depths", mode.depths}}},
      {"reference", {{"perplexity", perplexity(ref_nll_all, ref_predicted_all)},
                     {"cached", cached_windows == total_windows},
                     {"wall_s", ref_s},
                     {"prompt_source", heldout.string()},
                     {"attention", nlohmann::json::array()},
                     {"by_position", ref_by_position},
                     {"retrieval_exact", ref_exact}}},
      {"rows", rows},
      {"spvllm_strategies", nullptr},
      {"run", {{"wall_s", seconds_since(started)}, {"peak_rss_bytes", peak_rss_bytes()}}}};
  ReportGate gate{out_dir, args.baseline, args.update_baseline, baseline};
  return finish_report(report, gate);
}

}  // namespace kvcheck::cli
