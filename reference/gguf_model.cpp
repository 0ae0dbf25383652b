// GGUF files as kvcheck models (gguf_model.h): config, tensors, tokenizer.
#include "reference/gguf_model.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"
#include "reference/gguf_quants.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// Per-layer tensors: GGUF suffix -> Hugging Face suffix.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

constexpr std::pair<std::string_view, std::string_view> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// An f32 metadata value as the shortest decimal that rounds to it, read back as a double.
double shortest_decimal(double value) {
  const auto f = static_cast<float>(value);
  const std::string text = fmt::format("{}", f);
  double out = value;
  std::from_chars(text.data(), text.data() + text.size(), out);
  return out;
}

// The tensors of a GGUF file under Hugging Face names. F32 tensors that need no row
// permutation are views into the mapping; the rest are owned (dequantized floats, or the stored
// F16/BF16 bytes with Q/K rows reordered). A Q8_0 or Q4_1 matrix also keeps its blocks (a view
// into the mapping, or owned when its rows move) for find_blocks.
class GgufTensorSource final : public TensorSource {
 public:
  explicit GgufTensorSource(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {}

  struct Entry {
    std::string gguf_name;
    DType dtype = DType::kF32;
    std::vector<std::int64_t> shape;
    // Owned bytes (allocated without zero-filling: every byte is written once), or else `view`.
    std::unique_ptr<std::byte[]> owned;
    std::size_t owned_size = 0;
    std::span<const std::byte> view;
    // The stored blocks of a Q8_0 / Q4_1 matrix (format empty otherwise), owned when permuted.
    std::string_view block_format;
    std::unique_ptr<std::byte[]> blocks_owned;
    std::span<const std::byte> blocks;
  };

  std::optional<TensorView> find(std::string_view name) const override {
    const auto it = entries_.find(name);
    if (it == entries_.end()) return std::nullopt;
    const Entry& e = it->second;
    return TensorView{e.dtype, e.shape, e.owned ? std::span<const std::byte>(e.owned.get(), e.owned_size) : e.view};
  }
  std::optional<BlockTensorView> find_blocks(std::string_view name) const override {
    const auto it = entries_.find(name);
    if (it == entries_.end() || it->second.block_format.empty()) return std::nullopt;
    return BlockTensorView{it->second.block_format, it->second.shape, it->second.blocks};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, e] : entries_) out.push_back(name);
    return out;
  }
  std::string origin(std::string_view name) const override {
    const auto it = entries_.find(name);
    return it == entries_.end() ? file_->path().string()
                                : fmt::format("{} (GGUF tensor {})", file_->path().string(), it->second.gguf_name);
  }

  std::map<std::string, Entry, std::less<>>& entries() { return entries_; }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// out[r] = in[gguf_row_of_hf_row(r)]: Hugging Face row order from the converter's.
void permute_rows(std::span<const std::byte> in, std::byte* out, std::int64_t rows, std::size_t row_bytes,
                  std::int64_t head_dim) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t src = gguf_row_of_hf_row(r, head_dim);
    std::memcpy(out + static_cast<std::size_t>(r) * row_bytes, in.data() + static_cast<std::size_t>(src) * row_bytes,
                row_bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

// llama.cpp's pre-tokenizer regexes (llama-vocab.cpp, llm_tokenizer_bpe), applied one after the
// other, each splitting what the previous left and keeping the unmatched runs.
constexpr std::string_view kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreTokenizerSpec {
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

std::optional<PreTokenizerSpec> pre_tokenizer_spec(const std::string& pre) {
  if (pre == "smollm") return PreTokenizerSpec{{"\\p{N}", kGpt2Regex}, false, false};
  if (pre == "gpt-2" || pre == "gpt2") return PreTokenizerSpec{{kGpt2Regex}, false, false};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizerSpec{{kLlama3Regex}, true, true};
  if (pre == "qwen2") return PreTokenizerSpec{{kQwen2Regex}, false, false};
  if (pre == "default") {
    return PreTokenizerSpec{{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false};
  }
  return std::nullopt;
}

// token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*).
constexpr std::int64_t kTypeNormal = 1;
constexpr std::int64_t kTypeUnknown = 2;
constexpr std::int64_t kTypeControl = 3;
constexpr std::int64_t kTypeUserDefined = 4;
constexpr std::int64_t kTypeByte = 6;

json template_processing(const std::vector<std::string>& tokens, std::int32_t bos, bool add_bos, std::int32_t eos,
                         bool add_eos) {
  if (!add_bos && !add_eos) return nullptr;
  json single = json::array();
  json specials = json::object();
  auto special = [&](std::int32_t id) {
    const std::string& name = tokens[static_cast<std::size_t>(id)];
    single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
    specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
  };
  if (add_bos) special(bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) special(eos);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single}, {"special_tokens", specials}};
}

}  // namespace

