// What a training run reports (llmc/trainer_report.h): the table, memory, the kernel's figures, the --report JSON.
#include "llmc/trainer_report.h" // the interface, its types and the headers its bodies use
#include <stdio.h>            // printf, fopen, fgets
#include <stdlib.h>           // atof, free
#include <string.h>           // strncmp, strstr, memset
#include <mpi.h>              // MPI_Gather: every rank's memory figures
#include <cjson/cJSON.h>      // the --report JSON
#include "llmc/utils.h"       // llmc_error, AtomicFile
#include "zero3/config.h"     // zero_config_describe
#include "llmc/trainer_proc.h"  // zeroCheck, mpiWatched

void trainer_memory(const TrainerModel* m, double* out) {
    ZeroStats zs;
    zeroCheck(zero_stats(m->zero, &zs));
    memset(out, 0, MEM_FIELDS * sizeof(double));
    out[MEM_PARAMS] = zs.mem[ZERO_MEM_PARAMS];
    out[MEM_GRADS] = zs.mem[ZERO_MEM_GRADS];
    out[MEM_OPTIMIZER] = zs.mem[ZERO_MEM_OPTIMIZER];
    out[MEM_BUFFERS] = zs.mem[ZERO_MEM_BUFFERS];
    out[MEM_HOST_PARAMS] = zs.mem[ZERO_MEM_HOST_PARAMS];
    out[MEM_HOST_GRADS] = zs.mem[ZERO_MEM_HOST_GRADS];
    out[MEM_HOST_OPTIMIZER] = zs.mem[ZERO_MEM_HOST_OPTIMIZER];
    out[MEM_HOST_BUFFERS] = zs.mem[ZERO_MEM_HOST_BUFFERS];
    out[MEM_NVME] = zs.nvme_bytes;
    m->memory(m->self, &zs, out);
}

void memory_gather(const double* mine, double* all, int rank, int world, int print, const char* where) {
    mpiWatched("gather of the memory figures", MPI_Gather(mine, MEM_FIELDS, MPI_DOUBLE, all, MEM_FIELDS, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    for (int r = 0; print && rank == 0 && r < world; r++) {
        const double* x = all + r * MEM_FIELDS;
        printf("memory rank %d (MiB): %sparams %.1f, grads %.1f, optimizer %.1f, buffers %.1f, activations %.1f",
               r, where, x[MEM_PARAMS] / 1048576, x[MEM_GRADS] / 1048576, x[MEM_OPTIMIZER] / 1048576,
               x[MEM_BUFFERS] / 1048576, x[MEM_ACTIVATIONS] / 1048576);
        double host = x[MEM_HOST_PARAMS] + x[MEM_HOST_GRADS] + x[MEM_HOST_OPTIMIZER] + x[MEM_HOST_BUFFERS];
        if (host > 0 || x[MEM_NVME] > 0) { printf(" | host %.1f, nvme %.1f", host / 1048576, x[MEM_NVME] / 1048576); }
        printf("\n");
    }
}

// the number after "key" in a /proc file (kB figures of status in bytes), -1 if absent
static double proc_self_value(const char* file, const char* key) {
    FILE* f = fopen(file, "r");
    if (f == NULL) { return -1; }
    char line[256];
    double v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, n) != 0) { continue; }
        v = atof(line + n);
        if (strstr(line, "kB") != NULL) { v *= 1024; }
        break;
    }
    fclose(f);
    return v;
}

double kernel_rss_now(void) { return proc_self_value("/proc/self/status", "VmRSS:"); }

void kernel_steps_begin(double* k) {
    k[KERNEL_RSS_STARTUP] = proc_self_value("/proc/self/status", "VmHWM:");
    FILE* f = fopen("/proc/self/clear_refs", "w");
    if (f != NULL) { fputs("5", f); fclose(f); }
    k[KERNEL_READ] = proc_self_value("/proc/self/io", "read_bytes:");
    k[KERNEL_WRITE] = proc_self_value("/proc/self/io", "write_bytes:");
}

void kernel_steps_end(double* k, int steps) {
    double n = steps > 0 ? steps : 1;
    k[KERNEL_RSS_STEPS] = proc_self_value("/proc/self/status", "VmHWM:");
    k[KERNEL_READ] = (proc_self_value("/proc/self/io", "read_bytes:") - k[KERNEL_READ]) / n;
    k[KERNEL_WRITE] = (proc_self_value("/proc/self/io", "write_bytes:") - k[KERNEL_WRITE]) / n;
}

