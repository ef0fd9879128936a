/*
 Tests of zero3/comm.h: a plain MPI program (Criterion forks each test, which MPI does
 not survive), run at several world sizes:

   make build/test_comm_mpi build/test_comm_mpi_chunk   (the second compiles zero3/comm*.c itself,
                                                        with -DZERO_COMM_CHUNK=7)
   mpirun --allow-run-as-root --oversubscribe -np N build/test_comm_mpi   (N = 1, 2, 3, 4)

 Data are integer-valued floats small enough that every sum is exact, so results are
 compared with ==. Every rank runs every check in the same order; a check passes when
 it passed on all ranks. Rank 0 prints one line per check and "N passed, N failed";
 every rank exits non-zero when any check failed.
*/
#include <stdio.h>    // printf
#include <stdlib.h>   // malloc, free
#include <string.h>   // memcmp, strstr, memset
#include <math.h>     // fabs
#include <mpi.h>      // MPI_Init, MPI_Allreduce of the failure counts
#include "zero3/comm.h"  // the code under test
#include "zero3/util.h"     // zero_error, zero_errmsg
#include "zero3/quant.h"    // zero_quant_bytes, zero_quantize

static int world_rank = 0, world_size = 1;
static int n_passed = 0, n_failed = 0;

// one check: ok is this rank's verdict; all ranks must call it in the same order
static void check(const char* name, int ok) {
    int bad = ok ? 0 : 1, nbad = 0;
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (nbad == 0) { n_passed++; } else { n_failed++; }
    if (world_rank == 0) {
        if (nbad == 0) { printf("ok   %s\n", name); }
        else { printf("FAIL %s (on %d of %d ranks)\n", name, nbad, world_size); }
        fflush(stdout);
    }
}

// the value rank r contributes at index i: an integer, so sums over ranks are exact
static float val(int r, size_t i) { return (float)(r * 1000 + (int)(i % 997) + 1); }