std::int64_t gguf_row_of_hf_row(std::int64_t hf_row, std::int64_t head_dim) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t h = hf_row / head_dim;
  const std::int64_t r = hf_row % head_dim;
  const std::int64_t t = r / half;
  const std::int64_t i = r % half;
  return h * head_dim + 2 * i + t;
}

std::optional<std::string> hf_tensor_name(const std::string& gguf_name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (gguf_name == g) return std::string(h);
  }
  if (!gguf_name.starts_with("blk.")) return std::nullopt;
  const std::size_t dot = gguf_name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return std::nullopt;
  const std::string layer = gguf_name.substr(4, dot - 4);
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  if (layer.size() > 1 && layer[0] == '0') return std::nullopt;
  const std::string_view suffix = std::string_view(gguf_name).substr(dot + 1);
  for (const auto& [g, h] : kLayerNames) {
    if (suffix == g) return fmt::format("model.layers.{}.{}", layer, h);
  }
  return std::nullopt;
}

std::optional<std::string> gguf_tensor_name(const std::string& hf_name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (hf_name == h) return std::string(g);
  }
  constexpr std::string_view kPrefix = "model.layers.";
  if (!hf_name.starts_with(kPrefix)) return std::nullopt;
  const std::size_t dot = hf_name.find('.', kPrefix.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string layer = hf_name.substr(kPrefix.size(), dot - kPrefix.size());
  const std::string_view suffix = std::string_view(hf_name).substr(dot + 1);
  for (const auto& [g, h] : kLayerNames) {
    if (suffix == h) return fmt::format("blk.{}.{}", layer, g);
  }
  return std::nullopt;
}

