// The per-op timer's sums, table, rows and timeline (llmc/profile.h).
#include "llmc/profile.h"  // the interface, its types and the headers its bodies use
#include <stdlib.h>         // calloc, realloc, free, qsort
#include <string.h>         // strcmp
#include "llmc/utils.h"     // llmc_error, AtomicFile: the trace written whole or not at all

// ----------------------------------------------------------------------------
// the ops' costs

// A matmul's forward, out (M,N) = inp (M,K) @ w (N,K)^T + b: its FLOPs and fewest bytes;
// its backward, dinp (M,K) = dout @ w and dw (N,K) += dout^T @ inp (and db += the column
// sums): twice the FLOPs, dout read, dinp written, dw read and written
static void op_matmul(double M, double K, double N, double e, int backward, double* flops, double* bytes) {
    if (!backward) {
        *flops = 2.0 * M * K * N;
        *bytes = (M * K + N * K + M * N + N) * e;
    } else {
        *flops = 4.0 * M * K * N;
        *bytes = (M * N + M * K + N * K + M * K + 2.0 * (N * K + N)) * e;
    }
}

// The name's arithmetic, per call. BTC elements of a (B,T,C) activation; the attention's
// causal products (the flash path skips the masked half) or the full T x T ones with their
// matrices (the cuBLAS path: the scores written, the softmax reading and writing them, the
// product with V reading them; its backward twice that).
int gpt2_op_cost(const GPT2Config* c, int B, int T, int elem, int attention_flash, const char* name, double* flops,
                 double* bytes) {
    double e = elem, C = c->channels, BT = (double)B * T, BTC = BT * C, Vp = c->padded_vocab_size;
    double NH = c->num_heads, hs = C / NH, TT = (double)B * NH * T * T;
    double causal = 2.0 * 2.0 * B * NH * (double)T * T * hs / 2.0;  // Q K^T and P V, the half at or below the diagonal
    double f = 0.0, by = 0.0;
    const char* n = name;
    if (!strcmp(n, "encoder")) { f = BTC; by = BT * 4 + 3.0 * BTC * e; }                     // ids, wte and wpe rows in, out
    else if (!strcmp(n, "encoder_bwd")) { f = BTC; by = BT * 4 + 5.0 * BTC * e; }            // dout in, the rows' gradients read and written
    else if (!strcmp(n, "ln1") || !strcmp(n, "ln2") || !strcmp(n, "lnf")) { f = 8.0 * BTC; by = 2.0 * BTC * e + 8.0 * BT; }
    else if (!strcmp(n, "residual+ln1") || !strcmp(n, "residual+ln2") || !strcmp(n, "residual+lnf")) {
        f = 9.0 * BTC; by = 4.0 * BTC * e + 8.0 * BT;                                          // two in, the sum and the norm out
    }
    else if (!strcmp(n, "ln_recompute")) { f = 16.0 * BTC; by = 4.0 * BTC * e + 16.0 * BT; }  // both of a layer's
    else if (!strcmp(n, "ln1_bwd") || !strcmp(n, "ln2_bwd") || !strcmp(n, "lnf_bwd")) {
        f = 12.0 * BTC; by = 4.0 * BTC * e + 8.0 * BT;                                         // dout, inp in; dinp read and written
    }
    else if (!strcmp(n, "residual")) { f = BTC; by = 3.0 * BTC * e; }
    else if (!strcmp(n, "gelu") || !strcmp(n, "gelu_recompute")) { f = 4.0 * 8.0 * BTC; by = 2.0 * 4.0 * BTC * e; }
    else if (!strcmp(n, "gelu_bwd")) { f = 4.0 * 12.0 * BTC; by = 3.0 * 4.0 * BTC * e; }
    else if (!strcmp(n, "qkv")) { op_matmul(BT, C, 3 * C, e, 0, &f, &by); }
    else if (!strcmp(n, "attproj")) { op_matmul(BT, C, C, e, 0, &f, &by); }
    else if (!strcmp(n, "fc")) { op_matmul(BT, C, 4 * C, e, 0, &f, &by); }
    else if (!strcmp(n, "fc+gelu")) { op_matmul(BT, C, 4 * C, e, 0, &f, &by); f += 32.0 * BTC; by += 4.0 * BTC * e; }  // the pre-activation kept too
    else if (!strcmp(n, "fcproj")) { op_matmul(BT, 4 * C, C, e, 0, &f, &by); }
    else if (!strcmp(n, "qkv_bwd")) { op_matmul(BT, C, 3 * C, e, 1, &f, &by); }
    else if (!strcmp(n, "attproj_bwd")) { op_matmul(BT, C, C, e, 1, &f, &by); }
    else if (!strcmp(n, "fc_bwd")) { op_matmul(BT, C, 4 * C, e, 1, &f, &by); }
    else if (!strcmp(n, "fcproj_bwd")) { op_matmul(BT, 4 * C, C, e, 1, &f, &by); }
    else if (!strcmp(n, "fcproj+gelu_bwd")) { op_matmul(BT, 4 * C, C, e, 1, &f, &by); f += 48.0 * BTC; by += 4.0 * BTC * e; }
    else if (!strcmp(n, "classifier")) { op_matmul(BT, C, Vp, e, 0, &f, &by); f += 5.0 * BT * Vp; by += BT * Vp * e; }  // the softmax and loss over the logits
    else if (!strcmp(n, "classifier_bwd")) { op_matmul(BT, C, Vp, e, 1, &f, &by); }
    else if (!strcmp(n, "loss")) { f = BT; by = BT * 4; }
    else if (!strcmp(n, "attention")) {
        f = attention_flash ? causal : 2.0 * causal;
        by = attention_flash ? 4.0 * BTC * e + B * NH * (double)T * 4 : 8.0 * BTC * e + 4.0 * TT * e;
    }
    else if (!strcmp(n, "attention_bwd")) {
        f = attention_flash ? 2.5 * causal : 5.0 * causal;
        by = attention_flash ? 11.0 * BTC * e + 2.0 * B * NH * (double)T * 4 : 14.0 * BTC * e + 8.0 * TT * e;
    }
    else if (!strcmp(n, "optimizer")) {
        double P = (double)gpt2_num_params(c);
        f = 12.0 * P; by = P * (4.0 * 6 + 2.0 * e);  // master, m, v read and written; the gradient in, the parameter out
    }
    else { *flops = *bytes = 0.0; return -1; }
    *flops = f;
    *bytes = by;
    return 0;
}

