/*
 The collectives of the ZeRO engine, over MPI on host memory.

 Everything the engine sends goes through these functions, so that the MPI details
 (communicator, datatypes, chunking, error handling) stay here and an NCCL version can
 later sit behind the same names. zero3/ knows nothing about GPT-2: it moves floats.

 Communicator: zero_comm_init duplicates the communicator it is given, so the engine's
 collectives can never match a collective of the caller, and sets MPI_ERRORS_RETURN on
 the duplicate so that a failure comes back as -1 plus one zero_error line naming the
 collective and the MPI error string, instead of aborting the job.

 Blocking and nonblocking: each float collective takes a ZeroRequest*. NULL means
 blocking. Otherwise the collective is started and must be completed later with
 zero_comm_wait (or zero_comm_test until done) before its buffers are read or written.
 Rules of MPI that the caller must follow:
   - every rank starts the engine's collectives in the same order (completion may be in
     any order, and several may be outstanding at once);
   - a request must not be restarted while it is still in flight.
 The blocking variants are the nonblocking ones followed by a wait, on purpose: MPI may
 pick a different algorithm (and so a different floating-point summation order) for
 MPI_Allreduce than for MPI_Iallreduce, and the engine must get bit-identical results
 whichever variant a code path uses.

 Progress (important for overlap): Open MPI 4.1 has no asynchronous progress thread for
 host-memory nonblocking collectives. A started collective advances only while this
 rank is inside some MPI call. To overlap a prefetch with compute, call zero_comm_test
 now and then (e.g. between layers); otherwise most of the transfer happens inside
 zero_comm_wait.

 Determinism: reductions are sums of floats in an order fixed by the MPI algorithm,
 which Open MPI chooses from the world size, the count and the datatype only. The same
 inputs at the same world size therefore give bit-identical results run after run;
 a different world size may round differently.

 Large counts: MPI counts are int. Counts are split into chunks of at most
 ZERO_COMM_CHUNK elements (default 2^30; a test may #define a tiny value before the
 include to exercise the chunked path). One nonblocking all-gather, or an all-reduce
 left to MPI (below), holds at most 16 chunk requests, so its per-rank block (all-gather)
 or buffer (all-reduce) may have at most 16 * ZERO_COMM_CHUNK elements (64 GiB of floats
 by default); more is refused with an error. Chunked layouts:
   - all-reduce: plain contiguous pieces.
   - all-gather: the buffer is world blocks of `count` floats, block r belonging to rank
     r. Chunk k takes elements [k*C, k*C+n) of every block. It is described by a derived
     datatype of n contiguous floats whose extent is resized to count floats, so
     "element r" of that type starting at buf + k*C is exactly rank r's piece.
 The reductions in pieces (below) have one piece of at most ZERO_COMM_CHUNK elements a
 block in flight at a time, so no such limit.

 [Note: reduce-scatter in pieces] Open MPI's MPI_Ireduce_scatter_block (libnbc) reduces
 the whole buffer up a binomial tree to rank 0 and then scatters it: every rank mallocs
 two temporaries of the whole buffer (a whole unit) and the ranks that receive fill them
 (at 4 ranks: rank 0 two units, rank 2 one, ranks 1 and 3 none); its in-place
 MPI_Iallreduce reduces the same way through one (ranks 0 and 2 of 4). Measured on d12 at
 4 ranks, stage 3: rank 0's peak resident memory 315 MB above rank 1's, two of the 150 MiB
 embedding unit; none of it in the engine's accounting, and no MCA parameter chooses
 another algorithm. So on a flat span (one node, one rank per node, uneven nodes) the
 reduce-scatter is ours: piece k takes elements [k*n, k*n+n') of every block (the derived
 type above, n' = min(n, what is left)); an all-to-all sends each rank its piece of its
 block, into a staging buffer of world * n floats; the world parts are summed in libnbc's
 binomial order (part i += part i + d, for i a multiple of 2d, d = 1, 2, 4, ...), so every
 element is the same sum, bit for bit, as MPI_Ireduce_scatter_block's; and the next piece
 starts. An all-reduce of a multiple of the world is the same reduce-scatter in place
 (block r summed on rank r, the same binomial order as Open MPI's in-place
 MPI_Iallreduce, bit for bit) and then an all-gather in place, which needs no temporary.
 n (zero_rs_piece) keeps the staging within ZERO_COMM_PIECE_BYTES, so what a reduction
 holds besides its buffers is world * n floats, the same on every rank:
 zero_rs_stage_elems, which the caller may pass in (the host engine takes it from its
 pool and counts it; --estimate counts it with the engine's buffers) or leave to the
 comm's kept scratch. Each rank sends (world-1)/world of the buffer per reduce-scatter,
 what the byte counters below model. A reduction of several phases (pieces, the
 all-gather) is a collective in phases ([Note: phases]): its first phase starts at the
 call on `comm`, the later ones on `later`, in queue order.

 Byte counters (per rank, what a ring algorithm would send; they are a model of the
 traffic, not a measurement of what Open MPI's chosen algorithm sent):
   - all-gather of world*count floats:     (world-1) * count * 4
   - reduce-scatter of world*count floats: (world-1) * count * 4
   - all-reduce of count floats:           2 * (world-1) * count * 4 / world
   - scalars (count doubles, all-reduce):  2 * (world-1) * count * 8 / world
   - broadcast of `bytes`:                 `bytes` on every rank except the root, 0 on it
 At world 1 every count is 0 and no MPI collective is called (the trivial copy or no-op
 is done here). calls[] counts calls of this API (not chunks), blocking or not.
 wait_ms is the wall time spent inside blocking collectives (start to finish), barriers
 and zero_comm_wait; zero_comm_test never blocks and is not counted.

 Not thread-safe: one thread of the rank makes all the calls.

 Nodes (topology-aware collectives). zero_comm_init_nodes is told which node each rank is
 on (zero_comm_node: MPI's shared-memory split, or --ranks-per-node's consecutive groups)
 and classifies the communicator's span:
   - one node:          flat collectives as above; every byte counted intra-node;
   - one rank per node: every byte crosses; the reduce-scatter is in pieces as on one
                        node, so that what crosses is exactly (k-1) blocks per rank;
   - M nodes of n ranks each, ranks node-major (rank = node * n + local): hierarchical.
     All-gather: across nodes among the ranks of one local index, then inside the node
     (in place, through strided datatypes). Reduce-scatter: an all-to-all inside the node
     (each local rank gets the M blocks it will own a piece of) and a sum, then an
     all-to-all across nodes and a sum. All-reduce: the node's reduce-scatter, an
     all-reduce across nodes of 1/n of the buffer, an all-gather inside the node. So a
     rank sends (M-1)/N of a unit across nodes per gather or reduction, instead of a
     flat ring's larger share, and the phase that crosses is one a 2-node run counts
     exactly (2 ranks: every algorithm sends the same bytes).
   - anything else (uneven nodes, ranks not node-major): flat, every byte counted as
     crossing (an upper bound, named so in the report).
 Bytes are counted per link (intra, inter) and per collective kind, by the phase's
 communicator: what a phase inside a node sends is intra, what a phase between nodes
 sends is inter. The sums over ranks are what the report compares with the network.

 Quantised variants (ZeRO++): zero_allgather_q sends each rank's block as int8 with a
 scale per 256 elements (zero3/quant.h) and dequantises every block, this rank's too, so
 every rank holds the same values; zero_reduce_scatter_q quantises each block before each
 all-to-all hop and sums the dequantised blocks in fp32 (the hops above, or one hop on one
 node).

 [Note: phases] A collective of several phases cannot be one MPI call: its second phase
 starts when its first is over, inside some later zero_comm_test or zero_comm_wait. MPI
 matches collectives on a communicator by the order they are started in, so every rank
 must start the later phases in the same order. Rule kept here: a first phase starts at
 the call, on communicators reserved for first phases; later phases start only for the
 oldest multi-phase collective still running (the comm's queue head), on communicators
 reserved for later phases (a flat span's pieces: `later`, a duplicate of `comm`). The
 queue is in call order, the same on every rank, so the later phases start in the same
 order everywhere. Every wait of this comm polls the queue while it waits, so a rank
 blocked here still starts the phases the others wait on.
*/
#ifndef ZERO3_COMM_H
#define ZERO3_COMM_H

