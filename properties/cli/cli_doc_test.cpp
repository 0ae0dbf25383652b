// docs/cli.md is what `kvcheck help --markdown` prints, and no option of any command is missing
// from it.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "properties/support/cli_runner.h"

namespace kvcheck::testing {
namespace {

std::string committed_cli_md() {
  std::ifstream in(std::string(KVCHECK_SOURCE_DIR) + "/docs/cli.md", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The `--flag` names in `text`.
std::set<std::string> long_flags(const std::string& text) {
  std::set<std::string> flags;
  const std::regex flag("--[a-z][a-z0-9-]*");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator(); ++it) {
    flags.insert(it->str());
  }
  return flags;
}

TEST(CliDoc, MatchesCommittedFile) {
  const CliRun run = run_kvcheck("help --markdown 2>/dev/null");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_TRUE(run.output == committed_cli_md())
      << "docs/cli.md is out of date with the CLI definitions; regenerate it with\n"
         "  build/bin/kvcheck help --markdown > docs/cli.md";
}

// Independent of the generator: every flag CLI11's own --help lists for a command is in that
// command's section of the Markdown, as an option name in the table's first column.
TEST(CliDoc, EveryFlagOfEveryCommandIsDocumented) {
  const CliRun doc = run_kvcheck("help --markdown 2>/dev/null");
  ASSERT_EQ(doc.code, 0) << doc.output;
  for (const char* command : {"generate", "make-model", "eval", "bench", "verify", "report", "export", "compare", "help"}) {
    const std::string heading = std::string("## kvcheck ") + command + "\n";
    const std::size_t begin = doc.output.find(heading);
    ASSERT_NE(begin, std::string::npos) << "no section for " << command;
    const std::size_t end = doc.output.find("\n## ", begin + 1);
    const std::string section = doc.output.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::set<std::string> documented;
    std::istringstream rows(section);
    for (std::string row; std::getline(rows, row);) {
      if (row.rfind("| `-", 0) != 0) continue;
      const std::string first_cell = row.substr(0, row.find(" | "));
      for (const std::string& flag : long_flags(first_cell)) documented.insert(flag);
    }
    const CliRun help = run_kvcheck(std::string(command) + " --help");
    ASSERT_EQ(help.code, 0) << help.output;
    // Option lines only (indented two spaces): wrapped descriptions, indented further, mention
    // other flags.
    std::istringstream lines(help.output);
    std::size_t flags_seen = 0;
    for (std::string line; std::getline(lines, line);) {
      const std::size_t first = 2;
      if (line.rfind("  --", 0) != 0) continue;
      const std::string flag = line.substr(first, line.find_first_of(" =", first) - first);
      if (flag == "--help") continue;
      ++flags_seen;
      EXPECT_EQ(documented.count(flag), 1U) << command << " " << flag << " is missing from docs/cli.md";
    }
    EXPECT_GT(flags_seen, 0U) << command;
  }
}

TEST(CliDoc, ListsEveryCommand) {
  const CliRun help = run_kvcheck("--help");
  const CliRun doc = run_kvcheck("help --markdown 2>/dev/null");
  ASSERT_EQ(doc.code, 0);
  std::istringstream lines(help.output);
  bool in_subcommands = false;
  int commands = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_subcommands = true;
      continue;
    }
    if (!in_subcommands || line.empty()) continue;
    const std::size_t first = line.find_first_not_of(' ');
    const std::string name = line.substr(first, line.find(' ', first) - first);
    ++commands;
    EXPECT_NE(doc.output.find("## kvcheck " + name + "\n"), std::string::npos) << name;
  }
  EXPECT_EQ(commands, 9);
}

}  // namespace
}  // namespace kvcheck::testing
