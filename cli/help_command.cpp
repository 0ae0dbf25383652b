// kvcheck help --markdown: the command-line reference (docs/cli.md) written from the CLI11
// definitions themselves, so the document cannot miss a flag. CliDoc.MatchesCommittedFile fails
// when the committed docs/cli.md differs from what this prints.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"

namespace kvcheck::cli {
namespace {

// Pipes and newlines would break a Markdown table row.
std::string table_cell(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// "--model" or "-j,--threads" as `-j`, `--threads`.
std::string option_names(const CLI::Option& option) {
  std::string names;
  for (const std::string& name : option.get_snames()) names += (names.empty() ? "" : ", ") + ("`-" + name + "`");
  for (const std::string& name : option.get_lnames()) names += (names.empty() ? "" : ", ") + ("`--" + name + "`");
  if (names.empty()) names = "`" + option.get_name(true) + "` (positional)";
  return names;
}

void write_command(std::string& out, const CLI::App& command) {
  out += fmt::format("## kvcheck {}\n\n{}\n\n", command.get_name(), command.get_description());
  out += "| Option | Value | Default | Description |\n|---|---|---|---|\n";
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_group().empty()) continue;  // hidden
    if (option->get_name() == "--help") continue;
    const std::string value = option->get_type_name().empty() || option->get_expected_min() == 0
                                  ? std::string()
                                  : "`" + option->get_type_name() + "`";
    std::string def = option->get_default_str();
    if (!def.empty()) def = "`" + def + "`";
    std::string description = option->get_description();
    if (option->get_required()) description = "Required. " + description;
    out += fmt::format("| {} | {} | {} | {} |\n", option_names(*option), table_cell(value), table_cell(def),
                       table_cell(description));
  }
  out += "\n";
}

}  // namespace

void add_help(CLI::App& app, HelpArgs& args) {
  CLI::App* cmd = app.add_subcommand("help", "Print the command-line reference (--markdown: as docs/cli.md)");
  cmd->add_flag("--markdown", args.markdown, "Write every command and option as Markdown (docs/cli.md)");
}

std::string cli_markdown(const CLI::App& app) {
  std::string out =
      "# kvcheck command-line reference\n\n"
      "Generated from the CLI definitions by `kvcheck help --markdown > docs/cli.md`; the test\n"
      "`CliDoc.MatchesCommittedFile` fails when this file and the program disagree, so edit the\n"
      "option's description in `cli/*_command.cpp` rather than this page. Every command takes `-h`\n"
      "for the same text in the terminal. Exit codes: 0 success, 2 bad input (the message names the\n"
      "file, field or flag), 1 an internal error.\n\n";
  out += "| Command | What it does |\n|---|---|\n";
  const std::vector<const CLI::App*> commands = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* command : commands) {
    out += fmt::format("| [`{0}`](#kvcheck-{0}) | {1} |\n", command->get_name(), table_cell(command->get_description()));
  }
  out += "\n`kvcheck --version` prints the version and whether the CUDA kernels were compiled.\n\n";
  for (const CLI::App* command : commands) write_command(out, *command);
  out.pop_back();  // one newline at the end of the file
  return out;
}

int run_help(const CLI::App& app, const HelpArgs& args) {
  if (args.markdown) {
    fmt::print("{}", cli_markdown(app));
  } else {
    fmt::print("{}", app.help());
  }
  return 0;
}

}  // namespace kvcheck::cli