#include <stddef.h>   // size_t
#include <limits.h>   // INT_MAX: the bound of an MPI count
#include <mpi.h>      // MPI_Comm, MPI_Request, the collectives, MPI_Wtime

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ZERO_COMM_CHUNK
#define ZERO_COMM_CHUNK ((size_t)1 << 30)  // elements per MPI call, must be 1..INT_MAX
#endif
#ifndef ZERO_COMM_PIECE_BYTES
#define ZERO_COMM_PIECE_BYTES ((size_t)16 << 20)  // a flat reduce-scatter's staging at most ([Note: reduce-scatter in pieces])
#endif

#define ZERO_COMM_MAX_REQS 16  // the size of ZeroRequest.reqs

enum { ZERO_ALLGATHER, ZERO_REDUCE_SCATTER, ZERO_ALLREDUCE, ZERO_BROADCAST, ZERO_SCALAR, ZERO_NUM_COLLECTIVES };

enum { ZERO_LINK_INTRA, ZERO_LINK_INTER, ZERO_NUM_LINKS };
// how a communicator's ranks lie on the nodes (see "Nodes" above)
enum { ZERO_SPAN_NODE, ZERO_SPAN_CROSS, ZERO_SPAN_HIER, ZERO_SPAN_UNEVEN };
// the sub-communicators of a hierarchical span: first phases and later phases apart
enum { ZERO_SUB_NODE_FIRST, ZERO_SUB_NODE_LATER, ZERO_SUB_CROSS_FIRST, ZERO_SUB_CROSS_LATER, ZERO_NUM_SUBS };
// what a request runs: one MPI call (plain), or phases
enum { ZERO_OP_PLAIN, ZERO_OP_AG, ZERO_OP_RS, ZERO_OP_AR };

