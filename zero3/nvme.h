/*
 NVMe tier of ZeRO-Infinity: an io_uring swapper that moves optimizer/parameter shards
 between host buffers and one swap file per rank.

 File: DIR/zero3_rank%05d.swp, created with mode 0600, opened O_RDWR | O_DIRECT through
 common/file.h's file_open (a FIFO or a device of that name is refused, unopened and left
 alone), locked (file_lock: a POSIX write lock over the whole file: a second job on the
 same --nvme-path is refused with the holder's pid, before anything is truncated),
 emptied when an earlier run left it (a stale file, reported on stderr), removed at
 nvme_close and by nvme_remove_all (the trainer's failure and signal paths), and
 preallocated to `bytes` (rounded up to 4 KiB) with fallocate, so that a full disk shows
 up at nvme_open (ENOSPC, naming the path) and not halfway through a training step. A filesystem without fallocate gets a sparse file (ftruncate) instead.
 O_DIRECT: the swapped data is read once per step and must not push the trainer's own
 memory out of the page cache, and O_DIRECT avoids a copy. A filesystem that refuses
 O_DIRECT (open fails with EINVAL) gets buffered I/O with a one-line notice on stderr
 (f->direct says which one is used): the swapper still works, it is only slower and uses
 page cache. Linux >= 6.6 tmpfs accepts O_DIRECT anyway.

 Requests: (buffer, file offset, bytes). offset, bytes and the buffer address must be
 multiples of NVME_ALIGN (4096: O_DIRECT wants logical-block alignment, 4 KiB covers
 every device), bytes > 0, and offset + bytes within the preallocated size. A bad request
 is refused with -1 and a message before anything is submitted. A request larger than
 f->chunk_bytes (NVME_CHUNK_BYTES, 8 MiB; a test may lower the field after nvme_open) is
 split into several SQEs: the kernel caps one read/write at about 2 GiB and smaller
 pieces keep the device queue busy. The caller sees one request per tag.

 Queue: queue_depth is the number of SQEs in flight (f->inflight). Submitting when all
 slots are taken first reaps completions (f->submit_waits counts those waits); a request
 completed that way is kept on a FIFO until nvme_wait returns it, so any number of
 requests may be outstanding. Such a submission is a synchronous wait in disguise: the
 caller gets its "asynchronous" request back only once most of it is done. So the swap's
 ring (NVME_QUEUE_DEPTH, 128 SQEs: 1 GiB in flight in 8 MiB pieces) holds what an engine
 keeps in flight at once; at depth 8 (64 MiB) a 2.7B run's reads ahead of a unit's shard
 (160-257 MB) and the step's group reads (4 x 40 MB) waited in their submission: nearly
 all of the forward's and backward's 9 s of NVMe wait a step (docs/RESULTS.md).
 The ring's slots are not the device's: its queue (nr_requests, 256 requests of up to
 max_sectors_kb here) is shared by every rank on the disk, and a request issued inline
 that finds it full sleeps inside io_uring_submit. Two processes of 128 SQEs of 8 MiB did:
 each submission of 1 GiB blocked 0.3-0.6 s of its 0.6-1 s. So every SQE is marked
 IOSQE_ASYNC: the ring's kernel workers (iou-wrk threads) issue it and the caller returns
 at once; the disk's throughput is the same. Where no worker can start (the user's
 process limit, RLIMIT_NPROC, reached: the kernel cancels the work), the pieces cancelled
 go out again issued inline, f->issue_inline is set and stderr says so once; requests are
 then issued by the caller, which may wait in io_uring_submit. f->wait_ms counts every
 wait: for a completion, and inside io_uring_submit. nvme_wait returns one fully
 completed request (any order). A short read/write (res < asked) is resubmitted for the
 rest (f->retries counts those) and the request is returned only when every byte is
 done. A read that hits end of file (res == 0: someone truncated the file) and an I/O
 error complete the request with -1 and a message naming the path, the block and file
 offset of the failed piece and strerror(-res) (or "unexpected end of file: the swap file
 was truncated"); *tag is still set so that the caller knows which request failed.

 Fixed buffers: nvme_buffers_alloc allocates 4 KiB-aligned buffers and registers them
 with the ring. A request whose buffer lies inside one of them uses READ_FIXED /
 WRITE_FIXED (no page pinning per I/O); any other aligned buffer uses plain READ / WRITE.
 The buffers belong to the NvmeFile: nvme_close unregisters and frees them and the
 pointer arrays returned. Registering again while I/O is in flight is refused.

 Huge pages: a buffer of at least NVME_HUGE_BYTES (2 MiB) is 2 MiB-aligned, and its whole
 2 MiB blocks are asked for transparent huge pages (MADV_HUGEPAGE before the first touch,
 MADV_COLLAPSE after it, both best effort: without THP the buffer is in 4 KiB pages and
 still correct). Why: an O_DIRECT request reaches the device as one scatter-gather
 segment per physically contiguous run of the buffer, so an 8 MiB request from scattered
 4 KiB pages is up to 2048 segments (and, with virtio-blk's 254 segments per request, nine
 ~1 MiB device requests), while from huge pages it is four. On the shared virtual disk of
 README.md's table the cost is per segment, not per request (with huge pages, 1 MiB and
 4 MiB device requests, set by max_sectors_kb, ran equally fast): 4 KiB pages gave 1.57 GB/s
 read and 1.66 write, huge pages 5.44 and 5.98 (medians of nine alternated 1 GiB passes,
 8 MiB requests, depth 8). fio's buffers are plain malloc'd 4 KiB pages, so fio ran fast
 only when its pages happened to be contiguous: the "fio 2-3x faster" of earlier runs.
 Buffers the caller allocates (plain READ / WRITE) keep whatever pages they have: nvme_alloc
 gives the same layout (the host engine's NVMe parameter staging uses it).

 Checksums: every NVME_ALIGN (4 KiB) block of the file has a CRC32C in memory (f->sums,
 4 bytes a block: 0.1% of the file; zero3/crc32c.h), set from the buffer when a write of
 the block is submitted and checked when a read of it completes, so that a swap file
 changed under a running job (zeroed, overwritten or truncated by another process, a
 device returning other bytes) stops it, the failed request's message naming the file,
 the first bad block and its byte offset, where it would otherwise have trained on
 whatever came back. A block never written holds zeros (fallocate, or the holes of a
 sparse file), and its sum starts as theirs. A read must not overlap a write still in
 flight (its data would be undefined anyway): it would be checked against the new sum.
 The cost is a pass over every byte moved, in the caller's thread, four blocks at a time
 (crc32c_blocks: about 10 GB/s from memory on one core here, against the 1.5-6 GB/s the
 disk moves), and 4 bytes of memory per 4 KiB of swap file (counted in host_buffers).

 Counters: reads / writes count submitted requests (not SQEs), bytes_read / bytes_written
 count bytes the kernel reported done (so also the part before a failure), retries counts
 resubmitted pieces (short, or cancelled for want of a worker), wait_ms the time the
 caller spent blocked for a completion or in a submission (what the device did not hide
 behind the caller's own work: the trainer's "NVMe wait").

 Failure of io_uring_submit itself (not an I/O error: the ring cannot take SQEs) leaves
 the ring in an unknown state: f->broken is set, every later call fails, and the caller
 must nvme_close. nvme_close always waits for SQEs already in the kernel before freeing
 buffers, because a direct read would otherwise write into freed memory.

 One NvmeFile is used by one thread at a time (no locking). Errors: 0 / -1 and one
 zero_error line, as everywhere in zero3/.

 Feature macros: O_DIRECT and fallocate are Linux extensions (_GNU_SOURCE). Include this
 header before any system header, or build with -D_GNU_SOURCE; otherwise #error says so.
*/
#ifndef ZERO3_NVME_H
#define ZERO3_NVME_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE      // O_DIRECT, fallocate: Linux extensions hidden without it
#endif

