// kvcheck: the command-line front end.
//
// Exit codes: 0 success; 2 bad input (a malformed file, a bad flag, a prompt that does not fit)
// with a message naming the file and field; 1 an internal error (a bug: please report it).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cli/commands.h"
#include "kernels/device.h"
#include "reference/errors.h"

namespace {

// Keeps freed memory in the process for the next allocation. glibc by default serves blocks above
// a threshold that rises with use (to at most 32 MB) with mmap and returns freed heap tops to the
// OS, so a loop that allocates and frees the same few-MB buffers (the per-step oracle's rows of an
// 8K context, one set per configuration) pays a page fault and a kernel page clear for every 4 KB
// each time: most of the oracle's time in `report --long` at 8K. Blocks up to 32 MB now come from
// the heap, whose top is given back only when more than 1 GB of it is free; larger blocks (a page
// pool) are still mmapped, zeroed lazily by the OS.
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory();
  CLI::App app{"kvcheck: verification-first correctness and benchmarking for KV-cache compression"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvcheck ") + kvcheck::cli::version_string());

  kvcheck::cli::GenerateArgs generate_args;
  kvcheck::cli::add_generate(app, generate_args);
  kvcheck::cli::MakeModelArgs make_model_args;
  kvcheck::cli::add_make_model(app, make_model_args);
  kvcheck::cli::EvalArgs eval_args;
  kvcheck::cli::add_eval(app, eval_args);
  kvcheck::cli::BenchArgs bench_args;
  kvcheck::cli::add_bench(app, bench_args);
  kvcheck::cli::VerifyArgs verify_args;
  kvcheck::cli::add_verify(app, verify_args);
  kvcheck::cli::ReportArgs report_args;
  kvcheck::cli::add_report(app, report_args);
  kvcheck::cli::ReportArgs export_args;
  kvcheck::cli::add_export(app, export_args);
  kvcheck::cli::CompareArgs compare_args;
  kvcheck::cli::add_compare(app, compare_args);
  kvcheck::cli::HelpArgs help_args;
  kvcheck::cli::add_help(app, help_args);
  for (int i = 0; i < argc; ++i) report_args.command_line += (i ? " " : "") + std::string(argv[i]);
  compare_args.command_line = report_args.command_line;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  try {
    if (app.got_subcommand("generate")) return kvcheck::cli::run_generate(generate_args);
    if (app.got_subcommand("make-model")) return kvcheck::cli::run_make_model(make_model_args);
    if (app.got_subcommand("eval")) return kvcheck::cli::run_eval(eval_args);
    if (app.got_subcommand("bench")) return kvcheck::cli::run_bench(bench_args);
    if (app.got_subcommand("verify")) return kvcheck::cli::run_verify(verify_args);
    if (app.got_subcommand("report")) return kvcheck::cli::run_report(report_args);
    if (app.got_subcommand("export")) return kvcheck::cli::run_export(export_args);
    if (app.got_subcommand("compare")) return kvcheck::cli::run_compare(compare_args);
    if (app.got_subcommand("help")) return kvcheck::cli::run_help(app, help_args);
  } catch (const kvcheck::InputError& e) {
    fmt::print(stderr, "kvcheck: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kvcheck: internal error: {}\n", e.what());
    return 1;
  }
  return 1;
}
