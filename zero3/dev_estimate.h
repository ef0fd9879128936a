/*
 The device engine's memory (zero3/device.cuh), counted without a GPU: what one rank of
 the GPU trainer's device backend allocates on its GPU and pins on its host, for a model,
 a configuration and a number of ranks, at every tier (parameters none|cpu|nvme x optimizer
 none|cpu|nvme). It builds the engine's own plan (X = bytes of a compute element, the
 floatX of the build: 2 bf16, 4 fp32) and schedule, and sizes the stage-3 gather pools by
 walking the pass driver with a counting mover, as zero_dev_pools_init does: that part is
 zero_dev_pool_counts, which the engine can call itself, so that the rule exists once.

 Terms, per rank: P = padded parameters (plan.padded_total), S = this rank's shard
 (plan.shard_total), Lmax = the largest padded unit, Smax its shard, W = the shard group's
 ranks (the world, or MiCS's mics_shard_size).

 GPU, the engine as it is (no offload, or --offload-optimizer cpu at stages 1-3):
   parameters   X P (stages 0-2) or X S (stage 3); hpZ's slices X P / hpz at stage 3
   gradients    X P (stages 0-1); at stage 1 the reduced shards X S (4 S when reduced in
                fp32); fp32 accumulators 4 S (stages 2-3); fp32 reductions at stage 0 the
                whole gradient 4 P
   optimizer    12 P (stage 0) or 12 S, fp32 master and AdamW moments; 0 with optimizer offload
   units        stage 3: every persistent unit whole (X each) and the gather pools, X per
                element of each buffer (zero_dev_pool_counts)
   grad pools   stages 2-3: per unit size, 2 buffers when several units have it, +1 when the
                embedding (unit 0) has it too (zero_dev_grad_pool_counts), X per element, each
                with its reduce-scatter output X elems / W (not when reduced in fp32 or qgZ)
   comm         fp32 reductions (bf16 build, --communication-data-type fp32): one fp32 unit
                4 Lmax (stages 1-3); fp32 reductions or qgZ at stages 2-3: its reduced shard 4 Smax
   init         transient, before the activations exist: one fp32 unit, 4 Lmax, to fill the
                parameters (the peak is the engine + the larger of this and the activations)
 GPU, the shard-free mode (stage 3 with --offload-param cpu|nvme or --offload-optimizer
 nvme; parameter offload needs optimizer offload): nothing the size of a shard stays on
 the GPU, neither 4 S accumulators nor the optimizer, nor with parameter offload the X S
 parameters (--offload-optimizer nvme alone keeps them, and uploads the update); the persistent
 units, the gather pools and the gradient pools stay, each gradient buffer with a
 reduce-scatter output of its shard, X elems / W (4 elems / W when reduced in fp32 or with
 qgZ, which then need no 4 Smax of their own); the fp32 unit 4 Lmax of fp32 reductions stays.
 Host (pinned), per rank:
   optimizer cpu   master, m, v 12 S; the reduced gradient shards (fp32, 4 S; X S at stage 1
                   when reduced in bf16) and the CPU Adam's updated compute copy X S, each
                   twice with --dpu. The parameter shards of --offload-param cpu are that copy,
                   and so are the cached ones of --offload-param nvme (not counted again).
   shard-free mode the gradient shards leave the GPU through 4 staging slots of 4 Smax.
   optimizer nvme  the step's group buffers, buffer_count (at least 2) x 4 regions (master,
                   m, v, gradient) x sub_group_size (whole 4 KiB blocks, at most the shard and
                   1 GiB) x 4 bytes, and one unit's gradient span staged for the file; no
                   gradients in memory. The parameter shards the NVMe step writes stay on the
                   host, X S, or with --offload-param nvme only the ones max_in_cpu keeps (the
                   persistent units first, then in order, as zero_swap_placement).
   param nvme      offload_param.buffer_count pinned buffers (zero_dev_param_stages) of the
                   largest shard on NVMe, X each in whole 4 KiB blocks (reads ahead go there,
                   O_DIRECT), that a shard read is uploaded from
   swap module     its own buffers, as zero_swap_size counts them (zero3/swap.h): the
                   step's groups and the gradient's span above, one shard's staging for the
                   parameter region, 4 bytes of checksum per 4 KiB block of the swap file
 NVMe, per rank: the optimizer's 4 regions, 16 S (S rounded up to 1024 elements), and with
 --offload-param nvme the parameter region, X per element of every shard not kept on the
 host (each 4 KiB-aligned). Not counted: the CUDA context, cuBLAS(Lt)'s workspace, NCCL's
 buffers and the allocator's slack (scripts/run_common.sh keeps 9-10 GiB of an 80 GB GPU for
 them), qwZ's and qgZ's quantised scratch (about one int8 copy of the largest unit), the
 kernels' small scratch, the process's own host memory.
*/
#ifndef ZERO3_DEV_ESTIMATE_H
#define ZERO3_DEV_ESTIMATE_H

