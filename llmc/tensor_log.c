// llmc/tensor_log.c: the implementation (the interface and its notes: llmc/tensor_log.h)
#include "llmc/tensor_log.h"  // this module's types and prototypes
#include <stdio.h>            // snprintf
#include <stdlib.h>           // free
#include <string.h>           // memset, memcpy
#include <math.h>             // sqrt, fabs
#include <mpi.h>              // the two reductions to rank 0
#include "llmc/trainer_proc.h"  // zeroCheck, mpiWatched, log_line
#include "llmc/utils.h"       // mallocCheck

// the figures of one tensor: sums of squares (summed over ranks), then maxima (maxed)
enum { TL_P2, TL_M2, TL_V2, TL_D2, TL_G2, TL_SUMS };
enum { TL_PMAX, TL_MMAX, TL_VMAX, TL_GMAX, TL_MAXES };

void tensor_log_init(TensorLog* tl, const GPT2Config* c, Zero* z, int every) {
    memset(tl, 0, sizeof(*tl));
    tl->every = every;
    if (every <= 0) { return; }
    tl->nt = gpt2_num_tensors(c);
    tl->nu = gpt2_num_units(c);
    tl->ranges = (TensorRange*)mallocCheck((size_t)tl->nt * sizeof(TensorRange));
    gpt2_tensor_ranges(c, tl->ranges);
    tl->begin = (size_t*)mallocCheck((size_t)tl->nu * sizeof(size_t));
    tl->n = (size_t*)mallocCheck((size_t)tl->nu * sizeof(size_t));
    tl->at = (size_t*)mallocCheck((size_t)tl->nu * sizeof(size_t));
    size_t total = 0, largest = 1;
    for (int u = 0; u < tl->nu; u++) {
        zeroCheck(zero_state_shard(z, ZERO_STATE_MASTER, u, &tl->begin[u], &tl->n[u], NULL));
        tl->at[u] = total;
        total += tl->n[u];
        if (tl->n[u] > largest) { largest = tl->n[u]; }
    }
    tl->buf = (float*)mallocCheck(largest * sizeof(float));
    tl->sums = (double*)mallocCheck((size_t)tl->nt * TL_SUMS * sizeof(double));
    tl->maxes = (double*)mallocCheck((size_t)tl->nt * TL_MAXES * sizeof(double));
}

int tensor_log_due(const TensorLog* tl, int step) { return tl->every > 0 && (step + 1) % tl->every == 0; }

// Adds unit u's state `x` (this rank's range) to the figures of the tensors in it: squares
// at sums[k], magnitudes at maxes[m] (m < 0: none); with `prev`, the squares of x - prev
static void tensor_log_add(const TensorLog* tl, int u, const float* x, const float* prev, double* sums, int k, double* maxes, int mx) {
    size_t lo = tl->begin[u], hi = lo + tl->n[u];
    for (int t = 0; t < tl->nt; t++) {
        const TensorRange* r = &tl->ranges[t];
        if (r->unit != u) { continue; }
        size_t a = r->offset > lo ? r->offset : lo, b = r->offset + r->size < hi ? r->offset + r->size : hi;
        double s = 0.0, m = 0.0;
        for (size_t i = a; i < b; i++) {
            double v = prev != NULL ? (double)x[i - lo] - prev[i - lo] : (double)x[i - lo];
            s += v * v;
            if (fabs(v) > m) { m = fabs(v); }
        }
        sums[(size_t)t * TL_SUMS + k] += s;
        if (mx >= 0 && m > maxes[(size_t)t * TL_MAXES + mx]) { maxes[(size_t)t * TL_MAXES + mx] = m; }
    }
}

void tensor_log_before(TensorLog* tl, Zero* z) {
    if (tl->every <= 0) { return; }
    memset(tl->sums, 0, (size_t)tl->nt * TL_SUMS * sizeof(double));
    memset(tl->maxes, 0, (size_t)tl->nt * TL_MAXES * sizeof(double));
    size_t total = tl->nu > 0 ? tl->at[tl->nu - 1] + tl->n[tl->nu - 1] : 0;
    tl->before = (float*)mallocCheck((total > 0 ? total : 1) * sizeof(float));
    size_t b, n;
    for (int u = 0; u < tl->nu; u++) {
        zeroCheck(zero_state_shard(z, ZERO_STATE_MASTER, u, &b, &n, tl->before + tl->at[u]));
        zeroCheck(zero_state_shard(z, ZERO_STATE_GRAD, u, &b, &n, tl->buf));  // the step's mean gradient, before clipping
        tensor_log_add(tl, u, tl->buf, NULL, tl->sums, TL_G2, tl->maxes, TL_GMAX);
    }
}

// TL_ENTRY_BYTES: room for one tensor's or layer's entry (9 numbers of at most 16
// characters, the keys, a name): the line's buffer holds one per tensor and layer
#define TL_ENTRY_BYTES 512

