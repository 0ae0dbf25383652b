// kvcheck export: the exact token ids of the report's held-out windows (prompt + continuation, to
// be teacher-forced) and retrieval items (prompt, answer, tokens to generate), with a header naming
// the model hash, the dataset hashes and the settings (cli/items_file.h), for another engine to run
// and kvcheck compare to hold to the reference (docs/reports.md, "Checking another engine"). The sizing
// flags are report's, so `export --quick` holds exactly what `report --quick` measures.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/eval_files.h"
#include "cli/items_file.h"
#include "cli/output_file.h"
#include "cli/report_pipeline.h"
#include "cli/report_reference_cache.h"
#include "reference/model.h"

namespace kvcheck::cli {

void add_export(CLI::App& app, ReportArgs& args) {
  CLI::App* cmd = app.add_subcommand("export", "Write the report's held-out windows and retrieval items as token ids (JSONL) "
                                               "for another engine to run (see kvcheck compare)");
  cmd->add_option("--model", args.model, "Model directory or GGUF file (default: the embedded model)");
  cmd->add_option("--out", args.out, "Items file to write (JSONL)")->required();
  cmd->add_flag("--quick", args.quick, "The test gate's size: 2 prompts x (64 + 32) tokens, 12 retrieval items");
  cmd->add_option("--prompts", args.prompts, "Held-out windows (default 8; --quick 2)");
  cmd->add_option("--prompt-tokens", args.prompt_tokens, "Prompt tokens per window (default 128; --quick 64)");
  cmd->add_option("--max-new-tokens", args.max_new_tokens, "Continuation tokens per window (default 64; --quick 32)");
  cmd->add_option("--retrieval-items", args.retrieval_items, "Retrieval items (default 48; --quick 12)");
  cmd->add_option("--heldout", args.heldout_file,
                  "Held-out text the prompts are cut from, JSONL (default: <datasets>/eval/heldout.jsonl)");
  cmd->add_option("--retrieval", args.retrieval_file, "Retrieval items, JSONL (default: <datasets>/eval/retrieval.jsonl)");
}

int run_export(const ReportArgs& args) {
  const ReportMode mode = report_mode(args);
  check_retrieval_flag(args.retrieval_file);
  check_eval_files(args.heldout_file, args.retrieval_file);
  check_output_file(args.out, "--out");
  const std::filesystem::path dir = report_model_dir(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const AccuracyInputs inputs = prepare_accuracy_inputs(model, dir, report_run_args(args, mode, dir));
  const nlohmann::json header = {{"model_hash", model_hash(dir)},
                                 {"heldout_hash", file_hash(heldout_path(args.heldout_file))},
                                 {"retrieval_hash", file_hash(retrieval_path(args.retrieval_file))},
                                 {"vocab_size", model.config().vocab_size},
                                 {"prompt_source", inputs.origin},
                                 {"settings", {{"prompts", inputs.prompts.size()},
                                               {"prompt_tokens", mode.prompt_tokens},
                                               {"continuation_tokens", mode.max_new_tokens},
                                               {"retrieval_items", inputs.retrieval.size()}}}};
  write_items_file(args.out, header, inputs);
  fmt::print("exported {} held-out windows ({} + {} tokens) and {} retrieval items of {} to {}\n", inputs.prompts.size(),
             mode.prompt_tokens, mode.max_new_tokens, inputs.retrieval.size(), dir.string(), args.out);
  return 0;
}

}  // namespace kvcheck::cli
