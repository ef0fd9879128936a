// zero3/nvme.c: the implementation (the interface and its notes: zero3/nvme.h)
#include "zero3/nvme.h"  // this module's types and prototypes
#include <stdio.h>       // snprintf, fprintf: path, the buffered-I/O notice
#include <stdlib.h>      // posix_memalign, calloc, realloc, free
#include <string.h>      // memset, strerror
#include <errno.h>       // errno, EINVAL, EINTR, ECANCELED
#include <unistd.h>      // close, unlink, ftruncate
#include <sys/stat.h>    // stat, S_ISDIR: tell "missing directory" from other failures
#include "zero3/util.h"  // zero_error, zero_now_ms
#include "common/file.h"  // file_open: no FIFO or device opened as a swap file; file_lock
#include "zero3/watch.h" // zero_watch_io_enter/leave: the completion waits told to the watchdog; zero_watch_on_exit
#include "zero3/crc32c.h" // crc32c_blocks: the blocks' checksums

static char nvme_live[NVME_MAX_LIVE][4096];

static void nvme_live_set(const char* path, int add) {
    for (int i = 0; i < NVME_MAX_LIVE; i++) {
        if (add && nvme_live[i][0] == '\0') { snprintf(nvme_live[i], sizeof(nvme_live[i]), "%s", path); return; }
        if (!add && strcmp(nvme_live[i], path) == 0) { nvme_live[i][0] = '\0'; return; }
    }
}

void nvme_remove_all(void) {
    for (int i = 0; i < NVME_MAX_LIVE; i++) {
        if (nvme_live[i][0] != '\0') { unlink(nvme_live[i]); nvme_live[i][0] = '\0'; }
    }
}

size_t nvme_sums_bytes(size_t bytes) { return (bytes + NVME_ALIGN - 1) / NVME_ALIGN * sizeof(uint32_t); }

// every block's checksum that of zeros: what the preallocated (or sparse) file reads as
static int nvme_sums_init(NvmeFile* f) {
    size_t n = f->bytes / NVME_ALIGN;
    f->sums = (uint32_t*)malloc(nvme_sums_bytes(f->bytes));
    if (f->sums == NULL) { return zero_error("nvme_open: %s: out of memory for the checksums of %zu blocks", f->path, n); }
    unsigned char zeros[NVME_ALIGN];
    memset(zeros, 0, sizeof(zeros));
    crc32c_blocks(zeros, 1, NVME_ALIGN, &f->zero_sum);
    for (size_t i = 0; i < n; i++) { f->sums[i] = f->zero_sum; }
    return 0;
}

