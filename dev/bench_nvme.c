/*
 Throughput of the NVMe swapper (zero3/nvme.h): sequential write, then sequential read,
 of TOTAL bytes in REQ-byte requests kept QD deep, through registered buffers.
 usage: bench_nvme DIR [total_MiB=1024] [req_MiB=8] [qd=8]
 prints: bench_nvme: write_gbps=B read_gbps=A (GB/s = 1e9 bytes/s); exits 1 on error.
 The page cache is dropped between the phases when allowed (O_DIRECT makes it moot);
 the read data is checked, so a fast read of the wrong bytes cannot pass, and so are the
 swapper's block checksums (zero3/nvme.h), whose cost the figures include.
 build: make build/bench_nvme
*/
#include "zero3/nvme.h"   // first: defines _GNU_SOURCE; NvmeFile and its calls, zero_error
#include <stdio.h>        // printf, fopen
#include <stdlib.h>       // atoi, exit
#include <time.h>         // clock_gettime
#include "zero3/util.h"     // zero_error, zero_errmsg
#include <string.h>   // memset

// exits with the swapper's message when a call failed (zero3/'s errors are zero_error's,
// not llmc_error's: this program includes nothing of llmc/)
static void check(int rc) {
    if (rc != 0) {
        fprintf(stderr, "bench_nvme: %s\n", zero_errmsg());
        exit(EXIT_FAILURE);
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// runs one sequential pass; is_write selects the direction; returns seconds or -1
static double bench_pass(NvmeFile* f, void** bufs, int qd, size_t req, size_t total, int is_write) {
    size_t next = 0;  // next file offset to submit
    int busy = 0;
    double t0 = now_s();
    // prime the queue, then every completion frees its buffer (tag = buffer index) for the next request
    for (int i = 0; i < qd && next < total; i++, next += req, busy++) {
        int rc = is_write ? nvme_write_async(f, bufs[i], next, req, (uint64_t)i)
                          : nvme_read_async(f, bufs[i], next, req, (uint64_t)i);
        if (rc != 0) { return -1; }
    }
    while (busy > 0) {
        uint64_t tag = 0;
        if (nvme_wait(f, &tag) != 0) { return -1; }
        busy--;
        if (!is_write && ((uint64_t*)bufs[tag])[1] != 0x5A5A5A5Aull) {
            zero_error("read back wrong data");
            return -1;
        }
        if (next < total) {
            int rc = is_write ? nvme_write_async(f, bufs[tag], next, req, tag)
                              : nvme_read_async(f, bufs[tag], next, req, tag);
            if (rc != 0) { return -1; }
            next += req;
            busy++;
        }
    }
    return now_s() - t0;
}

int main(int argc, char** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s DIR [total_MiB] [req_MiB] [qd]\n", argv[0]); return 1; }
    size_t total = (size_t)(argc > 2 ? atoi(argv[2]) : 1024) << 20;
    size_t req = (size_t)(argc > 3 ? atoi(argv[3]) : 8) << 20;
    int qd = argc > 4 ? atoi(argv[4]) : 8;
    NvmeFile f;
    void** bufs;
    check(nvme_open(&f, argv[1], 0, total, qd));
    check(nvme_buffers_alloc(&f, qd, req, &bufs));
    for (int i = 0; i < qd; i++) { memset(bufs[i], 0x5A, req); ((uint64_t*)bufs[i])[1] = 0x5A5A5A5Aull; }
    double tw = bench_pass(&f, bufs, qd, req, total, 1);
    if (tw < 0) { check(-1); }
    FILE* dc = fopen("/proc/sys/vm/drop_caches", "w");  // not allowed unprivileged: fine
    if (dc) { fputs("3\n", dc); fclose(dc); }
    for (int i = 0; i < qd; i++) { memset(bufs[i], 0, req); }
    double tr = bench_pass(&f, bufs, qd, req, total, 0);
    if (tr < 0) { check(-1); }
    printf("bench_nvme: %s direct=%d total=%zu req=%zu qd=%d write_s=%.3f read_s=%.3f\n", f.path, f.direct,
           total, req, qd, tw, tr);
    printf("bench_nvme: write_gbps=%.3f read_gbps=%.3f\n", (double)total / tw / 1e9, (double)total / tr / 1e9);
    nvme_close(&f, 1);
    return 0;
}