ModelConfig gguf_model_config(const GgufFile& file) {
  const std::string origin = file.path().string();
  const std::string arch = file.get_string("general.architecture");
  ModelConfig c;
  if (arch == "llama") {
    c.family = ModelFamily::kLlama;
  } else if (arch == "qwen2") {
    c.family = ModelFamily::kQwen2;
  } else if (arch == "qwen3") {
    c.family = ModelFamily::kQwen3;
  } else {
    throw input_error(origin, "key \"general.architecture\"", "\"{}\" is not supported (kvcheck reads llama, qwen2 and qwen3)",
                      arch);
  }
  auto key = [&](std::string_view name) { return fmt::format("{}.{}", arch, name); };
  auto get_int = [&](std::string_view name) {
    const std::string k = key(name);
    const GgufValue* v = file.find(k);
    if (v != nullptr && v->type == GgufValue::Type::kArray) {
      throw input_error(origin, fmt::format("key \"{}\"", k), "per-layer values are not supported");
    }
    const std::uint64_t value = file.get_uint(k);
    if (value == 0 || value > (std::uint64_t{1} << 40)) {
      throw input_error(origin, fmt::format("key \"{}\"", k), "must be positive and plausible, got {}", value);
    }
    return static_cast<std::int64_t>(value);
  };
  c.hidden_size = get_int("embedding_length");
  c.intermediate_size = get_int("feed_forward_length");
  c.num_hidden_layers = get_int("block_count");
  c.num_attention_heads = get_int("attention.head_count");
  c.num_key_value_heads = file.find(key("attention.head_count_kv")) ? get_int("attention.head_count_kv") : c.num_attention_heads;
  c.head_dim = file.find(key("attention.key_length")) ? get_int("attention.key_length")
                                                      : c.hidden_size / c.num_attention_heads;
  if (file.find(key("attention.value_length")) && get_int("attention.value_length") != c.head_dim) {
    throw input_error(origin, fmt::format("key \"{}\"", key("attention.value_length")),
                      "differs from the key length {} (kvcheck needs equal key and value head sizes)", c.head_dim);
  }
  c.max_position_embeddings = get_int("context_length");
  c.rms_norm_eps = shortest_decimal(file.get_float(key("attention.layer_norm_rms_epsilon")));
  c.rope_theta = shortest_decimal(file.get_float_opt(key("rope.freq_base")).value_or(10000.0));
  if (file.find(key("rope.dimension_count")) && get_int("rope.dimension_count") != c.head_dim) {
    throw input_error(origin, fmt::format("key \"{}\"", key("rope.dimension_count")),
                      "{} differs from the head size {} (partial rotary embeddings are not supported)",
                      get_int("rope.dimension_count"), c.head_dim);
  }
  if (const std::optional<std::string> scaling = file.get_string_opt(key("rope.scaling.type"));
      scaling && *scaling != "none") {
    throw input_error(origin, fmt::format("key \"{}\"", key("rope.scaling.type")), "\"{}\" RoPE scaling is not supported",
                      *scaling);
  }
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    throw input_error(origin, "tensor \"rope_freqs.weight\"",
                      "per-frequency RoPE factors (Llama 3.1-style scaling as a tensor) are not supported");
  }
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) throw input_error(origin, "tensor \"token_embd.weight\"", "missing");
  if (embd->ne.size() != 2) {
    throw input_error(origin, "tensor \"token_embd.weight\"", "must have 2 dims, has {}", embd->ne.size());
  }
  const std::int64_t embd_rows = embd->ne[1];
  const GgufValue* tokens = file.get_array_opt("tokenizer.ggml.tokens", GgufValue::Type::kString);
  if (file.find(key("vocab_size"))) {
    c.vocab_size = get_int("vocab_size");
  } else if (tokens != nullptr) {
    c.vocab_size = static_cast<std::int64_t>(tokens->items.size());
  } else {
    c.vocab_size = embd_rows;
  }
  if (embd_rows != c.vocab_size) {
    throw input_error(origin, "tensor \"token_embd.weight\"", "has {} rows but the vocabulary has {} tokens", embd_rows,
                      c.vocab_size);
  }
  if (tokens != nullptr && static_cast<std::int64_t>(tokens->items.size()) != c.vocab_size) {
    throw input_error(origin, "key \"tokenizer.ggml.tokens\"", "lists {} tokens but the vocabulary size is {}",
                      tokens->items.size(), c.vocab_size);
  }
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  const bool q_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qkv_bias = c.family == ModelFamily::kQwen2 || q_bias;
  c.o_bias = c.family != ModelFamily::kQwen2 && file.find_tensor("blk.0.attn_output.bias") != nullptr;
  if (c.family != ModelFamily::kQwen2 && q_bias != c.o_bias) {
    throw input_error(origin, "tensor \"blk.0.attn_output.bias\"",
                      "{} while blk.0.attn_q.bias is {} (llama and qwen3 have biases on all four projections or none)",
                      c.o_bias ? "present" : "missing", q_bias ? "present" : "missing");
  }
  auto token_id = [&](const char* k) -> std::optional<std::int64_t> {
    const std::optional<std::uint64_t> id = file.get_uint_opt(k);
    if (!id) return std::nullopt;
    if (*id >= static_cast<std::uint64_t>(c.vocab_size)) {
      throw input_error(origin, fmt::format("key \"{}\"", k), "{} is outside the vocabulary [0, {})", *id, c.vocab_size);
    }
    return static_cast<std::int64_t>(*id);
  };
  c.bos_token_id = token_id("tokenizer.ggml.bos_token_id");
  if (const std::optional<std::int64_t> eos = token_id("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
  c.torch_dtype = "float32";
  validate_config(c, origin);
  return c;
}

GgufModel load_gguf_model(const std::filesystem::path& path) {
  auto file = std::make_shared<const GgufFile>(GgufFile::open(path));
  const std::string origin = path.string();
  GgufModel model;
  model.config = gguf_model_config(*file);
  model.chat_template = file->get_string_opt("tokenizer.chat_template");
  const ModelConfig& c = model.config;
  const bool permuted = c.family == ModelFamily::kLlama;

  auto source = std::make_shared<GgufTensorSource>(file);
  std::vector<std::pair<const GgufTensorInfo*, GgufTensorSource::Entry*>> work;
  for (const GgufTensorInfo& info : file->tensors()) {
    const std::string what = fmt::format("tensor \"{}\"", info.name);
    const std::optional<std::string> hf = hf_tensor_name(info.name);
    if (!hf) {
      throw input_error(origin, what, "is not a tensor of a {} model that kvcheck knows", family_name(c.family));
    }
    if (!ggml_type_readable(info.type)) {
      throw input_error(origin, what, "type {} is not supported (kvcheck reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, "
                                      "Q5_1, Q4_K, Q5_K and Q6_K)", ggml_type_name(info.type));
    }
    GgufTensorSource::Entry& e = source->entries()[*hf];
    e.gguf_name = info.name;
    e.shape = info.shape();
    work.emplace_back(&info, &e);
  }
  // Dequantize (and reorder Q/K rows) on every core; the largest tensors first.
  std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) { return a.first->data.size() > b.first->data.size(); });
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&] {
    for (std::size_t k = next++; k < work.size(); k = next++) {
      try {
        const GgufTensorInfo& info = *work[k].first;
        GgufTensorSource::Entry& e = *work[k].second;
        const bool is_q = info.name.ends_with("attn_q.weight") || info.name.ends_with("attn_q.bias");
        const bool is_k = info.name.ends_with("attn_k.weight") || info.name.ends_with("attn_k.bias");
        const bool permute = permuted && (is_q || is_k);
        const std::int64_t row_len = info.ne[0];
        const std::int64_t rows = info.numel() / std::max<std::int64_t>(row_len, 1);
        const bool bias = info.ne.size() == 1;
        if (permute && (bias ? info.ne[0] : rows) % c.head_dim != 0) {
          throw input_error(origin, fmt::format("tensor \"{}\"", info.name), "{} rows are not whole heads of {}",
                            bias ? info.ne[0] : rows, c.head_dim);
        }
        if (info.type == static_cast<std::uint32_t>(GgmlType::kF16) || info.type == static_cast<std::uint32_t>(GgmlType::kBF16)) {
          e.dtype = info.type == static_cast<std::uint32_t>(GgmlType::kF16) ? DType::kF16 : DType::kBF16;
        } else {
          e.dtype = DType::kF32;
        }
        const std::size_t elem = dtype_size(e.dtype);
        const std::size_t size = static_cast<std::size_t>(info.numel()) * elem;
        const bool stored_as_float = e.dtype != DType::kF32 || info.type == static_cast<std::uint32_t>(GgmlType::kF32);
        if (!permute && stored_as_float) {
          e.view = info.data;  // read in place from the mapping, in its stored dtype
          continue;
        }
        e.owned = std::make_unique_for_overwrite<std::byte[]>(size);
        e.owned_size = size;
        std::span<const std::byte> bytes = info.data;  // F16 / BF16 keep their bytes
        std::unique_ptr<std::byte[]> converted;
        if (e.dtype == DType::kF32 && info.type != static_cast<std::uint32_t>(GgmlType::kF32)) {
          // Dequantized straight into the tensor's buffer, or into a scratch one when rows move.
          std::byte* target = e.owned.get();
          if (permute) {
            converted = std::make_unique_for_overwrite<std::byte[]>(size);
            target = converted.get();
          }
          dequantize_ggml(info.type, info.data,
                          std::span<float>(reinterpret_cast<float*>(target), static_cast<std::size_t>(info.numel())));
          bytes = std::span<const std::byte>(target, size);
          const bool keep_blocks = !bias && (info.type == static_cast<std::uint32_t>(GgmlType::kQ8_0) ||
                                             info.type == static_cast<std::uint32_t>(GgmlType::kQ4_1));
          if (keep_blocks) {
            // The engine reads these blocks as stored (kernels/cpu/weight_dtype.h), in HF row order.
            e.block_format = info.type == static_cast<std::uint32_t>(GgmlType::kQ8_0) ? "Q8_0" : "Q4_1";
            e.blocks = info.data;
            if (permute) {
              e.blocks_owned = std::make_unique_for_overwrite<std::byte[]>(info.data.size());
              permute_rows(info.data, e.blocks_owned.get(), rows, info.data.size() / static_cast<std::size_t>(rows),
                           c.head_dim);
              e.blocks = std::span<const std::byte>(e.blocks_owned.get(), info.data.size());
              file->release(info);
            }
          } else {
            file->release(info);  // the quantized bytes are not read again
          }
        }
        if (permute) {
          permute_rows(bytes, e.owned.get(), bias ? info.ne[0] : rows, bias ? elem : static_cast<std::size_t>(row_len) * elem,
                       c.head_dim);
        }
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  model.tensors = std::move(source);
  return model;
}

GgufTokenizer gguf_tokenizer(const GgufFile& file) {
  const std::string origin = file.path().string();
  const std::string model = file.get_string("tokenizer.ggml.model");
  const GgufValue* tokens_value = file.get_array_opt("tokenizer.ggml.tokens", GgufValue::Type::kString);
  if (tokens_value == nullptr) throw input_error(origin, "key \"tokenizer.ggml.tokens\"", "missing");
  std::vector<std::string> tokens;
  tokens.reserve(tokens_value->items.size());
  for (const GgufValue& t : tokens_value->items) tokens.push_back(t.s);
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n == 0) throw input_error(origin, "key \"tokenizer.ggml.tokens\"", "is empty");
  std::vector<std::int64_t> types(tokens.size(), kTypeNormal);
  if (const GgufValue* tt = file.find("tokenizer.ggml.token_type")) {
    if (tt->type != GgufValue::Type::kArray || (!tt->items.empty() && !tt->items[0].is_integer())) {
      throw input_error(origin, "key \"tokenizer.ggml.token_type\"", "must be an array of integers");
    }
    if (tt->items.size() != tokens.size()) {
      throw input_error(origin, "key \"tokenizer.ggml.token_type\"", "has {} entries for {} tokens", tt->items.size(),
                        tokens.size());
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const GgufValue& v = tt->items[i];
      types[i] = v.type == GgufValue::Type::kI8 || v.type == GgufValue::Type::kI16 || v.type == GgufValue::Type::kI32 ||
                         v.type == GgufValue::Type::kI64
                     ? v.i
                     : static_cast<std::int64_t>(v.u);
    }
  }
  auto special_id = [&](const char* key) -> std::int32_t {
    const std::optional<std::uint64_t> id = file.get_uint_opt(key);
    if (!id) return -1;
    if (*id >= static_cast<std::uint64_t>(n)) {
      throw input_error(origin, fmt::format("key \"{}\"", key), "{} is outside the vocabulary [0, {})", *id, n);
    }
    return static_cast<std::int32_t>(*id);
  };
  GgufTokenizer out;
  out.bos_id = special_id("tokenizer.ggml.bos_token_id");
  out.eos_id = special_id("tokenizer.ggml.eos_token_id");
  const std::int32_t unk = special_id("tokenizer.ggml.unknown_token_id");

  json vocab = json::object();
  for (std::int64_t id = 0; id < n; ++id) vocab[tokens[static_cast<std::size_t>(id)]] = id;
  json added = json::array();
  for (std::int64_t id = 0; id < n; ++id) {
    const std::int64_t type = types[static_cast<std::size_t>(id)];
    // llama.cpp matches control and unknown tokens' text as those tokens (parse_special), and
    // user-defined tokens always.
    if (type != kTypeControl && type != kTypeUnknown && type != kTypeUserDefined) continue;
    added.push_back({{"id", id},
                     {"content", tokens[static_cast<std::size_t>(id)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type != kTypeUserDefined}});
  }
  json& root = out.tokenizer_json;
  root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};

  if (model == "gpt2") {
    const std::string pre = file.get_string_opt("tokenizer.ggml.pre").value_or("default");
    const std::optional<PreTokenizerSpec> spec = pre_tokenizer_spec(pre);
    if (!spec) {
      throw input_error(origin, "key \"tokenizer.ggml.pre\"",
                        "pre-tokenizer \"{}\" is not supported (kvcheck reads smollm, llama-bpe, qwen2, gpt-2 and default)", pre);
    }
    const GgufValue* merges_value = file.get_array_opt("tokenizer.ggml.merges", GgufValue::Type::kString);
    if (merges_value == nullptr) throw input_error(origin, "key \"tokenizer.ggml.merges\"", "missing (a gpt2 tokenizer needs merges)");
    json merges = json::array();
    for (std::size_t i = 0; i < merges_value->items.size(); ++i) {
      const std::string& m = merges_value->items[i].s;
      const std::size_t space = m.find(' ', 1);
      if (space == std::string::npos || space + 1 >= m.size()) {
        throw input_error(origin, fmt::format("key \"tokenizer.ggml.merges\"[{}]", i), "\"{}\" is not two tokens joined by a space", m);
      }
      const std::string left = m.substr(0, space);
      const std::string right = m.substr(space + 1);
      for (const std::string* part : {&left, &right}) {
        if (!vocab.contains(*part)) {
          throw input_error(origin, fmt::format("key \"tokenizer.ggml.merges\"[{}]", i), "\"{}\" names \"{}\", which is not a token", m,
                            *part);
        }
      }
      merges.push_back(json::array({left, right}));
    }
    json pretokenizers = json::array();
    for (const std::string_view r : spec->regexes) {
      pretokenizers.push_back(
          {{"type", "Split"}, {"pattern", {{"Regex", std::string(r)}}}, {"behavior", "Isolated"}, {"invert", false}});
    }
    pretokenizers.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    root["normalizer"] = nullptr;
    root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pretokenizers}};
    root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    root["model"] = {{"type", "BPE"},           {"dropout", nullptr},         {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                     {"byte_fallback", false},  {"ignore_merges", spec->ignore_merges}, {"vocab", vocab},
                     {"merges", merges}};
    const bool add_bos = file.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(spec->add_bos);
    const bool add_eos = file.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(false);
    if (add_bos && out.bos_id < 0) throw input_error(origin, "key \"tokenizer.ggml.add_bos_token\"", "is true but there is no bos_token_id");
    if (add_eos && out.eos_id < 0) throw input_error(origin, "key \"tokenizer.ggml.add_eos_token\"", "is true but there is no eos_token_id");
    root["post_processor"] = template_processing(tokens, out.bos_id, add_bos, out.eos_id, add_eos);
    return out;
  }
  if (model == "llama") {
    const GgufValue* scores_value = file.get_array_opt("tokenizer.ggml.scores", GgufValue::Type::kF32);
    if (scores_value == nullptr) throw input_error(origin, "key \"tokenizer.ggml.scores\"", "missing (a llama tokenizer needs scores)");
    if (scores_value->items.size() != tokens.size()) {
      throw input_error(origin, "key \"tokenizer.ggml.scores\"", "has {} entries for {} tokens", scores_value->items.size(),
                        tokens.size());
    }
    // SentencePiece BPE as llama.cpp runs it: the adjacent pair whose concatenation is a token
    // with the highest score merges first. As tokenizer.json merges: every split of a normal
    // token into two tokens, ranked by the token's score (then by id, then by split point).
    struct Merge {
      float score;
      std::int64_t id;
      std::size_t split;
      std::string left, right;
    };
    std::vector<Merge> merges;
    for (std::int64_t id = 0; id < n; ++id) {
      if (types[static_cast<std::size_t>(id)] != kTypeNormal) continue;
      const std::string& t = tokens[static_cast<std::size_t>(id)];
      for (std::size_t split = 1; split < t.size(); ++split) {
        if ((static_cast<unsigned char>(t[split]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
        const std::string left = t.substr(0, split);
        const std::string right = t.substr(split);
        const auto l = vocab.find(left);
        const auto r = vocab.find(right);
        if (l == vocab.end() || r == vocab.end()) continue;
        merges.push_back({static_cast<float>(scores_value->items[static_cast<std::size_t>(id)].f), id, split, left, right});
      }
    }
    std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
      if (a.score != b.score) return a.score > b.score;
      return a.id < b.id;
    });
    json merge_list = json::array();
    for (const Merge& m : merges) merge_list.push_back(json::array({m.left, m.right}));
    const bool add_space_prefix = file.get_bool_opt("tokenizer.ggml.add_space_prefix").value_or(true);
    json normalizers = json::array();
    if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    root["pre_tokenizer"] = nullptr;
    json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    const bool has_bytes = std::any_of(types.begin(), types.end(), [](std::int64_t t) { return t == kTypeByte; });
    root["model"] = {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", unk >= 0 ? json(tokens[static_cast<std::size_t>(unk)]) : json(nullptr)},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", true},
                     {"byte_fallback", has_bytes},
                     {"ignore_merges", false},
                     {"vocab", vocab},
                     {"merges", merge_list}};
    const bool add_bos = file.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(true);
    const bool add_eos = file.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(false);
    if (add_bos && out.bos_id < 0) throw input_error(origin, "key \"tokenizer.ggml.add_bos_token\"", "is true but there is no bos_token_id");
    if (add_eos && out.eos_id < 0) throw input_error(origin, "key \"tokenizer.ggml.add_eos_token\"", "is true but there is no eos_token_id");
    root["post_processor"] = template_processing(tokens, out.bos_id, add_bos, out.eos_id, add_eos);
    return out;
  }
  throw input_error(origin, "key \"tokenizer.ggml.model\"", "\"{}\" is not supported (kvcheck reads gpt2 and llama)", model);
}