int nvme_open(NvmeFile* f, const char* dir, int rank, size_t bytes, int queue_depth) {
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    f->free_req = f->done_head = f->done_tail = -1;
    if (dir == NULL || rank < 0 || queue_depth < 1 || bytes == 0) {
        return zero_error("nvme_open: bad arguments (dir %s, rank %d, bytes %zu, queue depth %d)",
                          dir ? dir : "(null)", rank, bytes, queue_depth);
    }
    int n = snprintf(f->path, sizeof(f->path), "%s/zero3_rank%05d.swp", dir, rank);
    if (n < 0 || (size_t)n >= sizeof(f->path)) {
        return zero_error("nvme_open: path too long under %s", dir);
    }
    if (bytes > SIZE_MAX - (NVME_ALIGN - 1)) { return zero_error("nvme_open: %s: size %zu too large", f->path, bytes); }
    f->bytes = (bytes + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    f->queue_depth = queue_depth;
    f->chunk_bytes = NVME_CHUNK_BYTES;
    int created = 0, rc = 0, stale = 0;  // declared before the gotos (the header is also compiled as C++)
    long holder = -1;
    const char* why = NULL;
    // stat the directory first: "directory missing" is a clearer message than ENOENT on the file
    struct stat st;
    if (stat(dir, &st) != 0) {
        zero_error("nvme_open: swap directory %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (!S_ISDIR(st.st_mode)) {
        zero_error("nvme_open: swap directory %s: %s", dir, strerror(ENOTDIR));
        goto fail;
    }
    // not O_TRUNC: the file may be another job's, in use; emptied only once locked below.
    // Through file_open: a FIFO or a device of that name is refused unopened, and left there
    stale = lstat(f->path, &st) == 0;
    f->fd = file_open(f->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_DIRECT, 0600, FILE_REGULAR, &why);
    f->direct = 1;
    if (f->fd < 0 && errno == EINVAL) {
        // the filesystem refuses O_DIRECT: keep working through the page cache
        f->fd = file_open(f->path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600, FILE_REGULAR, &why);
        f->direct = 0;
        if (f->fd >= 0) {
            fprintf(stderr, "nvme: %s: filesystem does not support O_DIRECT, using buffered I/O\n", f->path);
        }
    }
    if (f->fd < 0) {
        zero_error("nvme_open: cannot create swap file %s: %s", f->path, why);
        goto fail;
    }
    if (file_lock(f->fd, &holder) != 0) {
        int e = errno;
        if (e == EACCES || e == EAGAIN) {
            zero_error("nvme_open: swap file %s is in use by another job (process %ld holds its lock; "
                       "give each job its own --nvme-path)", f->path, holder);
        } else {
            zero_error("nvme_open: cannot lock swap file %s: %s", f->path, strerror(e));
        }
        goto fail;  // not created: the file stays, it is the other job's
    }
    created = 1;
    nvme_live_set(f->path, 1);
    zero_watch_on_exit(nvme_remove_all);  // and when the watchdog or an abort ends the process
    if (stale) {
        // a killed run's leftover (nobody holds its lock): its contents mean nothing now
        fprintf(stderr, "nvme: replacing stale swap file %s left by an earlier run\n", f->path);
        if (ftruncate(f->fd, 0) != 0) {
            zero_error("nvme_open: cannot empty the stale swap file %s: %s", f->path, strerror(errno));
            goto fail;
        }
    }
    if (fallocate(f->fd, 0, 0, (off_t)f->bytes) != 0) {
        int e = errno;
        if (e == EOPNOTSUPP) {
            // no preallocation on this filesystem: a sparse file; ENOSPC would come at write time
            if (ftruncate(f->fd, (off_t)f->bytes) != 0) {
                zero_error("nvme_open: cannot size %s to %zu bytes: %s", f->path, f->bytes, strerror(errno));
                goto fail;
            }
        } else {
            zero_error("nvme_open: cannot preallocate %zu bytes for %s: %s", f->bytes, f->path, strerror(e));
            goto fail;
        }
    }
    if (nvme_sums_init(f) != 0) { goto fail; }
    rc = io_uring_queue_init((unsigned)queue_depth, &f->ring, 0);
    if (rc < 0) {
        zero_error("nvme_open: io_uring setup (queue depth %d) for %s failed: %s%s", queue_depth, f->path,
                   strerror(-rc), rc == -EPERM ? " (io_uring disabled? see /proc/sys/kernel/io_uring_disabled)" : "");
        goto fail;
    }
    f->ring_ok = 1;
    f->slots = (NvmeSlot*)calloc((size_t)queue_depth, sizeof(NvmeSlot));
    f->free_slots = (int*)calloc((size_t)queue_depth, sizeof(int));
    if (f->slots == NULL || f->free_slots == NULL) {
        zero_error("nvme_open: %s: out of memory for %d queue slots", f->path, queue_depth);
        goto fail;
    }
    for (int i = 0; i < queue_depth; i++) {
        f->slots[i].req = -1;
        f->free_slots[i] = queue_depth - 1 - i;
    }
    f->n_free_slots = queue_depth;
    return 0;
fail:
    nvme_close(f, created);
    return -1;
}

void nvme_close(NvmeFile* f, int remove_file) {
    if (f->ring_ok) {
        // SQEs prepared but never submitted are dropped by io_uring_queue_exit; submitted
        // ones must be reaped first, or a direct read could land in freed buffers
        int submitted = f->inflight - f->unsubmitted;
        while (submitted > 0) {
            struct io_uring_cqe* cqe;
            int rc = io_uring_wait_cqe(&f->ring, &cqe);
            if (rc == -EINTR) { continue; }
            if (rc < 0) { break; }
            io_uring_cqe_seen(&f->ring, cqe);
            submitted--;
        }
        io_uring_queue_exit(&f->ring);  // also drops the buffer registration
        f->ring_ok = 0;
    }
    // unlinked before the close drops the lock, and only while the path is still this
    // file (nvme_remove_all may have unlinked it and another job made a new one since)
    struct stat mine, there;
    if (remove_file && f->path[0] != '\0' && f->fd >= 0 && fstat(f->fd, &mine) == 0 && lstat(f->path, &there) == 0 &&
        mine.st_dev == there.st_dev && mine.st_ino == there.st_ino) {
        unlink(f->path);
    }
    nvme_live_set(f->path, 0);
    if (f->fd >= 0) { close(f->fd); f->fd = -1; }
    for (int i = 0; i < f->n_iov; i++) { free(f->iov[i].iov_base); }
    for (int i = 0; i < f->n_ptr_arrays; i++) { free(f->ptr_arrays[i]); }
    free(f->iov); free(f->ptr_arrays); free(f->slots); free(f->free_slots); free(f->reqs); free(f->sums);
    f->iov = NULL; f->ptr_arrays = NULL; f->slots = NULL; f->free_slots = NULL; f->reqs = NULL; f->sums = NULL;
    f->n_iov = f->n_ptr_arrays = f->reqs_cap = f->n_free_slots = 0;
    f->inflight = f->unsubmitted = f->outstanding = 0;
}

void* nvme_alloc(size_t size) {
    void* p = NULL;
    size_t huge = size / NVME_HUGE_BYTES * NVME_HUGE_BYTES;
    if (posix_memalign(&p, huge > 0 ? NVME_HUGE_BYTES : NVME_ALIGN, size) != 0) { return NULL; }
    if (huge > 0) { (void)madvise(p, huge, MADV_HUGEPAGE); }  // THP off or absent: EINVAL, fine
    memset(p, 0, size);  // touch: the pages exist before the kernel pins them
    // huge pages the fault could not get (fragmented memory, heap pages touched before):
    // ask once more, synchronously (Linux >= 6.1); a no-op where they are already huge
    if (huge > 0) { (void)madvise(p, huge, MADV_COLLAPSE); }
    return p;
}

int nvme_buffers_alloc(NvmeFile* f, int count, size_t bytes_each, void*** out) {
    *out = NULL;
    if (count < 1 || bytes_each == 0 || bytes_each > ((size_t)1 << 30)) {
        // the kernel registers at most 1 GiB per buffer
        return zero_error("nvme_buffers_alloc: %s: bad request (%d buffers of %zu bytes; 1 GiB max each)",
                          f->path, count, bytes_each);
    }
    if (f->inflight > 0 || f->outstanding > 0) {
        return zero_error("nvme_buffers_alloc: %s: cannot register buffers with I/O in flight", f->path);
    }
    size_t size = (bytes_each + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    int total = f->n_iov + count, rc = 0;
    void** ptrs = (void**)calloc((size_t)count, sizeof(void*));
    struct iovec* iov = (struct iovec*)calloc((size_t)total, sizeof(struct iovec));
    void*** arrays = (void***)realloc(f->ptr_arrays, (size_t)(f->n_ptr_arrays + 1) * sizeof(void**));
    if (arrays != NULL) { f->ptr_arrays = arrays; }
    if (ptrs == NULL || iov == NULL || arrays == NULL) {
        zero_error("nvme_buffers_alloc: %s: out of memory", f->path);
        goto fail;
    }
    for (int i = 0; i < count; i++) {
        ptrs[i] = nvme_alloc(size);
        if (ptrs[i] == NULL) {
            zero_error("nvme_buffers_alloc: %s: out of memory for %d buffers of %zu bytes", f->path, count, size);
            goto fail;
        }
    }
    // one registration per ring: register the union of the old and the new buffers
    if (f->n_iov > 0) { memcpy(iov, f->iov, (size_t)f->n_iov * sizeof(struct iovec)); }
    for (int i = 0; i < count; i++) {
        iov[f->n_iov + i].iov_base = ptrs[i];
        iov[f->n_iov + i].iov_len = size;
    }
    if (f->n_iov > 0) { io_uring_unregister_buffers(&f->ring); }
    rc = io_uring_register_buffers(&f->ring, iov, (unsigned)total);
    if (rc < 0) {
        zero_error("nvme_buffers_alloc: %s: io_uring_register_buffers (%d buffers) failed: %s%s", f->path, total,
                   strerror(-rc), rc == -ENOMEM ? " (RLIMIT_MEMLOCK?)" : "");
        // try to restore the old registration so the earlier buffers keep working
        // (if that fails too, they are used with plain read/write: slower, still correct)
        f->iov_registered = f->n_iov > 0 && io_uring_register_buffers(&f->ring, f->iov, (unsigned)f->n_iov) == 0;
        goto fail;
    }
    free(f->iov);
    f->iov = iov;
    f->n_iov = total;
    f->iov_registered = 1;
    f->ptr_arrays[f->n_ptr_arrays++] = ptrs;
    *out = ptrs;
    return 0;
fail:
    if (ptrs != NULL) { for (int i = 0; i < count; i++) { free(ptrs[i]); } }
    free(ptrs);
    free(iov);
    return -1;
}

// passes prepared SQEs to the kernel; a failure here makes the ring unusable (f->broken)
static int nvme_flush(NvmeFile* f) {
    while (f->unsubmitted > 0) {
        double t0 = zero_now_ms();  // (a device queue that is full blocks the submission itself)
        int rc = io_uring_submit(&f->ring);
        f->wait_ms += zero_now_ms() - t0;
        if (rc == -EINTR) { continue; }
        if (rc <= 0) {
            f->broken = 1;
            return zero_error("nvme: %s: io_uring_submit failed: %s", f->path,
                              rc < 0 ? strerror(-rc) : "no SQE accepted");
        }
        f->unsubmitted -= rc;
    }
    return 0;
}

// prepares the SQE of slot si (its rest: buf, offset, bytes)
static int nvme_prep(NvmeFile* f, int si) {
    NvmeSlot* s = &f->slots[si];
    struct io_uring_sqe* sqe = io_uring_get_sqe(&f->ring);
    if (sqe == NULL) {
        // cannot happen while inflight <= queue_depth <= SQ entries; guard anyway
        if (nvme_flush(f) != 0) { return -1; }
        sqe = io_uring_get_sqe(&f->ring);
        if (sqe == NULL) { f->broken = 1; return zero_error("nvme: %s: submission queue full", f->path); }
    }
    unsigned len = (unsigned)s->bytes;  // <= chunk_bytes <= 1 GiB
    if (f->reqs[s->req].is_write) {
        if (s->buf_index >= 0) { io_uring_prep_write_fixed(sqe, f->fd, s->buf, len, (uint64_t)s->offset, s->buf_index); }
        else { io_uring_prep_write(sqe, f->fd, s->buf, len, (uint64_t)s->offset); }
    } else {
        if (s->buf_index >= 0) { io_uring_prep_read_fixed(sqe, f->fd, s->buf, len, (uint64_t)s->offset, s->buf_index); }
        else { io_uring_prep_read(sqe, f->fd, s->buf, len, (uint64_t)s->offset); }
    }
    // [Note: submission that never blocks] Issued inline, an O_DIRECT request that finds
    // the device's queue full (nr_requests, shared by every rank on the disk) sleeps inside
    // io_uring_submit until the device drains, and the caller's compute waits for the disk.
    // IOSQE_ASYNC hands the issue to the ring's kernel workers: the caller returns at once
    // and blocks only where it waits for a completion (nvme.h's Queue paragraph).
    s->by_worker = !f->issue_inline;
    if (s->by_worker) { io_uring_sqe_set_flags(sqe, IOSQE_ASYNC); }
    io_uring_sqe_set_data64(sqe, (uint64_t)si);
    f->unsubmitted++;
    return 0;
}

// sends the rest of slot si's piece again, on the same slot (inflight unchanged)
static int nvme_resubmit(NvmeFile* f, int si) {
    f->retries++;
    if (nvme_prep(f, si) != 0) { return -1; }
    return nvme_flush(f) != 0 ? -1 : 1;
}

// appends request ri to the FIFO of completed requests
static void nvme_push_done(NvmeFile* f, int ri) {
    f->reqs[ri].next = -1;
    if (f->done_tail >= 0) { f->reqs[f->done_tail].next = ri; } else { f->done_head = ri; }
    f->done_tail = ri;
}

// waits for one CQE and accounts it: a short piece is resubmitted on the same slot, a
// finished or failed piece frees its slot, and a request whose last piece is in is queued
// Reaps one completion: waits for it (block), or takes one only if the ring has one
// (returns 1 when it did, 0 when there was none).
static int nvme_reap(NvmeFile* f, int block) {
    struct io_uring_cqe* cqe;
    int rc;
    if (!block) {
        rc = io_uring_peek_cqe(&f->ring, &cqe);
        if (rc == -EAGAIN) { return 0; }
    } else {
        double t0 = zero_now_ms();
        zero_watch_io_enter("read or write", f->path);  // a stuck device never completes: the watchdog's to time
        do { rc = io_uring_wait_cqe(&f->ring, &cqe); } while (rc == -EINTR);
        zero_watch_io_leave();
        f->wait_ms += zero_now_ms() - t0;
    }
    if (rc < 0) {
        f->broken = 1;
        return zero_error("nvme: %s: waiting for a completion failed: %s", f->path, strerror(-rc));
    }
    int si = (int)io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&f->ring, cqe);
    NvmeSlot* s = &f->slots[si];
    int ri = s->req;
    NvmeRequest* r = &f->reqs[ri];
    if (res == -ECANCELED && s->by_worker) {
        // nothing here cancels: the kernel did, for want of a worker to issue the piece
        // (nvme.h's Queue paragraph); it goes out again, inline
        if (!f->issue_inline) {
            f->issue_inline = 1;
            fprintf(stderr, "nvme: %s: io_uring could not start a kernel worker (the process limit, ulimit -u?): "
                    "requests are issued by the caller from now on, and may wait for the device's queue\n", f->path);
        }
        return nvme_resubmit(f, si);
    }
    if (res > 0) {
        if (r->is_write) { f->bytes_written += (uint64_t)res; } else { f->bytes_read += (uint64_t)res; }
        if ((size_t)res < s->bytes) {
            // short read/write: the rest goes out again
            s->buf += res;
            s->offset += (size_t)res;
            s->bytes -= (size_t)res;
            return nvme_resubmit(f, si);
        }
    } else if (r->err == 0 && r->eof == 0) {
        // keep the first failure of the request; its other pieces still complete normally
        if (res < 0) { r->err = -res; } else { r->eof = 1; }
        r->err_offset = s->offset;
    }
    s->req = -1;
    f->free_slots[f->n_free_slots++] = si;
    f->inflight--;
    r->pieces--;
    if (r->pieces == 0 && !r->submitting) { nvme_push_done(f, ri); }
    return 1;
}

// a free request record (the array grows; records are addressed by index)
static int nvme_req_alloc(NvmeFile* f) {
    if (f->free_req < 0) {
        int cap = f->reqs_cap ? 2 * f->reqs_cap : 16;
        NvmeRequest* reqs = (NvmeRequest*)realloc(f->reqs, (size_t)cap * sizeof(NvmeRequest));
        if (reqs == NULL) { return zero_error("nvme: %s: out of memory for %d requests", f->path, cap); }
        for (int i = cap - 1; i >= f->reqs_cap; i--) { reqs[i].next = f->free_req; f->free_req = i; }
        f->reqs = reqs;
        f->reqs_cap = cap;
    }
    int ri = f->free_req;
    f->free_req = f->reqs[ri].next;
    return ri;
}

static int nvme_check_usable(NvmeFile* f, const char* what) {
    if (f->fd < 0 || !f->ring_ok) { return zero_error("%s: swap file is not open", what); }
    if (f->broken) { return zero_error("%s: %s: ring unusable after an earlier submission failure", what, f->path); }
    return 0;
}

// validates and submits one request; *out_ri receives its record index
static int nvme_submit(NvmeFile* f, int is_write, const void* buf, size_t offset, size_t bytes, uint64_t tag,
                       int* out_ri) {
    const char* what = is_write ? "nvme_write" : "nvme_read";
    if (nvme_check_usable(f, what) != 0) { return -1; }
    if (bytes == 0 || offset % NVME_ALIGN != 0 || bytes % NVME_ALIGN != 0 || (uintptr_t)buf % NVME_ALIGN != 0) {
        return zero_error("%s: %s: offset %zu, size %zu and buffer %p must be non-zero multiples of %d",
                          what, f->path, offset, bytes, buf, NVME_ALIGN);
    }
    if (offset > f->bytes || bytes > f->bytes - offset) {
        return zero_error("%s: %s: %zu bytes at offset %zu go past the end of the file (%zu bytes)",
                          what, f->path, bytes, offset, f->bytes);
    }
    int buf_index = -1;
    if (f->iov_registered) {
        for (int i = 0; i < f->n_iov; i++) {
            const char* base = (const char*)f->iov[i].iov_base;
            if ((const char*)buf >= base && (size_t)((const char*)buf - base) + bytes <= f->iov[i].iov_len) {
                buf_index = i;
                break;
            }
        }
    }
    int ri = nvme_req_alloc(f);
    if (ri < 0) { return -1; }
    NvmeRequest* r = &f->reqs[ri];
    r->tag = tag;
    r->is_write = is_write;
    r->pieces = 0;
    r->submitting = 1;
    r->err = r->eof = 0;
    r->err_offset = 0;
    r->next = -1;
    r->buf = (char*)buf;
    r->offset = offset;
    r->bytes = bytes;
    // what the blocks will hold once written; the caller keeps the buffer as it is until then
    if (is_write) { crc32c_blocks(buf, bytes / NVME_ALIGN, NVME_ALIGN, f->sums + offset / NVME_ALIGN); }
    f->outstanding++;
    if (is_write) { f->writes++; } else { f->reads++; }
    size_t chunk = f->chunk_bytes;
    if (chunk < NVME_ALIGN || chunk > ((size_t)1 << 30) || chunk % NVME_ALIGN != 0) { chunk = NVME_CHUNK_BYTES; }
    size_t done = 0;
    while (done < bytes) {
        if (f->n_free_slots == 0) {
            // queue full: make room, completed requests wait on the FIFO for nvme_wait
            f->submit_waits++;
            if (nvme_flush(f) != 0 || nvme_reap(f, 1) < 0) { return -1; }
            continue;
        }
        int si = f->free_slots[--f->n_free_slots];
        NvmeSlot* s = &f->slots[si];
        size_t piece = bytes - done < chunk ? bytes - done : chunk;
        s->req = ri;
        s->buf_index = buf_index;
        s->buf = (char*)buf + done;
        s->offset = offset + done;
        s->bytes = piece;
        f->reqs[ri].pieces++;  // f->reqs, not r: a reap above never reallocates, but stay index-based
        f->inflight++;
        if (nvme_prep(f, si) != 0) { return -1; }
        done += piece;
    }
    f->reqs[ri].submitting = 0;
    if (nvme_flush(f) != 0) { return -1; }
    if (f->reqs[ri].pieces == 0) { nvme_push_done(f, ri); }  // everything completed while submitting
    if (out_ri) { *out_ri = ri; }
    return 0;
}

// A complete read's blocks against their checksums: 0, or -1 naming the first block that
// is not what was written there
static int nvme_verify(const NvmeFile* f, const NvmeRequest* r) {
    uint32_t got[64];
    size_t first = r->offset / NVME_ALIGN, n = r->bytes / NVME_ALIGN;
    for (size_t i = 0; i < n; i += 64) {
        size_t k = n - i < 64 ? n - i : 64;
        crc32c_blocks(r->buf + i * NVME_ALIGN, k, NVME_ALIGN, got);
        for (size_t j = 0; j < k; j++) {
            size_t b = first + i + j;
            if (got[j] == f->sums[b]) { continue; }
            return zero_error("nvme_read: %s: block %zu (byte offset %zu, %d bytes) fails its checksum: CRC32C %08x, written "
                              "as %08x%s: the swap file was changed under this job (by another process, or the device)",
                              f->path, b, b * NVME_ALIGN, NVME_ALIGN, got[j], f->sums[b],
                              got[j] == f->zero_sum ? " (it reads as zeros)" : "");
        }
    }
    return 0;
}

// hands back a completed request record: 0, or -1 with the failure's message
static int nvme_finish(NvmeFile* f, int ri) {
    NvmeRequest* r = &f->reqs[ri];
    int rc = 0;
    if (r->err != 0 || r->eof) {
        rc = zero_error("%s: %s: block %zu (byte offset %zu): %s%s", r->is_write ? "nvme_write" : "nvme_read", f->path,
                        r->err_offset / NVME_ALIGN, r->err_offset, r->eof ? "" : "I/O failed: ",
                        r->eof ? "unexpected end of file: the swap file was truncated under this job" : strerror(r->err));
    } else if (!r->is_write) {
        rc = nvme_verify(f, r);
    }
    r->next = f->free_req;
    f->free_req = ri;
    f->outstanding--;
    return rc;
}

int nvme_read_async(NvmeFile* f, void* buf, size_t offset, size_t bytes, uint64_t tag) {
    return nvme_submit(f, 0, buf, offset, bytes, tag, NULL);
}

int nvme_write_async(NvmeFile* f, const void* buf, size_t offset, size_t bytes, uint64_t tag) {
    return nvme_submit(f, 1, buf, offset, bytes, tag, NULL);
}

// returns the oldest completed request (there is one) to the caller
static int nvme_pop_done(NvmeFile* f, uint64_t* tag) {
    int ri = f->done_head;
    f->done_head = f->reqs[ri].next;
    if (f->done_head < 0) { f->done_tail = -1; }
    *tag = f->reqs[ri].tag;
    return nvme_finish(f, ri);
}

int nvme_wait(NvmeFile* f, uint64_t* tag) {
    if (nvme_check_usable(f, "nvme_wait") != 0) { return -1; }
    while (f->done_head < 0) {
        if (f->outstanding == 0 || f->inflight == 0) {
            return zero_error("nvme_wait: %s: no request in flight", f->path);
        }
        if (nvme_flush(f) != 0 || nvme_reap(f, 1) < 0) { return -1; }
    }
    return nvme_pop_done(f, tag);
}

int nvme_poll(NvmeFile* f, uint64_t* tag) {
    if (nvme_check_usable(f, "nvme_poll") != 0) { return -1; }
    if (nvme_flush(f) != 0) { return -1; }
    for (int rc = 1; f->done_head < 0 && f->inflight > 0 && rc == 1;) {
        if ((rc = nvme_reap(f, 0)) < 0) { return -1; }
    }
    if (f->done_head < 0) { return 0; }
    return nvme_pop_done(f, tag) != 0 ? -1 : 1;
}

int nvme_wait_all(NvmeFile* f) {
    if (nvme_check_usable(f, "nvme_wait_all") != 0) { return -1; }
    char first[ZERO_ERRMSG_BYTES] = "";
    while (f->outstanding > 0) {
        uint64_t tag;
        if (nvme_wait(f, &tag) != 0) {
            if (first[0] == '\0') { snprintf(first, sizeof(first), "%s", zero_errmsg()); }
            if (f->broken) { break; }
        }
    }
    if (first[0] != '\0') { return zero_error("%s", first); }
    return 0;
}

// blocking: waits for this request only; other completions stay queued for nvme_wait
static int nvme_io_sync(NvmeFile* f, int is_write, const void* buf, size_t offset, size_t bytes) {
    int ri;
    if (nvme_submit(f, is_write, buf, offset, bytes, 0, &ri) != 0) { return -1; }
    for (;;) {
        // is ri on the done FIFO? (short list: only completions not yet collected)
        for (int prev = -1, i = f->done_head; i >= 0; prev = i, i = f->reqs[i].next) {
            if (i != ri) { continue; }
            if (prev < 0) { f->done_head = f->reqs[i].next; } else { f->reqs[prev].next = f->reqs[i].next; }
            if (f->done_tail == i) { f->done_tail = prev; }
            return nvme_finish(f, ri);
        }
        if (nvme_flush(f) != 0 || nvme_reap(f, 1) < 0) { return -1; }
    }
}

int nvme_read(NvmeFile* f, void* buf, size_t offset, size_t bytes) {
    return nvme_io_sync(f, 0, buf, offset, bytes);
}

int nvme_write(NvmeFile* f, const void* buf, size_t offset, size_t bytes) {
    return nvme_io_sync(f, 1, buf, offset, bytes);
}