// ----------------------------------------------------------------------------
// the sums and the spans

typedef struct { const char* name; int layer, track; double t0, t1; } OpSpan;  // t0, t1: on the host's clock
typedef struct { const char* name; int track; double calls, ms; } OpSum;
typedef struct { OpSum* sums; int n, cap; } OpSums;

struct OpProfile {
    GPT2Config config;
    int B, T, elem, flash;
    double peak_flops, peak_bytes;
    OpSpan* spans;           // every profiled step's, for the timeline
    int nspans, cap, step_first;  // step_first: the first span of the step being timed
    OpSums ops, movers;      // per name: the compute track's; the engine's movers'
    int steps;
    double step_ms, first_ms;     // the profiled steps' wall time summed; the first's start
    double compute_ms;            // the compute track's spans summed
    const char* track_names[OP_TRACK_COUNT];
};

OpProfile* op_profile_new(const GPT2Config* c, int B, int T, int elem, int attention_flash, double peak_flops,
                          double peak_bytes, const char* compute) {
    OpProfile* p = (OpProfile*)calloc(1, sizeof(OpProfile));
    if (p == NULL) { return NULL; }
    p->config = *c;
    p->B = B; p->T = T; p->elem = elem; p->flash = attention_flash;
    p->peak_flops = peak_flops > 0 ? peak_flops : 0;
    p->peak_bytes = peak_bytes > 0 ? peak_bytes : 0;
    p->track_names[OP_TRACK_HOST] = "host (the step)";
    p->track_names[OP_TRACK_COMPUTE] = compute;
    p->track_names[OP_TRACK_COLLECTIVES] = "ZeRO collectives (NCCL stream)";
    p->track_names[OP_TRACK_COPIES] = "ZeRO copies (copy streams)";
    p->track_names[OP_TRACK_ENGINE_HOST] = "ZeRO on the host (CPU Adam, NVMe)";
    return p;
}

