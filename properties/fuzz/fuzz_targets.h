// Coverage-guided fuzz targets (libFuzzer, ci/fuzz.sh) for the parsers that read untrusted
// input. Each takes arbitrary bytes and returns 0; malformed input must end in an InputError
// (caught here), never in a crash, a sanitizer report, a hang or another exception type (which
// escapes and fails the run). The same functions replay the committed corpora
// (datasets/fuzz/<target>/) in the unit suite (FuzzCorpora.*), so every input a fuzzer once
// found stays a regression test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvcheck::fuzz {

// A .safetensors file: header length, JSON header, data region (SafetensorsFile::open, then
// every tensor found and every byte of its view read).
int safetensors(const std::uint8_t* data, std::size_t size);
// A config.json (nlohmann::json parse, then parse_config's validation).
int config(const std::uint8_t* data, std::size_t size);
// Tokenizer input: arbitrary bytes (invalid UTF-8 included) encoded with the embedded model's
// tokenizer.model, and the ids decoded again.
int tokenizer(const std::uint8_t* data, std::size_t size);
// A tokenizer.json text (Tokenizer::load from a scratch file); if it loads, fixed strings
// encoded and decoded, every id inside the vocabulary (tokenizer_json_fuzz.cpp).
int tokenizer_json(const std::uint8_t* data, std::size_t size);
// A command stream for the page manager (admit + prompt phase, decode steps with evictions,
// demotions, flushes and every slot strategy, compaction, finish, preempt) on a pool the first
// bytes shape; the invariants checked after every command (page_manager_fuzz.cpp).
int page_manager(const std::uint8_t* data, std::size_t size);
// A command stream for the scheduler (submissions good and bad, steps, cancellations) on a
// one-layer dummy model and a small pool the first bytes shape; invariants after every command,
// and at the end one result per request with the tokens of its solo run (scheduler_fuzz.cpp).
int scheduler(const std::uint8_t* data, std::size_t size);
// A workload JSONL file of the serving benchmark (parse_serving_workload at the embedded model's
// context and vocabulary); every request it accepts must keep the loader's promises (lengths that
// fit the context, ids in the vocabulary, a prefix within the prompt, a finite arrival >= 0).
int workload_jsonl(const std::uint8_t* data, std::size_t size);
// A report baseline (cli/report_baseline.h's parser, then the gate over its own rows).
int report_baseline(const std::uint8_t* data, std::size_t size);
// Another engine's outputs for kvcheck compare (cli/engine_output.h): a .npy logits array, a
// top-k / generated-ids JSONL file or a .safetensors file, chosen by the first bytes; what is
// accepted keeps the parsers' promises (engine_output_fuzz.cpp).
int engine_output(const std::uint8_t* data, std::size_t size);

// A GGUF file (GgufFile::open, every tensor's bytes read, readable types dequantized, then the
// config, the model and the tokenizer built from its metadata; gguf_fuzz.cpp).
int gguf(const std::uint8_t* data, std::size_t size);

}  // namespace kvcheck::fuzz