// appends at out + *len the figures of one tensor or layer as a JSON object after `head`,
// `tail` (more keys, or "") last inside it
static void tensor_log_json(char* out, size_t* len, size_t cap, const char* head, const double* s, const double* m, const char* tail) {
    double p = sqrt(s[TL_P2]);
    *len += (size_t)snprintf(out + *len, cap - *len, "%s{\"param_norm\": %.9g, \"param_max\": %.9g, \"m_norm\": %.9g, \"m_max\": %.9g, "
                             "\"v_norm\": %.9g, \"v_max\": %.9g, \"grad_norm\": %.9g, \"grad_max\": %.9g, \"update_ratio\": %.9g%s}",
                             head, p, m[TL_PMAX], sqrt(s[TL_M2]), m[TL_MMAX], sqrt(s[TL_V2]), m[TL_VMAX], sqrt(s[TL_G2]),
                             m[TL_GMAX], p > 0 ? sqrt(s[TL_D2]) / p : 0.0, tail);
}

void tensor_log_after(TensorLog* tl, const GPT2Config* c, Zero* z, int step, int rank, const char* dir) {
    if (tl->every <= 0 || tl->before == NULL) { return; }
    double *sums = tl->sums, *maxes = tl->maxes;  // the gradient's already in (tensor_log_before)
    size_t b, n;
    for (int u = 0; u < tl->nu; u++) {
        zeroCheck(zero_state_shard(z, ZERO_STATE_MASTER, u, &b, &n, tl->buf));
        tensor_log_add(tl, u, tl->buf, NULL, sums, TL_P2, maxes, TL_PMAX);
        tensor_log_add(tl, u, tl->buf, tl->before + tl->at[u], sums, TL_D2, maxes, -1);
        zeroCheck(zero_state_shard(z, ZERO_STATE_M, u, &b, &n, tl->buf));
        tensor_log_add(tl, u, tl->buf, NULL, sums, TL_M2, maxes, TL_MMAX);
        zeroCheck(zero_state_shard(z, ZERO_STATE_V, u, &b, &n, tl->buf));
        tensor_log_add(tl, u, tl->buf, NULL, sums, TL_V2, maxes, TL_VMAX);
    }
    free(tl->before);
    tl->before = NULL;
    int cnt_s = tl->nt * TL_SUMS, cnt_m = tl->nt * TL_MAXES;
    mpiWatched("reduction of --log-tensors' sums", MPI_Reduce(rank == 0 ? MPI_IN_PLACE : sums, sums, cnt_s, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    mpiWatched("reduction of --log-tensors' maxima", MPI_Reduce(rank == 0 ? MPI_IN_PLACE : maxes, maxes, cnt_m, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    if (rank == 0 && dir != NULL) {
        size_t cap = (size_t)(tl->nt + c->num_layers + 1) * TL_ENTRY_BYTES, len = 0;
        char* out = (char*)mallocCheck(cap);
        char head[64];
        len += (size_t)snprintf(out, cap, "{\"step\": %d, \"tensors\": {", step);
        for (int t = 0; t < tl->nt; t++) {
            const TensorRange* r = &tl->ranges[t];
            if (r->layer >= 0) { snprintf(head, sizeof(head), "%s\"%s.%d\": ", t ? ", " : "", gpt2_param_names[r->kind], r->layer); }
            else { snprintf(head, sizeof(head), "%s\"%s\": ", t ? ", " : "", gpt2_param_names[r->kind]); }
            tensor_log_json(out, &len, cap, head, sums + (size_t)t * TL_SUMS, maxes + (size_t)t * TL_MAXES, "");
        }
        len += (size_t)snprintf(out + len, cap - len, "}, \"layers\": [");
        for (int l = 0; l < c->num_layers; l++) {  // a block's tensors: sums summed, maxima maxed
            double s[TL_SUMS] = {0}, m[TL_MAXES] = {0};
            for (int t = 0; t < tl->nt; t++) {
                if (tl->ranges[t].layer != l) { continue; }
                for (int k = 0; k < TL_SUMS; k++) { s[k] += sums[(size_t)t * TL_SUMS + k]; }
                for (int k = 0; k < TL_MAXES; k++) { if (maxes[(size_t)t * TL_MAXES + k] > m[k]) { m[k] = maxes[(size_t)t * TL_MAXES + k]; } }
            }
            char tail[32];
            snprintf(tail, sizeof(tail), ", \"layer\": %d", l);
            tensor_log_json(out, &len, cap, l ? ", " : "", s, m, tail);
        }
        len += (size_t)snprintf(out + len, cap - len, "]}\n");
        log_line(dir, rank, "main.jsonl", "%s", out);
        free(out);
    }
}

void tensor_log_free(TensorLog* tl) {
    free(tl->ranges); free(tl->begin); free(tl->n); free(tl->at); free(tl->before); free(tl->buf);
    free(tl->sums); free(tl->maxes);
    memset(tl, 0, sizeof(*tl));
}
