// GCC / Clang vector-extension lanes for the CPU kernels compiled twice (baseline x86-64 and
// kernels/cpu/avx2_target_begin.inc), and a third time for AVX-512 where the file has one:
// dense_ops.cpp, paged_attention.cpp, prefill_attention.cpp.
// On a baseline target GCC lowers each eight-float operation to two SSE instructions, under
// target("avx2") to one; lane l only ever meets lane l, so both builds give the same bits.
#pragma once

#include <cstdint>

namespace kvcheck::lanes {

typedef float Lanes __attribute__((vector_size(32)));         // eight floats
typedef float Lanes4 __attribute__((vector_size(16)));        // four floats
typedef std::uint32_t U32Lanes __attribute__((vector_size(32)));
typedef std::int32_t I32Lanes __attribute__((vector_size(32)));
typedef std::int32_t I32Lanes4 __attribute__((vector_size(16)));
typedef std::uint16_t U16Lanes __attribute__((vector_size(16)));  // eight fp16 / bf16 bit patterns
typedef std::uint8_t U8Lanes __attribute__((vector_size(8)));
typedef std::int8_t I8Lanes __attribute__((vector_size(8)));
// Sixteen floats: only the AVX-512 builds use them, as two groups of eight lanes side by side (two
// output rows, two query heads, two lane groups of one row), so that lane l of each group meets
// exactly the operands it meets in an eight-lane build.
typedef float Lanes16 __attribute__((vector_size(64)));
typedef std::uint32_t U32Lanes16 __attribute__((vector_size(64)));
typedef std::int32_t I32Lanes16 __attribute__((vector_size(64)));
typedef std::uint16_t U16Lanes16 __attribute__((vector_size(32)));

}  // namespace kvcheck::lanes

// Lane values only cross functions marked so, which keeps them in registers and makes the AVX
// argument-passing ABI question (-Wpsabi) moot.
#define KVCHECK_ALWAYS_INLINE inline __attribute__((always_inline))