std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& c) {
  if (c.rope_scaling.type != RopeScaling::Type::kNone) {
    throw input_error("config", "rope_scaling", "GGUF files carry llama3 RoPE scaling as a tensor, which kvcheck does not write");
  }
  if (c.sliding_window != 0) throw input_error("config", "sliding_window", "kvcheck does not write a sliding window to GGUF");
  const std::string arch(family_name(c.family) == "mistral" ? "llama" : family_name(c.family));
  auto u32 = [](std::int64_t v) { return gguf_u32(static_cast<std::uint32_t>(v)); };
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"general.architecture", gguf_string(arch)},
      {arch + ".context_length", u32(c.max_position_embeddings)},
      {arch + ".embedding_length", u32(c.hidden_size)},
      {arch + ".block_count", u32(c.num_hidden_layers)},
      {arch + ".feed_forward_length", u32(c.intermediate_size)},
      {arch + ".attention.head_count", u32(c.num_attention_heads)},
      {arch + ".attention.head_count_kv", u32(c.num_key_value_heads)},
      {arch + ".attention.key_length", u32(c.head_dim)},
      {arch + ".attention.value_length", u32(c.head_dim)},
      {arch + ".attention.layer_norm_rms_epsilon", gguf_f32(static_cast<float>(c.rms_norm_eps))},
      {arch + ".rope.freq_base", gguf_f32(static_cast<float>(c.rope_theta))},
      {arch + ".rope.dimension_count", u32(c.head_dim)},
      {arch + ".vocab_size", u32(c.vocab_size)},
  };
  if (c.bos_token_id) kv.emplace_back("tokenizer.ggml.bos_token_id", u32(*c.bos_token_id));
  if (!c.eos_token_ids.empty()) kv.emplace_back("tokenizer.ggml.eos_token_id", u32(c.eos_token_ids.front()));
  return kv;
}

