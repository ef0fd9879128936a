/* nvtx3/nvToolsExt.h on the CPU (see ../cuda_runtime.h): the ranges are kept, in order, for a
   test to read (test_device_emu.cc: the engine's movers named with their units), the last
   EMU_NVTX_KEEP of them; each thread has its own stack of open ranges, as NVTX's. */
#ifndef EMU_NVTOOLSEXT_H
#define EMU_NVTOOLSEXT_H
#include <string>   // the ranges' names
#include <vector>
#include <mutex>    // one list, pushed to by the threads that range (--dpu's CPU Adam too)
#define EMU_NVTX_KEEP 100000
inline std::vector<std::string> emu_nvtx_names;  // every range pushed, in order (cleared at EMU_NVTX_KEEP)
inline std::mutex emu_nvtx_lock;
inline thread_local int emu_nvtx_depth = 0;      // this thread's ranges pushed and not popped
static inline int nvtxRangePushA(const char* name) {
    std::lock_guard<std::mutex> g(emu_nvtx_lock);
    if (emu_nvtx_names.size() >= EMU_NVTX_KEEP) { emu_nvtx_names.clear(); }
    emu_nvtx_names.push_back(name);
    return emu_nvtx_depth++;
}
static inline int nvtxRangePop(void) { return emu_nvtx_depth > 0 ? --emu_nvtx_depth : -1; }
#endif // EMU_NVTOOLSEXT_H
