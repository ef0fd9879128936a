/*
 Model-state memory needed per GPU and per node by each ZeRO stage and offload choice,
 in the spirit of DeepSpeed's estimate_zero2/zero3_model_states_mem_needs, derived here
 from the arithmetic of the ZeRO paper (Rajbhandari et al., 2020, section 3 and figure 1).

 Terms: Psi = number of parameters, L = parameters of the largest layer (the largest unit
 that is ever gathered whole), N = num_nodes * gpus_per_node ranks, G = gpus_per_node.

 Mixed precision with bf16 and AdamW, as the ZeRO paper counts it (its section 3.1):
   2 bytes per parameter for the bf16 parameters the forward and backward use,
   2 bytes per parameter for their bf16 gradients,
   K = 12 bytes per parameter of optimizer state: fp32 master copy, Adam m and Adam v.
 So plain data parallelism holds (2 + 2 + K) Psi = 16 Psi bytes on every GPU.

 Per GPU, no offload (paper section 3 / figure 1, with Psi/N for what is partitioned):
   stage 0  (2 + 2 + K) Psi            everything replicated
   stage 1  2 Psi + 2 Psi + K Psi / N   optimizer state partitioned (P_os)
   stage 2  2 Psi + (2 + K) Psi / N     + gradients partitioned (P_os+g)
   stage 3  (2 + 2 + K) Psi / N + W     + parameters partitioned (P_os+g+p)
 W, the stage-3 working set, is what partitioning cannot remove: a unit must be whole on
 the GPU while it computes. We count 4 buffers of the largest layer in bf16,
 W = 4 * L * 2 bytes: during backward, (1) the gathered parameters of the unit being
 computed, (2) the parameters of the next unit, prefetched while (1) computes, (3) the
 full-size gradient of the unit being computed, and (4) the full-size gradient of the
 previous unit, still being reduce-scattered while (3) is produced. Forward needs only
 (1) and (2), so backward is the peak. Activations, temporary buffers, communication
 buckets and the framework's own memory are not model states and are not counted, as in
 DeepSpeed's estimator; nor is the host memory of start-up (loading a checkpoint).

 Offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021):
   optimizer -> cpu (stage >= 1): the K Psi/N of optimizer state leaves the GPU. The host
     keeps it, and the CPU Adam also needs the rank's gradient partition in fp32 to update
     it: host += (K + 4) Psi / N per rank. We count the fp32 gradients for stage 1 as well
     as 2 and 3: whatever the stage, the CPU step reads the rank's partition in fp32. The GPU
     keeps its bf16 gradients (conservative: with offload they could be streamed out bucket
     by bucket).
   optimizer -> nvme (stage 3): the K Psi/N goes to disk; the host keeps the fp32 gradient
     partition (4 Psi/N) and swap buffers for the state being updated: 4 buffers (DeepSpeed's
     default offload_optimizer.buffer_count) of the rank's share of the largest layer,
     K bytes per element, but never more than the state they stage:
     min(4 * L / N, Psi / N) * K. (Without the cap a small model with a big embedding,
     GPT-2 124M at N = 8, would need more host memory with NVMe than with CPU offload.)
   param -> cpu (stage 3): the rank's 2 Psi / N of bf16 parameters move to the host; the
     working set W stays on the GPU, where it is computed with.
   param -> nvme (stage 3): the 2 Psi / N go to disk; the host stages reads in 5 buffers
     (DeepSpeed's default offload_param.buffer_count) of the rank's share of the largest
     layer, capped in the same way: min(5 * L / N, Psi / N) * 2 bytes.
 Per node is per rank times G. The combinations DeepSpeed does not have (offload at stage 0,
 parameter offload before stage 3, optimizer NVMe offload before stage 3) are errors, like
 zero_config_validate's.

 Gradients reduced in fp32 (--communication-data-type fp32; the device engine, zero3/device.cuh),
 on top of the above, per GPU: stage 0 keeps the whole reduced gradient in fp32, 4 Psi
 (nothing on one rank, which reduces nothing); stage 1 its reduced shards in fp32, 4 Psi / N
 (the bf16 shards they replace are not counted above either), and one unit's gradient
 widened to fp32 for its reduce-scatter, 4 L; stages 2-3 that unit and its reduced shard,
 4 L + 4 L / N. The gradient traffic doubles; the host engine always reduces in fp32.

 This table is the ZeRO paper's arithmetic for any engine. What the host engine itself will
 allocate for one configuration (the CPU trainer's --estimate prints it too) is
 zero_host_estimate in zero3/host.h, next to the code it counts.
*/
#ifndef ZERO3_ESTIMATE_H
#define ZERO3_ESTIMATE_H

#include <stdio.h>          // FILE, fprintf for the table
#include "zero3/config.h"   // ZeroOffload, zero_offload_name

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { double gpu_bytes, host_bytes_per_node, nvme_bytes_per_node; } ZeroEstimate;

#define ZERO_EST_PARAM_BYTES 2.0      // bf16 parameters
#define ZERO_EST_GRAD_BYTES 2.0       // bf16 gradients
#define ZERO_EST_OPT_BYTES 12.0       // K: fp32 master + Adam m + Adam v
#define ZERO_EST_FP32_GRAD_BYTES 4.0  // the gradient partition the CPU/NVMe optimizer updates with
#define ZERO_EST_WORK_BUFFERS 4.0     // stage-3 working set, in largest-layer bf16 buffers (see above)
#define ZERO_EST_OPT_SWAP_BUFFERS 4.0    // offload_optimizer.buffer_count default
#define ZERO_EST_PARAM_SWAP_BUFFERS 5.0  // offload_param.buffer_count default
#define ZERO_EST_COMM_FP32_BYTES 4.0     // a gradient element widened for an fp32 reduction

int zero_estimate(double num_params, double largest_layer, int num_nodes, int gpus_per_node, int stage,
                                ZeroOffload opt, ZeroOffload param, ZeroEstimate* out);

// GPU bytes per rank that reducing the gradients in fp32 adds at `stage` (see the top)
double zero_estimate_comm_fp32(double num_params, double largest_layer, int num_nodes, int gpus_per_node, int stage);

// the table; comm_fp32: the gradients reduced in fp32 (--communication-data-type fp32)
void zero_estimate_print(FILE* f, const char* model_name, double num_params, double largest_layer, int num_nodes,
                                       int gpus_per_node, int comm_fp32);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_ESTIMATE_H