// root.key.per_rank: one object per rank, {rank, names[f]: values[r * nfields + f]}
static void report_per_rank(cJSON* root, const char* key, const char* const* names, int nfields, const double* values, int world) {
    cJSON* arr = cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, key), "per_rank");
    for (int r = 0; r < world; r++) {
        cJSON* o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        for (int f = 0; f < nfields; f++) { cJSON_AddNumberToObject(o, names[f], values[r * nfields + f]); }
        cJSON_AddItemToArray(arr, o);
    }
}

// startup (seconds to the first step, the engine's build, the initial parameters) and
// transfers_per_step: the bytes between device, host and NVMe, and the AdamW update's time,
// wherever it ran
static void report_startup_transfers(cJSON* root, const Trainer* t, const ZeroStats* z, const TrainerTraffic* tr) {
    double n = tr->steps > 0 ? tr->steps : 1;
    // startup: seconds from the program's start to the first step, the engine's build and,
    // within it, the initial parameters' making or reading (rank 0's)
    cJSON* su = cJSON_AddObjectToObject(root, "startup");
    cJSON_AddNumberToObject(su, "seconds", t->startup_ms / 1e3);
    cJSON_AddNumberToObject(su, "engine_seconds", z->init_ms / 1e3);
    cJSON_AddNumberToObject(su, "fill_seconds", z->fill_ms / 1e3);
    cJSON* mv = cJSON_AddObjectToObject(root, "transfers_per_step");
    cJSON_AddNumberToObject(mv, "device_to_host", (z->moved[ZERO_MOVE_D2H] - tr->start.moved[ZERO_MOVE_D2H]) / n);
    cJSON_AddNumberToObject(mv, "host_to_device", (z->moved[ZERO_MOVE_H2D] - tr->start.moved[ZERO_MOVE_H2D]) / n);
    cJSON_AddNumberToObject(mv, "nvme_read", (z->moved[ZERO_MOVE_NVME_READ] - tr->start.moved[ZERO_MOVE_NVME_READ]) / n);
    cJSON_AddNumberToObject(mv, "nvme_write", (z->moved[ZERO_MOVE_NVME_WRITE] - tr->start.moved[ZERO_MOVE_NVME_WRITE]) / n);
    cJSON_AddNumberToObject(mv, "update_ms", (z->update_ms - tr->start.update_ms) / n);
    cJSON_AddNumberToObject(mv, "nvme_wait_ms", (z->nvme_wait_ms - tr->start.nvme_wait_ms) / n);
    cJSON_AddNumberToObject(mv, "update_nvme_wait_ms", (z->update_nvme_wait_ms - tr->start.update_nvme_wait_ms) / n);
    cJSON_AddNumberToObject(mv, "param_reads_ahead", (z->reads_ahead - tr->start.reads_ahead) / n);
    cJSON_AddNumberToObject(mv, "param_reads_ahead_peak", z->reads_ahead_peak);
}

