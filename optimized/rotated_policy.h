// Rotation before quantization (`rotate=hadamard`, QuaRot / TurboQuant): a quantizing policy
// (int8, int4, kv-bits, kivi2, kivi4, leankv) whose every head's queries and post-RoPE keys are
// rotated by one orthonormal matrix R = H·D/√d (kernels/cpu/hadamard_rotate.h), values rotated
// by R before the cache stores them and the attention output rotated back by R^T. Attention is
// unchanged in exact arithmetic (q·k and the value mixture commute with R); what changes is what
// the quantizer sees: an outlier channel's energy spread over every channel of the head, so
// per-token (and per-channel) scales stop being set by a few channels. docs/design.md §8.
#pragma once

#include <memory>
#include <vector>

#include "optimized/kv_policy.h"
#include "optimized/policy_registry.h"

namespace kvcheck {

// `inner` with `rotation` (returned as is when rotation.hadamard is false). Its name is inner's
// spec with the rotation's parameters appended; make_engine refuses it (InputError naming the
// policy and head_dim) on a model whose head_dim is not a power of two.
std::unique_ptr<KvPolicy> make_rotated_policy(std::unique_ptr<KvPolicy> inner, KvRotation rotation);

// The parameters `rotate` (none, hadamard, hadamard-signs) and `rotate_seed` appended to a
// policy's own, and the policy its entry builds wrapped by them.
std::vector<PolicyParam> with_rotation_params(std::vector<PolicyParam> params);
std::unique_ptr<KvPolicy> rotated_from_params(std::unique_ptr<KvPolicy> inner, const PolicyParams& p);

}  // namespace kvcheck