void op_profile_free(OpProfile* p) {
    if (p == NULL) { return; }
    free(p->spans);
    free(p->ops.sums);
    free(p->movers.sums);
    free(p);
}

void op_profile_span(OpProfile* p, const char* name, int layer, int track, double t0_ms, double t1_ms) {
    if (p->nspans == p->cap) {
        int cap = p->cap > 0 ? 2 * p->cap : 1024;
        OpSpan* s = (OpSpan*)realloc(p->spans, (size_t)cap * sizeof(OpSpan));
        if (s == NULL) { return; }  // (out of memory: the span is lost, the run goes on)
        p->spans = s;
        p->cap = cap;
    }
    p->spans[p->nspans++] = (OpSpan){name, layer, track, t0_ms, t1_ms};
}

// the sum of this name on this track, made if new (NULL when out of memory)
static OpSum* op_sum(OpSums* ss, const char* name, int track) {
    for (int i = 0; i < ss->n; i++) {
        if (ss->sums[i].track == track && (ss->sums[i].name == name || !strcmp(ss->sums[i].name, name))) { return &ss->sums[i]; }
    }
    if (ss->n == ss->cap) {
        int cap = ss->cap > 0 ? 2 * ss->cap : 64;
        OpSum* s = (OpSum*)realloc(ss->sums, (size_t)cap * sizeof(OpSum));
        if (s == NULL) { return NULL; }
        ss->sums = s;
        ss->cap = cap;
    }
    ss->sums[ss->n] = (OpSum){name, track, 0.0, 0.0};
    return &ss->sums[ss->n++];
}

void op_profile_step(OpProfile* p, int step, double start_ms, double step_ms) {
    (void)step;
    if (p->steps == 0) { p->first_ms = start_ms; }
    for (int i = p->step_first; i < p->nspans; i++) {
        OpSpan* s = &p->spans[i];
        s->t0 += start_ms;  // (to the host's clock: the timeline's)
        s->t1 += start_ms;
        if (s->track == OP_TRACK_HOST) { continue; }
        OpSum* sum = op_sum(s->track == OP_TRACK_COMPUTE ? &p->ops : &p->movers, s->name, s->track);
        if (sum == NULL) { continue; }
        sum->calls += 1.0;
        sum->ms += s->t1 - s->t0;
        if (s->track == OP_TRACK_COMPUTE) { p->compute_ms += s->t1 - s->t0; }
    }
    p->step_first = p->nspans;
    p->steps++;
    p->step_ms += step_ms;
}

int op_profile_steps(const OpProfile* p) { return p->steps; }

static int op_row_longer(const void* a, const void* b) {
    double x = ((const OpRow*)a)->ms, y = ((const OpRow*)b)->ms;
    return (x < y) - (x > y);
}

int op_profile_rows(const OpProfile* p, OpRow* rows, int max) {
    if (p->steps == 0 || max < 1) { return 0; }
    double n = p->steps, step = p->step_ms / n;
    int k = 0;
    for (int i = 0; i < p->ops.n && k < max - 1; i++) {
        const OpSum* s = &p->ops.sums[i];
        OpRow r = {s->name, s->calls / n, s->ms / n, step > 0 ? s->ms / n / step : 0.0, 0.0, 0.0, 0, 0.0};
        r.known = gpt2_op_cost(&p->config, p->B, p->T, p->elem, p->flash, s->name, &r.flops, &r.bytes) == 0;
        double ff = r.known && p->peak_flops > 0 ? r.flops / p->peak_flops : 0.0;
        double fb = r.known && p->peak_bytes > 0 ? r.bytes / p->peak_bytes : 0.0;
        r.floor_ms = 1e3 * (ff > fb ? ff : fb);
        rows[k++] = r;
    }
    qsort(rows, (size_t)k, sizeof(OpRow), op_row_longer);
    // the rest of the step: no op of the compute track running (never below 0: the host's
    // clock and the GPU's events are not one clock)
    double rest = step - p->compute_ms / n;
    rows[k++] = (OpRow){"(no op)", 0.0, rest > 0 ? rest : 0.0, step > 0 && rest > 0 ? rest / step : 0.0, 0.0, 0.0, 0, 0.0};
    return k;
}