// ops: --profile-ops's rows (llmc/profile.h's OpRow), per step of the profiled ones, the
// longest first and the step's time outside every op last
static void report_ops(cJSON* root, const OpProfile* ops) {
    if (ops == NULL || op_profile_steps(ops) == 0) { return; }
    OpRow rows[128];
    int n = op_profile_rows(ops, rows, 128);
    cJSON* arr = cJSON_AddArrayToObject(root, "ops");
    for (int i = 0; i < n; i++) {
        cJSON* o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", rows[i].name);
        cJSON_AddNumberToObject(o, "calls_per_step", rows[i].calls);
        cJSON_AddNumberToObject(o, "ms_per_step", rows[i].ms);
        cJSON_AddNumberToObject(o, "share", rows[i].share);
        cJSON_AddNumberToObject(o, "flops_per_call", rows[i].flops);
        cJSON_AddNumberToObject(o, "bytes_per_call", rows[i].bytes);
        cJSON_AddNumberToObject(o, "floor_ms_per_call", rows[i].floor_ms);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddNumberToObject(root, "ops_steps", op_profile_steps(ops));
}

int trainer_report(const Trainer* t, const TrainerModel* m, const StepRecord* steps, int nsteps,
                          const ValRecord* vals, int nvals, const EvalRecord* evals, int nevals, const double* mem, const double* kernel,
                          const TrainerTraffic* tr, double flops_per_token, const OpProfile* ops) {
    const TrainConfig* tc = &t->tc;
    ZeroStats zs;
    zeroCheck(zero_stats(m->zero, &zs));
    cJSON* root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "world_size", t->world);
    cJSON_AddNumberToObject(root, "zero_stage", tc->zero.stage);
    cJSON_AddNumberToObject(root, "num_parameters", (double)gpt2_num_params(&t->config));
    cJSON_AddNumberToObject(root, "num_parameters_padded", (double)zs.padded_total);
    cJSON_AddStringToObject(root, "device", m->device);
    cJSON_AddStringToObject(root, "precision", m->precision);
    cJSON_AddStringToObject(root, "zero_backend", zero_name(m->zero));
    cJSON* cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "model", tc->model);
    cJSON_AddNumberToObject(cfg, "B", tc->B);
    cJSON_AddNumberToObject(cfg, "T", tc->T);
    cJSON_AddNumberToObject(cfg, "grad_accum_steps", t->grad_accum);
    cJSON_AddNumberToObject(cfg, "num_layers", t->config.num_layers);
    cJSON_AddNumberToObject(cfg, "channels", t->config.channels);
    cJSON_AddNumberToObject(cfg, "num_heads", t->config.num_heads);
    cJSON_AddNumberToObject(cfg, "recompute", tc->recompute);
    cJSON_AddNumberToObject(cfg, "flops_per_token", flops_per_token);
    char zdesc[512];
    zero_config_describe(&tc->zero, zdesc, sizeof(zdesc));
    cJSON_AddStringToObject(cfg, "zero", zdesc);
    int skipped = 0, outliers = 0;
    for (int i = 0; i < nsteps; i++) { skipped += steps[i].skipped; outliers += steps[i].outlier; }
    cJSON_AddNumberToObject(root, "skipped_steps", skipped);
    cJSON_AddNumberToObject(root, "skipped_outlier_steps", outliers);  // of them, by -sl/-sg
    cJSON* arr = cJSON_AddArrayToObject(root, "steps");
    for (int i = 0; i < nsteps; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", steps[i].step);
        cJSON_AddNumberToObject(s, "loss", steps[i].loss);
        cJSON_AddNumberToObject(s, "ms", steps[i].ms);
        cJSON_AddNumberToObject(s, "tokens_per_s", steps[i].tokens_per_s);
        cJSON_AddNumberToObject(s, "lr", steps[i].lr);
        cJSON_AddNumberToObject(s, "grad_norm", steps[i].norm);
        cJSON_AddNumberToObject(s, "comm_wait_ms", steps[i].wait_ms);
        cJSON_AddBoolToObject(s, "skipped", steps[i].skipped);
        cJSON_AddBoolToObject(s, "skipped_outlier", steps[i].outlier);
        if (steps[i].profiled) { cJSON_AddBoolToObject(s, "profiled", 1); }  // (--profile-ops: left out of speed figures)
        if (steps[i].mfu >= 0) { cJSON_AddNumberToObject(s, "mfu", steps[i].mfu); }
        cJSON_AddItemToArray(arr, s);
    }
    arr = cJSON_AddArrayToObject(root, "val");
    for (int i = 0; i < nvals; i++) {
        cJSON* s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "step", vals[i].step);
        cJSON_AddNumberToObject(s, "loss", vals[i].loss);
        cJSON_AddItemToArray(arr, s);
    }
    // -h 1 only
    if (t->tc.hellaswag) {
        arr = cJSON_AddArrayToObject(root, "hellaswag");
        for (int i = 0; i < nevals; i++) {
            cJSON* s = cJSON_CreateObject();
            cJSON_AddNumberToObject(s, "step", evals[i].step);
            cJSON_AddNumberToObject(s, "accuracy", evals[i].accuracy);
            cJSON_AddNumberToObject(s, "correct", evals[i].correct);
            cJSON_AddNumberToObject(s, "examples", evals[i].examples);
            cJSON_AddItemToArray(arr, s);
        }
    }
    // memory.per_rank: world rows of MEM_FIELDS numbers (bytes); params, grads and
    // optimizer are the engine's model states (peaks), buffers its working set (gathered
    // units, unit gradients) plus the model's scratch, peak the most in use at once
    report_per_rank(root, "memory", mem_names, MEM_FIELDS, mem, t->world);
    // kernel.per_rank: the kernel's figures (kernel_steps_begin); -1 where /proc lacks one
    report_per_rank(root, "kernel", kernel_names, KERNEL_FIELDS, kernel, t->world);
    // comm: the bytes a rank sends per optimizer step as a ring algorithm moves them and
    // the wait; transfers_per_step: the bytes between device, host and NVMe, and the
    // AdamW update's time, wherever it ran
    double n = tr->steps > 0 ? tr->steps : 1;
    cJSON* comm = cJSON_AddObjectToObject(root, "comm");
    cJSON* per = cJSON_AddObjectToObject(comm, "per_rank_bytes_per_step");
    cJSON_AddNumberToObject(per, "allgather", (zs.comm_bytes[ZERO_ALLGATHER] - tr->start.comm_bytes[ZERO_ALLGATHER]) / n);
    cJSON_AddNumberToObject(per, "reduce_scatter", (zs.comm_bytes[ZERO_REDUCE_SCATTER] - tr->start.comm_bytes[ZERO_REDUCE_SCATTER]) / n);
    cJSON_AddNumberToObject(per, "allreduce", (zs.comm_bytes[ZERO_ALLREDUCE] - tr->start.comm_bytes[ZERO_ALLREDUCE]) / n);
    cJSON_AddNumberToObject(comm, "wait_ms_per_step", tr->wait_total / n);
    // network: the bytes all ranks' engines sent, summed, split by where they went: inside
    // a node or between nodes (by the phase's communicator, zero3/comm.h's "Nodes");
    // job_bytes over the whole run (start-up included: what a network counter sees),
    // job_bytes_per_step per collective over the steps. Only where the engine splits them.
    if (zs.links_known) {
        static const char* const link_names[ZERO_NUM_LINKS] = {"intra", "inter"};
        static const char* const kind_keys[ZERO_NUM_COLLECTIVES] = {"allgather", "reduce_scatter", "allreduce", "broadcast", "scalar"};
        cJSON* net = cJSON_AddObjectToObject(comm, "network");
        cJSON_AddNumberToObject(net, "nodes", zs.nodes);
        cJSON_AddNumberToObject(net, "ranks_per_node", zs.ranks_per_node);
        cJSON_AddStringToObject(net, "topology", zs.ranks_per_node > 0 ? "even" : "uneven (every byte counted as crossing)");
        cJSON* job = cJSON_AddObjectToObject(net, "job_bytes");
        cJSON* per_step = cJSON_AddObjectToObject(net, "job_bytes_per_step");
        for (int l = 0; l < ZERO_NUM_LINKS; l++) {
            double total = 0.0;
            cJSON* o = cJSON_AddObjectToObject(per_step, link_names[l]);
            for (int k = 0; k < ZERO_NUM_COLLECTIVES; k++) {
                total += tr->net[0][l][k];
                cJSON_AddNumberToObject(o, kind_keys[k], tr->net[1][l][k] / n);
            }
            cJSON_AddNumberToObject(job, link_names[l], total);
        }
    }
    report_startup_transfers(root, t, &zs, tr);
    report_ops(root, ops);

    char* text = cJSON_Print(root);
    cJSON_Delete(root);
    AtomicFile f;
    if (text == NULL) { return llmc_error("cannot write report %s: out of memory", tc->report); }
    int rc = atomic_open(&f, tc->report);
    if (rc == 0) { rc = atomic_commit(&f, fputs(text, f.fp) >= 0 && fputs("\n", f.fp) >= 0); }
    free(text);
    return rc;
}

