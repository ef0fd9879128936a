/*
 The GPU engines, as the GPU trainer sees them: their constructors and the watched wait
 for the GPU. zero3/device.cu compiles the engines' CUDA code (zero3/device.cuh with its
 parts, zero3/staged.cuh, zero3/nccl.cuh, zero3/nccl_watch.cuh, zero3/adamw.cuh,
 zero3/quant.cuh) into one object per build and precision, which the trainer links: a
 change to an engine file recompiles that object, not the trainer.

 floatX is the trainer's and the object's alike (zero3/cuda_util.cuh: bf16, or fp32 with
 -DENABLE_FP32): the Makefile links each trainer with the object of its own precision, and
 both constructors refuse a ZeroInit whose param_bytes is not their sizeof(floatX).
 Everything else of an engine is reached through zero3/zero.h's calls.
*/
#ifndef ZERO3_DEVICE_H
#define ZERO3_DEVICE_H

#include <cuda_runtime.h>  // cudaStream_t, cudaEvent_t: zero_gpu_wait's arguments
#include "zero3/zero.h"    // Zero, ZeroInit: what the constructors take and make

// A device engine behind *z (zero3/device.cuh: the states on the GPU, NCCL between the
// ranks, one GPU per rank), built from in (see ZeroInit; in->stream orders it after the
// model's kernels). 0, or -1 with zero_error and nothing left allocated.
int zero_dev_create(Zero** z, const ZeroInit* in);

// A host-staged engine behind *z (zero3/staged.cuh: the host engine, with floatX copies on
// the GPU), built from in. 0, or -1 with zero_error and nothing left allocated.
int zero_staged_create(Zero** z, const ZeroInit* in);

// The host waits for ev (or, when ev is NULL, for everything issued on s), polling, with the
// collectives in flight told to the watchdog (zero3/nccl_watch.cuh). 0, or -1 with
// zero_error on a CUDA or an NCCL error; `what` names the wait in a CUDA error's message.
int zero_gpu_wait(cudaStream_t s, cudaEvent_t ev, const char* what);

#endif // ZERO3_DEVICE_H