typedef struct ZeroRequest ZeroRequest;

typedef struct {
    MPI_Comm comm;        // a duplicate of the communicator given at init (so the engine's traffic never mixes with the caller's)
    int rank, world;
    int span;             // ZERO_SPAN_*
    int nodes, per_node;  // M nodes; n ranks on each (hierarchical span; 1 and world otherwise)
    int node, local;      // this rank's node index (0..M-1) and index on it
    MPI_Comm sub[ZERO_NUM_SUBS];  // hierarchical span: inside the node and across nodes, first and later phases
    MPI_Comm later;       // flat spans: a duplicate of comm for a reduce-scatter's later pieces ([Note: phases])
    double bytes[ZERO_NUM_COLLECTIVES];   // cumulative bytes per collective kind, counted as above
    double link_bytes[ZERO_NUM_LINKS][ZERO_NUM_COLLECTIVES];  // the same, split: inside a node, between nodes
    long calls[ZERO_NUM_COLLECTIVES];
    double wait_ms;       // cumulative wall time spent blocked in zero_comm_wait and in blocking collectives
    double scratch_bytes, scratch_peak;  // the multi-phase collectives' staging buffers, held (live or kept) and at most
    struct { void* p; size_t bytes; } keep[4];  // staging buffers kept for the next collectives: no malloc, no page faults per call
    ZeroRequest* head;    // [Note: phases] the multi-phase collectives running, oldest first
    ZeroRequest* tail;
} ZeroComm;

// one nonblocking collective (possibly chunked, or in phases); unit: the unit it moves,
// for the watchdog's message (set by the request's owner; -1 for a blocking call's)
struct ZeroRequest {
    MPI_Request reqs[16]; int n; int kind; int unit;
    // a collective in phases (op != ZERO_OP_PLAIN): live until its last phase is over
    int op, live, phase, nphases, quant;
    float* buf;            // all-gather, all-reduce: the caller's buffer
    const float* send;     // reduce-scatter: the caller's input (world blocks)
    float* out;            // reduce-scatter: the caller's output (one block)
    size_t count;          // elements per rank block (all-reduce: the whole buffer)
    size_t piece;          // a reduce-scatter in pieces: elements of each block per piece (phase); 0 otherwise
    size_t qb;             // quantised: bytes of one rank block
    float* f;              // fp32 scratch (owned while live, unless the caller's: then fbytes is 0)
    unsigned char* q;      // byte scratch (owned while live)
    size_t scratch;        // bytes of f and q together, owned
    size_t fbytes;         // bytes of f, owned
    ZeroRequest* next;     // the comm's queue
};

// ----------------------------------------------------------------------------
// internals

// names for messages
const char* zero_comm_kind_name(int kind);

// records "<what> failed: <MPI error string>" and returns -1
int zero_comm_mpi_error(const char* what, int code);

// number of chunks for `count` elements (per rank block for all-gather and
// reduce-scatter), or -1 (with the message) when they do not fit
// in one ZeroRequest
#ifdef __cplusplus
#define ZERO_STATIC_ASSERT static_assert   // the header is also compiled as C++ (the GPU trainer)
#else
#define ZERO_STATIC_ASSERT _Static_assert
#endif

// the blocking variants: wait for a request started on the caller's behalf, timing the
// whole call from `t0`

// ----------------------------------------------------------------------------
// setup

int zero_comm_init(ZeroComm* c, MPI_Comm comm);

  // below