void trainer_print_header(const Trainer* t, const TrainerModel* m, double flops_per_token) {
    const TrainConfig* tc = &t->tc;
    const GPT2Config* c = &t->config;
    char zdesc[512];
    zero_config_describe(&tc->zero, zdesc, sizeof(zdesc));
    printf("+-----------------------+\n");
    printf("| model                 | %s\n", tc->model);
    printf("| max_seq_len, vocab    | %d, %d (padded %d)\n", c->max_seq_len, c->vocab_size, c->padded_vocab_size);
    printf("| layers, heads, chans  | %d, %d, %d\n", c->num_layers, c->num_heads, c->channels);
    printf("| parameters            | %zu\n", gpt2_num_params(c));
    printf("| ranks, B, T           | %d, %d, %d  (grad accumulation %d, %ld tokens/step)\n", t->world, tc->B, tc->T,
           t->grad_accum, t->total_batch);
    printf("| steps, lr, schedule   | %d, %g, %s (warmup %d, final %g)\n", t->max_steps, tc->lr, tc->lr_schedule, tc->warmup,
           tc->final_lr_frac);
    printf("| ZeRO                  | %s, %s backend\n", zdesc, zero_name(m->zero));
    printf("| device, precision     | %s, %s, recompute %d%s, %d threads per rank\n", m->device, m->precision, tc->recompute,
           m->notes, t->threads);
    if (m->peak_flops > 0) {
        printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 %.0f TFLOP/s\n",
               flops_per_token, m->peak_flops / 1e12);
    } else if (m->peak_flops == 0) {
        printf("| MFU basis             | %.3g FLOP/token (6*matmul params + 12*L*T*C), peak bf16 n/a for this device\n", flops_per_token);
    }
    printf("+-----------------------+\n");
}
