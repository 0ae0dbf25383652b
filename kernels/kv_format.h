// How keys or values are stored: the element type, the integer quantization spec, and a tier (a
// key format with a value format). Plain data shared by the CPU twins, the CUDA adapters and the
// oracles; the bytes they take and the page layout are kernels/cpu/kv_bytes.h.
#pragma once

#include <string>

#include "kernels/quant_format.h"

namespace kvcheck {

enum class KvDType { kFp32, kFp16, kFp8E4M3, kInt };

// One stored format of keys or of values.
struct KvFormat {
  KvDType dtype = KvDType::kFp16;
  QuantSpec spec;  // used when dtype is kInt
};

inline KvFormat fp32_format() { return {KvDType::kFp32, {}}; }
inline KvFormat fp16_format() { return {KvDType::kFp16, {}}; }
inline KvFormat fp8_e4m3_format() { return {KvDType::kFp8E4M3, {}}; }
inline KvFormat int_format(const QuantSpec& spec) { return {KvDType::kInt, spec}; }

// "fp16", "fp8-e4m3", "int4/token", ...
std::string kv_format_name(const KvFormat& format);

// A precision tier: how keys and values of one token are stored (LeanKV's K8V4, K4V2, ...).
struct KvTier {
  KvFormat key;
  KvFormat value;
  // Quest: each page also stores the per-channel fp16 minimum and maximum of its keys (fp16
  // keys only; kernels/cpu/kv_bytes.h PageLayout::key_range).
  bool key_range = false;
};
// "K int8/token / V int4/token", ...
std::string kv_tier_name(const KvTier& tier);

}  // namespace kvcheck