#include <stddef.h>           // size_t
#include "zero3/plan.h"       // ZeroPlan: padded units and shards
#include "zero3/schedule.h"   // ZeroSchedule: the uses the pools are walked over
#include "zero3/config.h"     // ZeroConfig, ZeroOffload
#include "zero3/zero.h"       // ZeroModel

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_DEV_EST_MAX_POOLS 16      // distinct unit sizes a pool list holds (the engine's ZERO_DEV_MAX_POOLS)
#define ZERO_DEV_EST_GRAD_SLOTS 4      // shard-free mode: gradient shards staged on their way to the host

typedef struct {
    // per rank on the GPU, bytes (see the top)
    double gpu_params, gpu_grads, gpu_optimizer, gpu_units, gpu_grad_pools, gpu_comm;
    double gpu;                  // their sum: allocated at init and held for the run
    double gpu_init;             // transient at init (4 Lmax), before the activations
    // per rank pinned on the host, bytes
    double host_optimizer, host_grads, host_params, host_staging;
    double host;                 // their sum
    double nvme;                 // the swap file per rank, bytes
    int shard_free;              // 1: the shard-free mode (see the top)
    // the pools: stage 3's gather pools and stages 2-3's gradient pools, by unit size
    int npools, ngpools;
    size_t pool_elems[ZERO_DEV_EST_MAX_POOLS], gpool_elems[ZERO_DEV_EST_MAX_POOLS];
    int pool_count[ZERO_DEV_EST_MAX_POOLS], gpool_count[ZERO_DEV_EST_MAX_POOLS];
} ZeroDevEstimate;

// Stage 3's gather pools: for each padded size of a unit that is not persistent, in unit
// order (elems), how many buffers of it the pass driver ever has the engine hold at once
// (count, at least 1), found by walking a training and a forward pass (zero_pass_walk, no
// hpZ, the reductions forgotten at a pass's end, as the device engine runs it) with a mover
// that counts. s must be the engine's schedule with its persistent units gathered
// (zero_schedule_gathered); the walk leaves it as it found it. Other stages: *npools 0.
// elems and count have room for ZERO_DEV_EST_MAX_POOLS. Returns 0, or -1 with zero_error.
int zero_dev_pool_counts(const ZeroPlan* p, ZeroSchedule* s, int stage, size_t* elems, int* count, int* npools);

// Stages 2-3's gradient pools: for each padded unit size, in unit order, 2 buffers when
// several units have it (one written while the other is reduced), 1 when one does, +1 when
// the embedding (unit 0) is among several: its gradient is open for the whole backward.
// Other stages: *npools 0. Returns 0, or -1 with zero_error (too many sizes).
int zero_dev_grad_pool_counts(const ZeroPlan* p, int stage, size_t* elems, int* count, int* npools);

// Parameters on NVMe: the pinned buffers a shard read is uploaded from, all but one of
// them for reads ahead: offload_param.buffer_count, at most one per unit.
int zero_dev_param_stages(const ZeroPlan* p, const ZeroConfig* cfg);

// Whether the device engine runs (or is to run) this tier: zero_config_validate's offload
// rules, and parameter offload only with optimizer offload. 1 or 0.
int zero_dev_tier_valid(int stage, ZeroOffload opt, ZeroOffload param);

// What one rank of the device engine holds for `model` under cfg (its stage, offload,
// knobs) on `world` ranks with x bytes per compute element (2 or 4) and --dpu: see the top.
// Returns 0, or -1 with zero_error (an invalid tier, --dpu without optimizer cpu, ...).
int zero_dev_estimate(const ZeroModel* model, const ZeroConfig* cfg, int world, size_t x, int dpu, ZeroDevEstimate* out);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_DEV_ESTIMATE_H