static float* alloc_floats(size_t n) {
    float* p = malloc((n ? n : 1) * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    return p;
}

// fills an all-gather buffer: own block = val(rank, i), other blocks = -1
static void fill_allgather(float* buf, size_t count, int rank, int world) {
    for (int b = 0; b < world; b++)
        for (size_t i = 0; i < count; i++) buf[(size_t)b * count + i] = (b == rank) ? val(rank, i) : -1.0f;
}
static int check_allgather(const float* buf, size_t count, int world) {
    for (int b = 0; b < world; b++)
        for (size_t i = 0; i < count; i++)
            if (buf[(size_t)b * count + i] != val(b, i)) return 0;
    return 1;
}
// reduce-scatter input: send[j] = val(rank, j) for j over all world*count elements
static void fill_send(float* send, size_t count, int rank, int world) {
    for (size_t j = 0; j < (size_t)world * count; j++) send[j] = val(rank, j);
}
static int check_reduce_scatter(const float* recv, size_t count, int rank, int world) {
    for (size_t i = 0; i < count; i++) {
        float want = 0.0f;
        for (int r = 0; r < world; r++) want += val(r, (size_t)rank * count + i);
        if (recv[i] != want) return 0;
    }
    return 1;
}
static int check_send_intact(const float* send, size_t count, int rank, int world) {
    for (size_t j = 0; j < (size_t)world * count; j++) if (send[j] != val(rank, j)) return 0;
    return 1;
}
static void fill_allreduce(float* buf, size_t count, int rank) {
    for (size_t i = 0; i < count; i++) buf[i] = val(rank, i);
}
static int check_allreduce(const float* buf, size_t count, int world) {
    for (size_t i = 0; i < count; i++) {
        float want = 0.0f;
        for (int r = 0; r < world; r++) want += val(r, i);
        if (buf[i] != want) return 0;
    }
    return 1;
}

// counts around the chunk boundaries; all within 16 chunks so the chunked build takes them
#define MAX_OK_COUNT (16 * (size_t)ZERO_COMM_CHUNK < 100000 ? 16 * (size_t)ZERO_COMM_CHUNK : 100000)
static const size_t test_counts[] = {1, 2, 5, 6, 7, 8, 13, 14, 15, 30, 64, 111, 112, 1000, 100000};
#define N_COUNTS (sizeof(test_counts) / sizeof(test_counts[0]))

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const int R = world_rank, W = world_size;
    char name[256];
    if (R == 0) { printf("test_comm_mpi: world %d, ZERO_COMM_CHUNK %zu\n", W, (size_t)ZERO_COMM_CHUNK); }

    // --- init
    ZeroComm c;
    int rc = zero_comm_init(&c, MPI_COMM_WORLD);
    int cmp = MPI_UNEQUAL;
    if (rc == 0) MPI_Comm_compare(c.comm, MPI_COMM_WORLD, &cmp);
    check("init: rank, world, a duplicated (congruent, not identical) communicator",
          rc == 0 && c.rank == R && c.world == W && cmp == MPI_CONGRUENT);

    // --- blocking all-gather at every count
    for (size_t t = 0; t < N_COUNTS; t++) {
        size_t n = test_counts[t];
        if (n > MAX_OK_COUNT) continue;
        float* buf = alloc_floats((size_t)W * n);
        fill_allgather(buf, n, R, W);
        rc = zero_allgather(&c, buf, n, NULL);
        snprintf(name, sizeof name, "all-gather blocking, count %zu", n);
        check(name, rc == 0 && check_allgather(buf, n, W));
        free(buf);
    }

    // --- blocking reduce-scatter at every count
    for (size_t t = 0; t < N_COUNTS; t++) {
        size_t n = test_counts[t];
        if (n > MAX_OK_COUNT) continue;
        float* send = alloc_floats((size_t)W * n);
        float* recv = alloc_floats(n);
        fill_send(send, n, R, W);
        for (size_t i = 0; i < n; i++) recv[i] = -7.0f;
        rc = zero_reduce_scatter(&c, send, recv, n, NULL, NULL);
        snprintf(name, sizeof name, "reduce-scatter blocking, count %zu (input left intact)", n);
        check(name, rc == 0 && check_reduce_scatter(recv, n, R, W) && check_send_intact(send, n, R, W));
        free(send); free(recv);
    }

    // --- blocking all-reduce at every count
    for (size_t t = 0; t < N_COUNTS; t++) {
        size_t n = test_counts[t];
        if (n > MAX_OK_COUNT) continue;
        float* buf = alloc_floats(n);
        fill_allreduce(buf, n, R);
        rc = zero_allreduce(&c, buf, n, NULL, NULL);
        snprintf(name, sizeof name, "all-reduce blocking, count %zu", n);
        check(name, rc == 0 && check_allreduce(buf, n, W));
        free(buf);
    }

    // --- nonblocking: one of each
    {
        size_t n = 13;
        float* ag = alloc_floats((size_t)W * n);
        float* send = alloc_floats((size_t)W * n);
        float* recv = alloc_floats(n);
        float* ar = alloc_floats(n);
        ZeroRequest q = {0};
        fill_allgather(ag, n, R, W);
        int ok = zero_allgather(&c, ag, n, &q) == 0 && zero_comm_wait(&c, &q) == 0 && check_allgather(ag, n, W);
        check("all-gather nonblocking, count 13", ok);
        fill_send(send, n, R, W);
        ok = zero_reduce_scatter(&c, send, recv, n, NULL, &q) == 0 && zero_comm_wait(&c, &q) == 0 && check_reduce_scatter(recv, n, R, W);
        check("reduce-scatter nonblocking, count 13", ok);
        fill_allreduce(ar, n, R);
        ok = zero_allreduce(&c, ar, n, NULL, &q) == 0 && zero_comm_wait(&c, &q) == 0 && check_allreduce(ar, n, W);
        check("all-reduce nonblocking, count 13", ok);
        ok = q.n == 0 && zero_comm_wait(&c, &q) == 0;
        check("wait on an already completed request is a no-op", ok);
        free(ag); free(send); free(recv); free(ar);
    }

    // --- several outstanding at once, completed out of order (wait, test loop, wait)
    {
        size_t na = 1, nb = 5, nc = 30, nd = 64;
        float* a = alloc_floats((size_t)W * na);
        float* b = alloc_floats((size_t)W * nb);
        float* send = alloc_floats((size_t)W * nc);
        float* recv = alloc_floats(nc);
        float* d = alloc_floats(nd);
        ZeroRequest qa = {0}, qb = {0}, qc = {0}, qd = {0};
        fill_allgather(a, na, R, W);
        fill_allgather(b, nb, R, W);
        fill_send(send, nc, R, W);
        fill_allreduce(d, nd, R);
        int ok = zero_allgather(&c, a, na, &qa) == 0;
        ok &= zero_allgather(&c, b, nb, &qb) == 0;
        ok &= zero_reduce_scatter(&c, send, recv, nc, NULL, &qc) == 0;
        ok &= zero_allreduce(&c, d, nd, NULL, &qd) == 0;
        ok &= zero_comm_wait(&c, &qd) == 0;   // last started, first completed
        ok &= check_allreduce(d, nd, W);
        int done = 0;
        long spins = 0;
        while (ok && !done && spins < 100000000L) { ok &= zero_comm_test(&c, &qb, &done) == 0; spins++; }
        ok &= done && qb.n == 0 && check_allgather(b, nb, W);
        ok &= zero_comm_wait(&c, &qc) == 0 && check_reduce_scatter(recv, nc, R, W);
        ok &= zero_comm_wait(&c, &qa) == 0 && check_allgather(a, na, W);
        check("4 outstanding (all-gather 1 and 5, reduce-scatter 30, all-reduce 64), completed out of order", ok);
        free(a); free(b); free(send); free(recv); free(d);
    }

    // --- determinism: non-integer data, repeated and blocking vs nonblocking, bitwise
    {
        size_t n = 111;
        float* send = alloc_floats((size_t)W * n);
        float* r1 = alloc_floats(n);
        float* r2 = alloc_floats(n);
        float* r3 = alloc_floats(n);
        unsigned s = 12345u + 77u * (unsigned)R;
        for (size_t j = 0; j < (size_t)W * n; j++) {
            s = s * 1103515245u + 12345u;
            send[j] = (float)((s >> 8) & 0xFFFF) / 977.0f - 31.3f;
        }
        ZeroRequest q = {0};
        int ok = zero_reduce_scatter(&c, send, r1, n, NULL, NULL) == 0;
        ok &= zero_reduce_scatter(&c, send, r2, n, NULL, NULL) == 0;
        ok &= zero_reduce_scatter(&c, send, r3, n, NULL, &q) == 0 && zero_comm_wait(&c, &q) == 0;
        ok &= memcmp(r1, r2, n * sizeof(float)) == 0 && memcmp(r1, r3, n * sizeof(float)) == 0;
        check("reduce-scatter bitwise repeatable (blocking twice, nonblocking) on non-integer data", ok);
        free(send); free(r1); free(r2); free(r3);
    }

    // --- the reduce-scatter in pieces ([Note: reduce-scatter in pieces]): the caller's
    // staging, bounded, the only memory it takes; each element summed in the binomial order
    // (part i += part i + d, i a multiple of 2d) on non-integer data, bit for bit; two in
    // flight waited for in reverse order
    {
        size_t counts[2] = {111, 1000};   // several pieces each in the ZERO_COMM_CHUNK=7 build
        size_t big = (size_t)1 << 32;     // a block of 16 GiB: its staging is still within the bound
        int ok = zero_comm_rs_stage(&c, big) <= ZERO_COMM_PIECE_BYTES / sizeof(float) &&
                 zero_comm_rs_stage(&c, 5) == (W > 1 ? (size_t)W * 5 : 0);
        ZeroComm k;
        ok &= zero_comm_init(&k, MPI_COMM_WORLD) == 0;
        float *send[2], *recv[2], *stage[2];
        ZeroRequest q[2];
        memset(q, 0, sizeof(q));
        for (int t = 0; t < 2; t++) {
            size_t n = counts[t];
            send[t] = alloc_floats((size_t)W * n); recv[t] = alloc_floats(n);
            stage[t] = alloc_floats(zero_comm_rs_stage(&k, n));
            for (size_t j = 0; j < (size_t)W * n; j++) { send[t][j] = (float)(j % 7919) * 0.37f / (float)(R + 3) - 1.7f; }
            ok &= zero_reduce_scatter(&k, send[t], recv[t], n, stage[t], &q[t]) == 0;
        }
        for (int t = 1; t >= 0; t--) { ok &= zero_comm_wait(&k, &q[t]) == 0 && !q[t].live && q[t].f == NULL; }
        ok &= k.scratch_peak == 0 && k.head == NULL;   // nothing of the comm's own
        for (int t = 0; t < 2; t++) {
            size_t n = counts[t];
            float* part = alloc_floats((size_t)W);
            for (size_t i = 0; i < n; i++) {
                size_t j = (size_t)R * n + i;
                for (int p = 0; p < W; p++) { part[p] = (float)(j % 7919) * 0.37f / (float)(p + 3) - 1.7f; }
                for (int d = 1; d < W; d *= 2) {
                    for (int p = 0; p + d < W; p += 2 * d) { part[p] += part[p + d]; }
                }
                ok &= memcmp(&recv[t][i], &part[0], sizeof(float)) == 0;
            }
            free(part); free(send[t]); free(recv[t]); free(stage[t]);
        }
        check("reduce-scatter in pieces: the caller's bounded staging only, binomial-order sums bit for bit, 2 in flight", ok);
        // the all-reduce of a multiple of the world: the same pieces, then an all-gather
        size_t n = 1000, m = (size_t)W * n;
        float* ar = alloc_floats(m);
        float* st = alloc_floats(zero_comm_rs_stage(&k, n));
        float* part = alloc_floats((size_t)W);
        ZeroRequest qa = {0};
        for (size_t j = 0; j < m; j++) { ar[j] = (float)(j % 7919) * 0.37f / (float)(R + 3) - 1.7f; }
        ok = zero_allreduce(&k, ar, m, st, &qa) == 0 && zero_comm_wait(&k, &qa) == 0 && k.scratch_peak == 0;
        for (size_t j = 0; j < m; j++) {
            for (int p = 0; p < W; p++) { part[p] = (float)(j % 7919) * 0.37f / (float)(p + 3) - 1.7f; }
            for (int d = 1; d < W; d *= 2) {
                for (int p = 0; p + d < W; p += 2 * d) { part[p] += part[p + d]; }
            }
            ok &= memcmp(&ar[j], &part[0], sizeof(float)) == 0;
        }
        free(ar); free(st); free(part);
        zero_comm_free(&k);
        check("all-reduce in pieces: the caller's staging only, binomial-order sums bit for bit on every rank", ok);
    }

    // --- scalars
    {
        double s[3] = {R + 1.0, 0.5 * R, -(double)R};
        rc = zero_allreduce_scalars(&c, s, 3);
        double w = W;
        check("scalar all-reduce of 3 doubles",
              rc == 0 && s[0] == w * (w + 1) / 2 && s[1] == 0.5 * w * (w - 1) / 2 && s[2] == -w * (w - 1) / 2);
    }

    // --- broadcast from the last rank (non-zero when W > 1), one short and one chunked size
    {
        int root = W - 1;
        size_t sizes[2] = {37, 1000};
        for (int t = 0; t < 2; t++) {
            size_t nb = sizes[t];
            unsigned char* buf = malloc(nb);
            for (size_t i = 0; i < nb; i++) buf[i] = (R == root) ? (unsigned char)(i * 7 + 3) : 0;
            rc = zero_broadcast(&c, buf, nb, root);
            int ok = rc == 0;
            for (size_t i = 0; i < nb; i++) ok &= buf[i] == (unsigned char)(i * 7 + 3);
            snprintf(name, sizeof name, "broadcast of %zu bytes from root %d", nb, root);
            check(name, ok);
            free(buf);
        }
    }

    // --- barrier
    check("barrier", zero_barrier(&c) == 0);

    // --- empty requests
    {
        ZeroRequest q = {0};
        int done = 0;
        int ok = zero_comm_wait(&c, &q) == 0 && zero_comm_wait(&c, NULL) == 0;
        ok &= zero_comm_test(&c, &q, &done) == 0 && done == 1;
        check("wait / test on an empty request: no-op, done", ok);
        // count 0 is valid and leaves nothing to wait for
        float dummy = 5.0f;
        ok = zero_allgather(&c, &dummy, 0, &q) == 0 && q.n == 0 && zero_comm_wait(&c, &q) == 0 && dummy == 5.0f;
        ok &= zero_allreduce(&c, &dummy, 0, NULL, NULL) == 0 && dummy == 5.0f;
        check("count 0: nothing sent, nothing to wait for", ok);
    }

    // --- byte and call counters on a fresh communicator
    {
        ZeroComm k;
        int ok = zero_comm_init(&k, MPI_COMM_WORLD) == 0;
        float* ag = alloc_floats((size_t)W * 10);
        float* send = alloc_floats((size_t)W * 6);
        float* recv = alloc_floats(6);
        float* ar = alloc_floats(12);
        double sc[3] = {1, 2, 3};
        char bb[100] = {0};
        ZeroRequest q = {0};
        fill_allgather(ag, 10, R, W);
        fill_send(send, 6, R, W);
        fill_allreduce(ar, 12, R);
        ok &= zero_allgather(&k, ag, 10, NULL) == 0;
        ok &= zero_allgather(&k, ag, 10, &q) == 0 && zero_comm_wait(&k, &q) == 0;   // 2 calls
        ok &= zero_reduce_scatter(&k, send, recv, 6, NULL, &q) == 0 && zero_comm_wait(&k, &q) == 0;
        ok &= zero_allreduce(&k, ar, 12, NULL, NULL) == 0;
        ok &= zero_allreduce_scalars(&k, sc, 3) == 0;
        ok &= zero_broadcast(&k, bb, 100, 0) == 0;
        double w = W;
        double want[ZERO_NUM_COLLECTIVES];
        want[ZERO_ALLGATHER] = 2 * (w - 1) * 10 * 4;
        want[ZERO_REDUCE_SCATTER] = (w - 1) * 6 * 4;
        want[ZERO_ALLREDUCE] = 2 * (w - 1) * 12 * 4 / w;
        want[ZERO_SCALAR] = 2 * (w - 1) * 3 * 8 / w;
        want[ZERO_BROADCAST] = (R == 0) ? 0 : 100;
        long want_calls[ZERO_NUM_COLLECTIVES] = {2, 1, 1, 1, 1};
        for (int i = 0; i < ZERO_NUM_COLLECTIVES; i++) {
            if (fabs(k.bytes[i] - want[i]) > 1e-9 || k.calls[i] != want_calls[i]) {
                ok = 0;
                fprintf(stderr, "rank %d: counter %s: bytes %.3f (want %.3f), calls %ld (want %ld)\n",
                        R, zero_comm_kind_name(i), k.bytes[i], want[i], k.calls[i], want_calls[i]);
            }
        }
        ok &= k.wait_ms >= 0.0;
        if (R == 0) {
            printf("     counters at world %d: all-gather %.0f B, reduce-scatter %.0f B, all-reduce %.0f B, "
                   "scalars %.0f B, broadcast %.0f B (rank 0), wait %.3f ms\n", W, k.bytes[0], k.bytes[1],
                   k.bytes[2], k.bytes[4], k.bytes[3], k.wait_ms);
        }
        check("byte and call counters: exact values", ok);
        zero_comm_free(&k);
        check("free: communicator released", k.comm == MPI_COMM_NULL);
        free(ag); free(send); free(recv); free(ar);
    }

    // --- error paths (each decided locally and identically on every rank: no hang)
    {
        char b = 0;
        rc = zero_broadcast(&c, &b, 1, W);
        int ok = rc == -1 && strstr(zero_errmsg(), "root") != NULL;
        rc = zero_broadcast(&c, &b, 1, -1);
        ok &= rc == -1 && strstr(zero_errmsg(), "root") != NULL;
        if (R == 0) printf("     message: %s\n", zero_errmsg());
        check("broadcast from an invalid root returns -1 with a message", ok);

        rc = zero_allreduce_scalars(&c, NULL, -1);
        check("scalar all-reduce of a negative count returns -1", rc == -1);

        // more than 16 chunks is refused before the buffer is touched (NULL is never read);
        // at world 1 all-gather and all-reduce are no-ops and succeed. (The all-reduce of MPI's
        // own: 17 x 7 divides by no world 2..4, and 17 x 2^30 / world is past an MPI count,
        // so it is not the one in pieces, which has no such limit.)
        size_t too_many = 17 * (size_t)ZERO_COMM_CHUNK;
        int want = (W == 1) ? 0 : -1;
        ok = zero_allgather(&c, NULL, too_many, NULL) == want;
        ok &= zero_allreduce(&c, NULL, too_many, NULL, NULL) == want;
        if (W > 1) ok &= strstr(zero_errmsg(), "chunks") != NULL;
        if (R == 0 && W > 1) printf("     message: %s\n", zero_errmsg());
        check("more than 16 chunks: refused with a message (world > 1)", ok);

        // an error reported by MPI itself, with its error string: duplicating
        // MPI_COMM_NULL (reported through MPI_COMM_WORLD's handler, made non-fatal here)
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        ZeroComm bad;
        rc = zero_comm_init(&bad, MPI_COMM_NULL);
        ok = rc == -1 && strstr(zero_errmsg(), "MPI_Comm_dup") != NULL && bad.comm == MPI_COMM_NULL;
        if (R == 0) printf("     message: %s\n", zero_errmsg());
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        check("init on MPI_COMM_NULL returns -1 with the MPI error string", ok);
        zero_comm_free(&bad);  // safe on a failed init
    }

    // --- the engine's communicator still works after the errors
    {
        size_t n = 7;
        float* buf = alloc_floats((size_t)W * n);
        fill_allgather(buf, n, R, W);
        check("all-gather after the error paths", zero_allgather(&c, buf, n, NULL) == 0 && check_allgather(buf, n, W));
        free(buf);
    }

    // --- nodes: every way to cut this world into equal nodes (--ranks-per-node's stand-in),
    // the collectives' results, the phases' order with several in flight, and the bytes
    // counted per link against the formulas of the header
    for (int per = 1; per <= W; per++) {
        if (W % per != 0) { continue; }
        int node = -1;
        ZeroComm k;
        int ok = zero_comm_node(MPI_COMM_WORLD, per, &node) == 0 && node == R / per;
        ok &= zero_comm_init_nodes(&k, MPI_COMM_WORLD, node) == 0;
        int M = W / per;
        int want_span = W == 1 || M == 1 ? ZERO_SPAN_NODE : (per == 1 ? ZERO_SPAN_CROSS : ZERO_SPAN_HIER);
        ok &= k.span == want_span && k.nodes == (W == 1 ? 1 : M) && k.node == (W == 1 ? 0 : R / per);
        snprintf(name, sizeof(name), "nodes of %d: span %d, %d nodes", per, k.span, k.nodes);
        check(name, ok);
        // three gathers, two reductions and an all-reduce in flight at once, waited for in
        // reverse order (the queue must still start every later phase in one order)
        for (size_t ci = 0; ci < N_COUNTS; ci++) {
            size_t n = test_counts[ci];
            if (n > 1000 || (size_t)W * n > MAX_OK_COUNT) { continue; }  // the all-reduce is of W * n
            float* ag[3]; ZeroRequest rq[6];
            memset(rq, 0, sizeof(rq));
            ok = 1;
            for (int i = 0; i < 3; i++) { ag[i] = alloc_floats((size_t)W * n); fill_allgather(ag[i], n, R, W); }
            float* send = alloc_floats((size_t)W * n); float* recv = alloc_floats(n); float* recv2 = alloc_floats(n);
            float* ar = alloc_floats((size_t)W * n);
            fill_send(send, n, R, W); fill_allreduce(ar, (size_t)W * n, R);
            ok &= zero_allgather(&k, ag[0], n, &rq[0]) == 0;
            ok &= zero_reduce_scatter(&k, send, recv, n, NULL, &rq[1]) == 0;
            ok &= zero_allgather(&k, ag[1], n, &rq[2]) == 0;
            ok &= zero_allreduce(&k, ar, (size_t)W * n, NULL, &rq[3]) == 0;
            ok &= zero_reduce_scatter(&k, send, recv2, n, NULL, &rq[4]) == 0;
            ok &= zero_allgather(&k, ag[2], n, &rq[5]) == 0;
            for (int i = 5; i >= 0; i--) { ok &= zero_comm_wait(&k, &rq[i]) == 0; }
            for (int i = 0; i < 3; i++) { ok &= check_allgather(ag[i], n, W); }
            ok &= check_reduce_scatter(recv, n, R, W) && check_reduce_scatter(recv2, n, R, W);
            ok &= check_allreduce(ar, (size_t)W * n, W) && check_send_intact(send, n, R, W);
            ok &= k.head == NULL;
            for (int i = 0; i < 6; i++) { ok &= !rq[i].live && rq[i].f == NULL && rq[i].q == NULL; }
            snprintf(name, sizeof(name), "nodes of %d: 6 collectives of %zu in flight, waited in reverse: exact", per, n);
            check(name, ok);
            for (int i = 0; i < 3; i++) { free(ag[i]); }
            free(send); free(recv); free(recv2); free(ar);
        }
        // bytes per link: one all-gather, one reduce-scatter, one all-reduce of n = 16 per rank
        {
            size_t n = 16;
            double before[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];
            memcpy(before, k.link_bytes, sizeof(before));
            float* buf = alloc_floats((size_t)W * n); float* send = alloc_floats((size_t)W * n); float* recv = alloc_floats(n);
            fill_allgather(buf, n, R, W); fill_send(send, n, R, W);
            ok = zero_allgather(&k, buf, n, NULL) == 0 && zero_reduce_scatter(&k, send, recv, n, NULL, NULL) == 0;
            fill_allreduce(buf, (size_t)W * n, R);
            ok &= zero_allreduce(&k, buf, (size_t)W * n, NULL, NULL) == 0;
            double B = (double)n * sizeof(float), intra[3], inter[3];
            int a[3] = {ZERO_ALLGATHER, ZERO_REDUCE_SCATTER, ZERO_ALLREDUCE};
            for (int i = 0; i < 3; i++) {
                intra[i] = k.link_bytes[ZERO_LINK_INTRA][a[i]] - before[ZERO_LINK_INTRA][a[i]];
                inter[i] = k.link_bytes[ZERO_LINK_INTER][a[i]] - before[ZERO_LINK_INTER][a[i]];
            }
            double wi[3], we[3];   // the header's formulas
            if (k.span == ZERO_SPAN_HIER) {
                wi[0] = (per - 1) * (double)M * B; we[0] = (M - 1) * B;
                wi[1] = (per - 1) * (double)M * B; we[1] = (M - 1) * B;
                wi[2] = 2.0 * (per - 1) * (double)M * B; we[2] = 2.0 * (M - 1) * (double)per * B / per;
            } else {
                double ag = (W - 1) * B, ared = 2.0 * (W - 1) * W * B / W;
                int cross = k.span == ZERO_SPAN_CROSS;
                wi[0] = cross ? 0 : ag; we[0] = cross ? ag : 0;
                wi[1] = cross ? 0 : ag; we[1] = cross ? ag : 0;
                wi[2] = cross ? 0 : ared; we[2] = cross ? ared : 0;
            }
            for (int i = 0; i < 3; i++) { ok &= fabs(intra[i] - wi[i]) < 0.5 && fabs(inter[i] - we[i]) < 0.5; }
            snprintf(name, sizeof(name), "nodes of %d: bytes per link as the formulas (inter ag %.0f rs %.0f ar %.0f)", per, inter[0], inter[1], inter[2]);
            check(name, ok);
            free(buf); free(send); free(recv);
        }
        // quantised: the gather gives every rank dequantise(quantise(block)) of every block;
        // the reduce-scatter is within the int8 error of its hops (each hop adds at most
        // max|x| / 254 per summand, on values up to W * 1997)
        {
            size_t n = 300;   // more than one quantisation block, the last one short
            float* buf = alloc_floats((size_t)W * n); float* want = alloc_floats(n);
            unsigned char* qb = malloc(zero_quant_bytes(n));
            fill_allgather(buf, n, R, W);
            ok = zero_allgather_q(&k, buf, n, NULL) == 0;
            for (int b = 0; b < W && ok; b++) {
                float blk[300];
                for (size_t i = 0; i < n; i++) { blk[i] = val(b, i); }
                zero_quantize(blk, n, qb);
                zero_dequantize(qb, n, want, 0);
                ok &= memcmp(want, buf + (size_t)b * n, n * sizeof(float)) == 0;
            }
            snprintf(name, sizeof(name), "nodes of %d: quantised all-gather = dequantised blocks, bit for bit", per);
            check(name, ok);
            float* send = alloc_floats((size_t)W * n); float* recv = alloc_floats(n);
            fill_send(send, n, R, W);
            ok = zero_reduce_scatter_q(&k, send, recv, n, NULL) == 0;
            double worst = 0.0, bound = 2.0 * W * (W * 1000.0 + 997.0) / 254.0;  // two hops at most, W summands each
            for (size_t i = 0; i < n; i++) {
                double exact = 0.0;
                for (int r = 0; r < W; r++) { exact += val(r, (size_t)R * n + i); }
                double e = fabs(recv[i] - exact);
                worst = e > worst ? e : worst;
            }
            ok &= worst <= bound && worst > 0.0;   // > 0: it really went through int8
            snprintf(name, sizeof(name), "nodes of %d: quantised reduce-scatter within %.1f of the sum (worst %.2f)", per, bound, worst);
            check(name, ok);
            free(buf); free(want); free(qb); free(send); free(recv);
        }
        zero_comm_free(&k);
    }
    {   // uneven nodes (3 ranks as 2 + 1 is not node-major even): flat, counted as crossing
        ZeroComm k;
        int node = R < 2 ? 0 : 1;
        int ok = zero_comm_init_nodes(&k, MPI_COMM_WORLD, node) == 0;
        ok &= W != 3 || k.span == ZERO_SPAN_UNEVEN;
        float* buf = alloc_floats((size_t)W * 5);
        fill_allgather(buf, 5, R, W);
        ok &= zero_allgather(&k, buf, 5, NULL) == 0 && check_allgather(buf, 5, W);
        ok &= W != 3 || (k.link_bytes[ZERO_LINK_INTER][ZERO_ALLGATHER] == 2 * 5 * sizeof(float) && k.link_bytes[ZERO_LINK_INTRA][ZERO_ALLGATHER] == 0);
        check("uneven nodes: flat and counted as crossing", ok);
        free(buf);
        zero_comm_free(&k);
        ok = zero_comm_node(MPI_COMM_WORLD, W + 1, &node) == (W + 1 > 0 && W % (W + 1) != 0 ? -1 : 0);
        check("--ranks-per-node that does not divide the world: refused", ok && (W == 1 ? 1 : strstr(zero_errmsg(), "divide") != NULL));
        ok = zero_comm_node(MPI_COMM_WORLD, 0, &node) == 0 && node == 0;  // one machine: one node, led by rank 0
        check("shared-memory split: all ranks of this machine on node 0", ok);
    }

    zero_comm_free(&c);
    if (R == 0) { printf("%d passed, %d failed\n", n_passed, n_failed); fflush(stdout); }
    MPI_Finalize();
    return n_failed ? 1 : 0;
}