void write_gguf_model(const std::filesystem::path& path, const ModelConfig& config, const TensorSource& weights,
                      const std::vector<std::pair<std::string, GgufValue>>& extra) {
  std::vector<std::pair<std::string, GgufValue>> metadata = gguf_model_metadata(config);
  metadata.insert(metadata.end(), extra.begin(), extra.end());
  const bool permuted = config.family == ModelFamily::kLlama || config.family == ModelFamily::kMistral;
  std::vector<GgufTensorToWrite> tensors;
  for (const std::string& name : weights.names()) {
    const std::optional<std::string> gguf = gguf_tensor_name(name);
    if (!gguf) throw input_error(weights.origin(name), fmt::format("tensor \"{}\"", name), "has no GGUF name");
    const TensorView view = *weights.find(name);
    GgufTensorToWrite t;
    t.name = *gguf;
    t.ne.assign(view.shape.rbegin(), view.shape.rend());
    switch (view.dtype) {
      case DType::kF32: t.type = static_cast<std::uint32_t>(GgmlType::kF32); break;
      case DType::kF16: t.type = static_cast<std::uint32_t>(GgmlType::kF16); break;
      case DType::kBF16: t.type = static_cast<std::uint32_t>(GgmlType::kBF16); break;
      default:
        throw input_error(weights.origin(name), fmt::format("tensor \"{}\"", name), "dtype {} has no GGUF type",
                          dtype_name(view.dtype));
    }
    const bool qk = name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight") || name.ends_with("q_proj.bias") ||
                    name.ends_with("k_proj.bias");
    t.bytes.assign(view.bytes.begin(), view.bytes.end());
    if (permuted && qk) {
      const std::int64_t rows = view.shape.front();
      const std::size_t row_bytes = view.bytes.size() / static_cast<std::size_t>(rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        std::memcpy(t.bytes.data() + static_cast<std::size_t>(gguf_row_of_hf_row(r, config.head_dim)) * row_bytes,
                    view.bytes.data() + static_cast<std::size_t>(r) * row_bytes, row_bytes);
      }
    }
    tensors.push_back(std::move(t));
  }
  write_gguf(path, metadata, tensors);
}

}  // namespace kvcheck