// The node this rank is on, as a number every rank of the node shares: with
// ranks_per_node > 0, consecutive groups of that many ranks of `comm` (a test's stand-in
// for nodes on one machine); otherwise the lowest rank of `comm` that shares memory with
// this one (MPI_COMM_TYPE_SHARED: Open MPI's notion of a node). Collective over comm.
int zero_comm_node(MPI_Comm comm, int ranks_per_node, int* node);

// How the ranks of `comm` lie on the nodes, from `node` (zero_comm_node's number; ranks
// of one node give the same): one node, one rank per node, M nodes of n ranks node-major
// (rank = node * n + local), or uneven. One all-gather of ints over comm.
typedef struct { int span, nodes, per_node, node, local; } ZeroSpan;
void zero_span_set(ZeroSpan* s, int span, int nodes, int per_node, int node, int local);
int zero_comm_span(MPI_Comm comm, int node, ZeroSpan* out);

// zero_comm_init, then the span of the communicator over the nodes (zero_comm_span) and,
// for a hierarchical one, its sub-communicators. Collective over comm.
int zero_comm_init_nodes(ZeroComm* c, MPI_Comm comm, int node);

// frees the duplicate communicator; safe on a zeroed or already freed ZeroComm, and
// after MPI_Finalize (then there is nothing left to free)
void zero_comm_free(ZeroComm* c);

// ----------------------------------------------------------------------------
// byte counters and the phases of the topology-aware and quantised collectives

// the staging (floats) of a reduce-scatter of world blocks of `count` on a flat span: what
// it holds besides its input and output, the same on every rank (0 at one rank: a copy)
size_t zero_rs_stage_elems(int world, size_t count);

// the staging zero_reduce_scatter takes from its caller on this comm (0: none; a
// hierarchical span's hops stage their own)
size_t zero_comm_rs_stage(const ZeroComm* c, size_t count);

// sets up a collective in phases (of pieces, with r->piece set) and starts its first;
// `given`: the caller's fp32 staging, or NULL for fbytes of the comm's scratch

// ----------------------------------------------------------------------------
// float collectives

int zero_allgather(ZeroComm* c, float* buf, size_t count, ZeroRequest* req);

// world blocks of `count` floats in `send` (block r for rank r), summed over the ranks
// into this rank's `recv` (count floats). On a flat span in pieces ([Note: reduce-scatter
// in pieces]) through `stage`, zero_comm_rs_stage(c, count) floats of the caller's that
// it holds until the collective completes, or NULL: the comm's own scratch; a
// hierarchical span stages its own hops and takes none.
int zero_reduce_scatter(ZeroComm* c, const float* send, float* recv, size_t count, float* stage, ZeroRequest* req);

// `count` floats in `buf` summed over the ranks, in place. On a flat span with `count` a
// multiple of the world, the reduce-scatter in pieces ([Note: reduce-scatter in pieces]:
// `stage` as there; each rank sums block `rank`, in the binomial order of Open MPI's
// in-place MPI_Iallreduce, bit for bit) and an all-gather of the blocks in place; a
// hierarchical span's phases ("Nodes"); otherwise MPI's own all-reduce, which holds a
// temporary of the buffer on the ranks that receive (Open MPI: ranks 0 and 2 of 4).
int zero_allreduce(ZeroComm* c, float* buf, size_t count, float* stage, ZeroRequest* req);

// The quantised all-gather (qwZ): buf as zero_allgather's, world blocks of `count`
// floats with this rank's block filled; every block, this rank's too, comes back
// dequantised from int8 (zero3/quant.h), so all ranks hold the same values.
int zero_allgather_q(ZeroComm* c, float* buf, size_t count, ZeroRequest* req);

// The quantised reduce-scatter (qgZ): as zero_reduce_scatter, each hop's blocks sent as
// int8 and summed in fp32 after dequantising (hierarchical: inside the node, then across).
int zero_reduce_scatter_q(ZeroComm* c, const float* send, float* recv, size_t count, ZeroRequest* req);

// ----------------------------------------------------------------------------
// blocking helpers

int zero_allreduce_scalars(ZeroComm* c, double* buf, int count);

// pieces of ZERO_COMM_CHUNK bytes (MPI_BYTE counts are int too)
int zero_broadcast(ZeroComm* c, void* buf, size_t bytes, int root);

int zero_barrier(ZeroComm* c);

// ----------------------------------------------------------------------------
// completion of nonblocking collectives

// *done = 1 when the request has completed (then it is empty, and a wait is a no-op).
// Gives the queue of multi-phase collectives a turn too ([Note: phases]).
int zero_comm_test(ZeroComm* c, ZeroRequest* req, int* done);

int zero_comm_wait(ZeroComm* c, ZeroRequest* req);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_COMM_H
