/*
 The GPU engines' one translation unit: the device engine and the host-staged engine,
 with their collectives, their watch, AdamW and the quantisation kernels, compiled here
 and nowhere else in a program, so that the state the engine files keep per process
 (zero3/nccl_watch.cuh's record of the collectives in flight) is one. What the trainer
 calls is zero3/device.h's.

 The Makefile builds it once per precision (floatX: bf16, or fp32 with -DENABLE_FP32) for
 each CUDA build: nvcc's, and the CPU emulator's (a launch-rewritten copy under build/emu,
 compiled as the emulated trainer is but without the emulator's globals, which the
 program defines).
*/
// nvcc's front end reports a false "set but never used" (#550) for a variable that
// zero3/config.h uses through (void)n: silenced for the engines' C headers, as in the trainer
#pragma nv_diag_suppress 550
#include "zero3/device.h"     // the prototypes defined here: zero_dev_create, zero_staged_create, zero_gpu_wait
#include "zero3/device.cuh"   // the device engine, its init and step (zero_dev_create), NCCL and its watch (zero_gpu_wait)
#include "zero3/staged.cuh"   // the host-staged engine (zero_staged_create)
