// kvcheck: the command-line front end.
//
// Exit codes: 0 success; 2 bad input (a malformed file, a bad flag, a prompt that does not fit)
// with a message naming the file and field; 1 an internal error (a bug: please report it).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "kernels/device.h"
#include "reference/errors.h"

int main(int argc, char** argv) {
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
