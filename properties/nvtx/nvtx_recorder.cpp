// An NVTX injection library that records ranges, for the NVTX nesting test (nvtx_ranges_test.cpp)
// and for anyone who wants kvcheck's ranges without Nsight Systems. NVTX loads it the way it loads
// a profiler: NVTX_INJECTION64_PATH=<this .so> in the environment makes the first NVTX call in the
// process dlopen it and call InitializeInjectionNvtx2, which swaps the core module's push / pop
// entries for the recorders below.
//
// Output: KVCHECK_NVTX_TRACE names a file that receives one line per event, in order:
//   push <thread> <name>
//   pop <thread>
// where <thread> is a small number per OS thread, in order of first event.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace {

std::mutex mutex;
std::FILE* out = nullptr;
std::map<std::thread::id, int>* threads = nullptr;

int thread_number() {
  const auto [it, added] = threads->try_emplace(std::this_thread::get_id(), static_cast<int>(threads->size()));
  (void)added;
  return it->second;
}

void record_push(const char* name) {
  const std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(out, "push %d %s\n", thread_number(), name ? name : "(null)");
  std::fflush(out);
}

int NVTX_API push_a(const char* message) {
  record_push(message);
  return 0;
}

int NVTX_API push_ex(const nvtxEventAttributes_t* attributes) {
  const bool ascii = attributes != nullptr && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII;
  record_push(ascii ? attributes->message.ascii : "(non-ascii message)");
  return 0;
}

int NVTX_API pop() {
  const std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(out, "pop %d\n", thread_number());
  std::fflush(out);
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = std::getenv("KVCHECK_NVTX_TRACE");
  if (path == nullptr || get_table == nullptr) return 0;
  out = std::fopen(path, "w");
  if (out == nullptr) return 0;
  threads = new std::map<std::thread::id, int>();
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangePop) {
    return 0;
  }
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push_a);
  *table[NVTX_CBID_CORE_RangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push_ex);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