#include <stddef.h>      // size_t
#include <stdint.h>      // uint64_t, uintptr_t: tags, alignment checks
#include <fcntl.h>       // O_RDWR, O_DIRECT, fallocate
#include <sys/uio.h>     // struct iovec: registered buffers
#include <sys/mman.h>    // madvise: huge pages for the registered buffers
#include <liburing.h>    // io_uring_*: the submission and completion rings

#ifdef __cplusplus
extern "C" {
#endif

#ifndef O_DIRECT
#error "zero3/nvme.h needs _GNU_SOURCE (O_DIRECT): include it first or build with -D_GNU_SOURCE"
#endif

#define NVME_ALIGN 4096
#define NVME_HUGE_BYTES ((size_t)2 << 20)  // x86-64 / arm64 (4 KiB base pages) PMD huge page
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25                   // Linux >= 6.1 (uapi asm-generic/mman-common.h); glibc 2.36 lacks it
#endif
#ifndef NVME_CHUNK_BYTES
#define NVME_CHUNK_BYTES ((size_t)8 << 20)
#endif
#define NVME_QUEUE_DEPTH 128  // the swap's ring (zero3/swap.h): why so deep, the Queue paragraph above

// one SQE in flight (a piece of a request); user_data of the SQE is its index
typedef struct {
    int req;            // index into NvmeFile.reqs, -1 when the slot is free
    int buf_index;      // registered buffer index for *_FIXED, -1 for plain read/write
    char* buf;          // where the rest of this piece goes / comes from
    size_t offset;      // file offset of the rest
    size_t bytes;       // bytes still to do
    int by_worker;      // its SQE went out with IOSQE_ASYNC (issued by a ring worker)
} NvmeSlot;

// one request of the caller (one tag), possibly several pieces
typedef struct {
    uint64_t tag;
    int is_write;
    int pieces;         // pieces in flight
    int submitting;     // 1 while nvme_*_async is still adding pieces: not done even at 0
    int err;            // first errno of a failed piece (positive), 0 if none
    int eof;            // a read returned 0 bytes
    size_t err_offset;  // file offset of the failed piece
    int next;           // free list or done FIFO link, -1 at the end
    char* buf;          // the whole request, for a read's checksums once it is complete
    size_t offset, bytes;
} NvmeRequest;

typedef struct {
    struct io_uring ring;
    int ring_ok;         // ring initialised (for nvme_close)
    int fd;
    char path[4096];
    size_t bytes;        // preallocated size, a multiple of NVME_ALIGN
    int direct;          // 1: O_DIRECT, 0: buffered fallback
    int broken;          // io_uring_submit failed: only nvme_close is allowed
    int issue_inline;    // the ring's kernel workers could not start: the caller issues each SQE
    int queue_depth;
    int inflight;        // SQEs given to the ring and not reaped (submitted or not)
    int unsubmitted;     // of those, prepared but not yet passed to io_uring_submit
    size_t chunk_bytes;  // largest piece per SQE
    NvmeSlot* slots;     // queue_depth entries
    int* free_slots;     // stack of free slot indices
    int n_free_slots;
    NvmeRequest* reqs;   // grows; indices are stable
    int reqs_cap;
    int free_req;        // head of free list
    int done_head, done_tail;  // FIFO of completed requests not yet returned
    int outstanding;     // requests submitted and not yet returned by nvme_wait
    struct iovec* iov;   // registered buffers
    int n_iov;
    int iov_registered;  // 0 if a failed re-registration lost them: plain read/write then
    void*** ptr_arrays;  // arrays handed out by nvme_buffers_alloc, freed at close
    int n_ptr_arrays;
    uint32_t* sums;      // the CRC32C of each NVME_ALIGN block as last written (of zeros before)
    uint32_t zero_sum;   // that of a block of zeros, to say so in a message
    // counters
    uint64_t bytes_read, bytes_written, reads, writes, retries;
    uint64_t submit_waits;  // submissions that found every slot taken and waited for a completion
    double wait_ms;         // blocked for a completion or inside io_uring_submit
} NvmeFile;

// ----------------------------------------------------------------------------
// open / close

// The swap files this process holds, so that a failure path about to end the process
// (MPI_Abort, a signal) can remove them: nvme_remove_all only unlinks, which is safe in a
// signal handler. Registered once locked, unregistered at nvme_close.
#define NVME_MAX_LIVE 8

void nvme_remove_all(void);

// the memory of the checksums of a swap file of `bytes` (zero3/host.h counts it)
size_t nvme_sums_bytes(size_t bytes);

int nvme_open(NvmeFile* f, const char* dir, int rank, size_t bytes, int queue_depth);

// reaps everything the kernel still holds (errors ignored), then frees; remove_file unlinks
void nvme_close(NvmeFile* f, int remove_file);

// ----------------------------------------------------------------------------
// registered buffers

// A zeroed buffer of `size` bytes (a multiple of NVME_ALIGN) for O_DIRECT I/O, freed with
// free(). Huge pages where it holds whole 2 MiB blocks (see the header comment): a request
// then needs a few scatter-gather segments, not one per 4 KiB page; the tail stays 4 KiB.
// NULL when out of memory. The registered buffers come from here, and so may a caller's.
void* nvme_alloc(size_t size);

int nvme_buffers_alloc(NvmeFile* f, int count, size_t bytes_each, void*** out);

// ----------------------------------------------------------------------------
// internals: requests, SQEs, completions

// ----------------------------------------------------------------------------
// public I/O

int nvme_read_async(NvmeFile* f, void* buf, size_t offset, size_t bytes, uint64_t tag);

int nvme_write_async(NvmeFile* f, const void* buf, size_t offset, size_t bytes, uint64_t tag);

int nvme_wait(NvmeFile* f, uint64_t* tag);

// nvme_wait without waiting: 1 and *tag when a request is complete (reaping what the
// ring has), 0 when none is yet; -1 (with *tag set) for a failed request
int nvme_poll(NvmeFile* f, uint64_t* tag);

// waits for every outstanding request; -1 (with the first failure's message) if any failed
int nvme_wait_all(NvmeFile* f);

int nvme_read(NvmeFile* f, void* buf, size_t offset, size_t bytes);

int nvme_write(NvmeFile* f, const void* buf, size_t offset, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_NVME_H