void op_profile_print(const OpProfile* p, FILE* fp) {
    OpRow rows[128];
    int n = op_profile_rows(p, rows, 128);
    if (n == 0) { return; }
    char fl[48] = "its FLOPs (the peak not known)", by[48] = "its bytes (the rate not known)";
    if (p->peak_flops > 0) { snprintf(fl, sizeof(fl), "its FLOPs at %.0f TFLOP/s", p->peak_flops / 1e12); }
    if (p->peak_bytes > 0) { snprintf(by, sizeof(by), "its bytes at %.0f GB/s", p->peak_bytes / 1e9); }
    fprintf(fp, "ops over %d profiled step%s, %.2f ms a step (--profile-ops); a call's floor, the larger of %s and %s:\n",
            p->steps, p->steps == 1 ? "" : "s", p->step_ms / p->steps, fl, by);
    fprintf(fp, "  %-18s %8s %10s %7s %10s %10s %10s %8s\n", "op", "calls", "ms/step", "share", "GFLOP/call", "MB/call",
            "floor ms", "x floor");
    for (int i = 0; i < n; i++) {
        const OpRow* r = &rows[i];
        char floor[16] = "-", times[16] = "-", gf[16] = "-", mb[16] = "-";
        if (r->known) {
            snprintf(gf, sizeof(gf), "%.3f", r->flops / 1e9);
            snprintf(mb, sizeof(mb), "%.2f", r->bytes / 1e6);
        }
        if (r->floor_ms > 0) {
            snprintf(floor, sizeof(floor), "%.4g", r->floor_ms);
            snprintf(times, sizeof(times), "%.2f", r->ms / r->calls / r->floor_ms);
        }
        fprintf(fp, "  %-18s %8.1f %10.3f %6.1f%% %10s %10s %10s %8s\n", r->name, r->calls, r->ms, 100.0 * r->share, gf,
                mb, floor, times);
    }
    if (p->movers.n == 0) { return; }
    fprintf(fp, "the ZeRO engine's movers in those steps, beside the ops (on their own streams and threads: their time "
                "overlaps the ops' and is no share of the step):\n");
    fprintf(fp, "  %-22s %-36s %8s %10s\n", "mover", "track", "calls", "ms/step");
    for (int i = 0; i < p->movers.n; i++) {
        const OpSum* s = &p->movers.sums[i];
        fprintf(fp, "  %-22s %-36s %8.1f %10.3f\n", s->name, p->track_names[s->track], s->calls / p->steps, s->ms / p->steps);
    }
}

// ----------------------------------------------------------------------------
// the timeline

int op_profile_write_trace(const OpProfile* p, const char* path) {
    AtomicFile f;
    if (atomic_open(&f, path) != 0) { return -1; }
    int ok = fprintf(f.fp, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n") > 0;
    // the tracks' names (the host's and the ops' always, a mover's track where it has spans),
    // then the spans, a comma before all but the first
    int used[OP_TRACK_COUNT] = {1, 1};
    for (int i = 0; i < p->nspans; i++) { used[p->spans[i].track] = 1; }
    for (int t = 0; t < OP_TRACK_COUNT && ok; t++) {
        if (!used[t]) { continue; }
        ok = fprintf(f.fp, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}\n",
                     t > 0 ? "," : "", t, p->track_names[t]) > 0;
    }
    for (int i = 0; i < p->nspans && ok; i++) {
        const OpSpan* s = &p->spans[i];
        double ts = (s->t0 - p->first_ms) * 1e3, dur = (s->t1 - s->t0) * 1e3;
        ok = fprintf(f.fp, ",{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                           "\"args\": {\"%s\": %d}}\n", s->name, s->track, ts, dur > 0 ? dur : 0.0,
                     s->track >= OP_TRACK_COLLECTIVES ? "unit" : "layer", s->layer) > 0;
    }
    ok = ok && fprintf(f.fp, "]}\n") > 0;
    return atomic_commit(&f, ok);
}
