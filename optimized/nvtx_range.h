// NVTX ranges for Nsight Systems (docs/design.md §11): a scoped range on the calling thread.
// With NVTX3's headers (the CUDA toolkit's; CMake option KVCHECK_NVTX) a range is a push at
// construction and a pop at destruction, which cost a call through a null function table when no
// tool is attached; without them it compiles to nothing.
//
// The ranges and how they nest (properties/nvtx/ checks it on a recorded run):
//   serving <policy>                       one configuration of `kvcheck bench --workload`
//     step                                 one scheduler step (admission, then decode)
//       prefill | decode | swap            the model runner's passes, a preemption's swap out/in
//         attention                        prefill attention (with column sums) or paged decode
//         quantize                         encoding keys and values into their page formats
//         compaction                       the page manager's planning and page moves (also
//                                          inside swap: a swap-in allocates its pages)
// A decode step that the pool cannot hold ends before its attention: a preemption follows it.
#pragma once

#if KVCHECK_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace kvcheck {

inline constexpr bool kNvtxCompiledIn =
#if KVCHECK_HAVE_NVTX
    true;
#else
    false;
#endif

class NvtxRange {
 public:
  // `name` must outlive nothing: NVTX copies it (or the tool does) at the push.
  explicit NvtxRange(const char* name) {
#if KVCHECK_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#if KVCHECK_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace kvcheck
