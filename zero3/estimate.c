// zero3/estimate.c: the implementation (the interface and its notes: zero3/estimate.h)
#include "zero3/estimate.h"  // this module's types and prototypes
#include <math.h>           // isfinite (a macro: no -lm needed)
#include "zero3/util.h"     // zero_error: the library error convention

int zero_estimate(double num_params, double largest_layer, int num_nodes, int gpus_per_node, int stage,
                                ZeroOffload opt, ZeroOffload param, ZeroEstimate* out) {
    if (!(isfinite(num_params) && num_params > 0)) { return zero_error("zero estimate: num_params %g must be > 0", num_params); }
    if (!(isfinite(largest_layer) && largest_layer >= 0 && largest_layer <= num_params)) {
        return zero_error("zero estimate: largest_layer %g must be in [0, num_params %g]", largest_layer, num_params);
    }
    if (num_nodes < 1 || gpus_per_node < 1) { return zero_error("zero estimate: %d nodes x %d GPUs: both must be >= 1", num_nodes, gpus_per_node); }
    if (stage < 0 || stage > 3) { return zero_error("zero estimate: stage %d is out of range [0, 3]", stage); }
    if ((unsigned)opt > ZERO_OFFLOAD_NVME || (unsigned)param > ZERO_OFFLOAD_NVME) { return zero_error("zero estimate: unknown offload device"); }
    if (opt != ZERO_OFFLOAD_NONE && stage < 1) { return zero_error("zero estimate: offload optimizer %s needs stage >= 1", zero_offload_name(opt)); }
    if (param != ZERO_OFFLOAD_NONE && stage != 3) { return zero_error("zero estimate: offload param %s needs stage 3", zero_offload_name(param)); }
    if (opt == ZERO_OFFLOAD_NVME && stage != 3) { return zero_error("zero estimate: offload optimizer nvme needs stage 3"); }

    const double psi = num_params, L = largest_layer;
    const double N = (double)num_nodes * (double)gpus_per_node, G = (double)gpus_per_node;
    const double P = ZERO_EST_PARAM_BYTES, Gr = ZERO_EST_GRAD_BYTES, K = ZERO_EST_OPT_BYTES;

    // what one GPU holds of each model state, before offload
    double params = stage == 3 ? P * psi / N : P * psi;
    double grads = stage >= 2 ? Gr * psi / N : Gr * psi;
    double optim = stage >= 1 ? K * psi / N : K * psi;
    double work = stage == 3 ? ZERO_EST_WORK_BUFFERS * L * P : 0.0;
    double host = 0.0, nvme = 0.0;  // per rank

    if (opt == ZERO_OFFLOAD_CPU) {
        host += optim + ZERO_EST_FP32_GRAD_BYTES * psi / N;
        optim = 0.0;
    } else if (opt == ZERO_OFFLOAD_NVME) {
        nvme += optim;
        double staged = ZERO_EST_OPT_SWAP_BUFFERS * L / N;
        if (staged > psi / N) { staged = psi / N; }
        host += ZERO_EST_FP32_GRAD_BYTES * psi / N + staged * K;
        optim = 0.0;
    }
    if (param == ZERO_OFFLOAD_CPU) {
        host += params;
        params = 0.0;
    } else if (param == ZERO_OFFLOAD_NVME) {
        nvme += params;
        double staged = ZERO_EST_PARAM_SWAP_BUFFERS * L / N;
        if (staged > psi / N) { staged = psi / N; }
        host += staged * P;
        params = 0.0;
    }
    out->gpu_bytes = params + grads + optim + work;
    out->host_bytes_per_node = host * G;
    out->nvme_bytes_per_node = nvme * G;
    return 0;
}

double zero_estimate_comm_fp32(double num_params, double largest_layer, int num_nodes, int gpus_per_node, int stage) {
    const double W = ZERO_EST_COMM_FP32_BYTES, N = (double)num_nodes * (double)gpus_per_node;
    if (stage == 0) { return N > 1 ? W * num_params : 0.0; }
    if (stage == 1) { return W * num_params / N + W * largest_layer; }
    return W * largest_layer + W * largest_layer / N;
}

// 124439808 -> "124.44M", 1.75e11 -> "175.00B"
static const char* zero_estimate_count(double v, char* buf, size_t cap) {
    if (v >= 1e9) { snprintf(buf, cap, "%.2fB", v / 1e9); }
    else if (v >= 1e6) { snprintf(buf, cap, "%.2fM", v / 1e6); }
    else if (v >= 1e3) { snprintf(buf, cap, "%.2fK", v / 1e3); }
    else { snprintf(buf, cap, "%.0f", v); }
    return buf;
}

void zero_estimate_print(FILE* f, const char* model_name, double num_params, double largest_layer, int num_nodes,
                                       int gpus_per_node, int comm_fp32) {
    // each stage with the offloads that make sense for it, from none to the most
    static const struct { int stage; ZeroOffload opt, param; } rows[] = {
        { 0, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE },
        { 1, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE },
        { 1, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE },
        { 2, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE },
        { 2, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE },
        { 3, ZERO_OFFLOAD_NONE, ZERO_OFFLOAD_NONE },
        { 3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_NONE },
        { 3, ZERO_OFFLOAD_CPU, ZERO_OFFLOAD_CPU },
        { 3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_CPU },
        { 3, ZERO_OFFLOAD_NVME, ZERO_OFFLOAD_NVME },
    };
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    char a[32], b[32];
    fprintf(f, "model states of %s: Psi = %s params (largest layer %s), N = %d node(s) x %d GPU(s) = %lld ranks; bf16 + AdamW (2+2+12 bytes/param)\n",
            model_name ? model_name : "model", zero_estimate_count(num_params, a, sizeof(a)),
            zero_estimate_count(largest_layer, b, sizeof(b)), num_nodes, gpus_per_node, (long long)num_nodes * gpus_per_node);
    if (comm_fp32) {
        fprintf(f, "  gradients reduced in fp32: + 4 bytes/param at stage 0, 4/N bytes/param + 4 x the largest layer at stage 1, "
                   "4 (1 + 1/N) x the largest layer at stages 2-3\n");
    }
    fprintf(f, "  stage  offload_optimizer  offload_param   GPU GiB/GPU  host GiB/node  NVMe GiB/node\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        ZeroEstimate e = { 0, 0, 0 };
        if (zero_estimate(num_params, largest_layer, num_nodes, gpus_per_node, rows[i].stage, rows[i].opt, rows[i].param, &e) != 0) {
            fprintf(f, "  (cannot estimate: %s)\n", zero_errmsg());
            return;
        }
        if (comm_fp32) { e.gpu_bytes += zero_estimate_comm_fp32(num_params, largest_layer, num_nodes, gpus_per_node, rows[i].stage); }
        fprintf(f, "  %5d  %-17s  %-13s  %12.2f  %13.2f  %13.2f\n", rows[i].stage, zero_offload_name(rows[i].opt),
                zero_offload_name(rows[i].param), e.gpu_bytes / GiB, e.host_bytes_per_node / GiB, e.nvme_bytes_per_node / GiB);
    }
}
