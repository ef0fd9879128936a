/* nvtx3/nvToolsExt.h on the CPU (see ../cuda_runtime.h): ranges mark nothing. */
#ifndef EMU_NVTOOLSEXT_H
#define EMU_NVTOOLSEXT_H
static inline int nvtxRangePushA(const char*) { return 0; }
static inline int nvtxRangePop(void) { return 0; }
#endif // EMU_NVTOOLSEXT_H
