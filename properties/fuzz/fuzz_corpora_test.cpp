// Every committed fuzz input (datasets/fuzz/<target>/: the seed corpora, and any input a fuzzer
// ever crashed on, minimised) runs through its target in the ordinary build: the targets
// compile and stay crash-free on them without clang or libFuzzer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "properties/fuzz/fuzz_targets.h"

namespace kvcheck {
namespace {

using Target = int (*)(const std::uint8_t*, std::size_t);

void replay(const char* name, Target target) {
  const std::filesystem::path dir = std::filesystem::path(KVCHECK_SOURCE_DIR) / "datasets/fuzz" / name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    ++inputs;
  }
  EXPECT_GE(inputs, 3) << "the seed corpus of " << name << " is missing";
}

TEST(FuzzCorpora, GgufInputsRun) {
  replay("gguf", fuzz::gguf);
  const std::string scratch = "kvcheck-fuzz-" + std::to_string(::getpid()) + ".gguf";
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path("/dev/shm") / scratch));
}

TEST(FuzzCorpora, SafetensorsInputsRun) {
  replay("safetensors", fuzz::safetensors);
  // The target writes each input to a scratch file of this process; none may be left behind.
  const std::string scratch = "kvcheck-fuzz-" + std::to_string(::getpid()) + ".safetensors";
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path("/dev/shm") / scratch));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::temp_directory_path() / scratch));
}
TEST(FuzzCorpora, ConfigInputsRun) { replay("config", fuzz::config); }
TEST(FuzzCorpora, TokenizerInputsRun) { replay("tokenizer", fuzz::tokenizer); }
TEST(FuzzCorpora, TokenizerJsonInputsRun) { replay("tokenizer_json", fuzz::tokenizer_json); }
TEST(FuzzCorpora, PageManagerCommandStreamsRun) { replay("page_manager", fuzz::page_manager); }
TEST(FuzzCorpora, SchedulerCommandStreamsRun) { replay("scheduler", fuzz::scheduler); }
TEST(FuzzCorpora, WorkloadJsonlInputsRun) { replay("workload_jsonl", fuzz::workload_jsonl); }
TEST(FuzzCorpora, ReportBaselineInputsRun) { replay("report_baseline", fuzz::report_baseline); }
TEST(FuzzCorpora, EngineOutputInputsRun) { replay("engine_output", fuzz::engine_output); }

}  // namespace
}  // namespace kvcheck
