// The NVMe tier's helpers that its two files (zero3/swap.c, zero3/swap_param.c) share;
// not part of its interface (zero3/swap.h).
#ifndef ZERO3_SWAP_INTERNAL_H
#define ZERO3_SWAP_INTERNAL_H

#include "zero3/swap.h"  // ZeroSwap
#include <stdint.h>      // uint64_t: the requests' tags

// Every request on the file carries its owner in the tag's top bits, so that whichever
// wait takes its completion can record it for its owner (zero_swap_reap).
#define SWAP_TAG_GRAD ((uint64_t)1 << 60)   // the gradient's write
#define SWAP_TAG_READ ((uint64_t)2 << 60)   // a unit's read ahead: | unit
#define SWAP_TAG_STEP ((uint64_t)3 << 60)   // the step: | group * 8 + (is_write << 2) + region
#define SWAP_TAG_PUT  ((uint64_t)4 << 60)   // a parameter staging buffer's write: | buffer
#define SWAP_TAG_KIND ((uint64_t)15 << 60)

// zero3/swap.c

// Records one completion for its owner. block: waits for one; else takes one only if
// there is one (returns 0 when none, 1 when one was recorded; -1 on error).
int zero_swap_reap(ZeroSwap* s, int block);

// the byte offset in the file of element elem of region (P, M, V, G)
size_t zero_swap_offset(const ZeroSwap* s, int region, size_t elem);

// a synchronous read or write, counted
int zero_swap_io(ZeroSwap* s, int is_write, void* buf, size_t off, size_t bytes);

// waits until the step's requests of (group g, is_write) are done
int zero_swap_wait_group(ZeroSwap* s, int g, int is_write);

// zero3/swap_param.c

// starts writing the staged unit back from its buffer (in the master: keeps it for reads);
// the next unit goes to the other
int zero_swap_param_put_start(ZeroSwap* s);

// In the master (swap_param.c's note), before P is written: unit u's shard (a range, a
// shard written), or with u = -1 any of it (the master or a checkpoint loaded, a step).
// Every read ahead in flight is done first (it may share a block with the write), and
// the staging's copy of u, stale after, is forgotten. Nothing to do elsewhere.
int zero_swap_master_write_begin(ZeroSwap* s, int u);

#endif // ZERO3_SWAP_INTERNAL_H
