// zero3/swap_param.c: the swap file's parameter region, or the parameters in the master
// (the interface and its notes: zero3/swap.h; the rest of the module: zero3/swap.c)
#include "zero3/swap.h"           // first: _GNU_SOURCE; this module's types and prototypes
#include "zero3/swap_internal.h"  // the helpers swap.c and swap_param.c share, the requests' tags
#include <string.h>               // memset, memcpy, memmove
#include "zero3/util.h"           // zero_error

static int zero_swap_stage_settle(ZeroSwap* s, int i);

// [Note: the parameters in the master]
// Where the compute copy is the fp32 master (the host engine with the optimizer and the
// parameters on NVMe), a parameter region would get the same bytes as P from every step.
// Instead a unit's shard is read from P, at its shard-buffer offset: a read covers the
// 4 KiB blocks the shard touches, and the shard starts `skew` bytes into them. The step's
// writes of P are then the parameters' writes, and its staging of a unit (ZeroSwapOut)
// only a copy that serves the next reads of a unit just updated. The invariant: a read of
// u's blocks never overlaps a write of them (the file's checksums would refuse it), and
// during a step sees u updated. Every group holding one of u's blocks holds some of u,
// so once u is carried through, no later write of the step touches its blocks: a read
// waits for those groups' writes (zero_swap_master_quiet) and is refused before them.
// Before any other write of P, and before a step, zero_swap_master_write_begin waits for
// the reads ahead in flight and forgets the staging's copy the write makes stale.

int zero_swap_param_on_nvme(const ZeroSwap* s, int u) { return s->param_off != NULL && s->param_off[u] != (size_t)-1; }

size_t zero_swap_param_skew(const ZeroSwap* s, int u) {
    return s->in_master && zero_swap_param_on_nvme(s, u) ? s->param_off[u] % NVME_ALIGN : 0;
}

size_t zero_swap_param_bytes(const ZeroSwap* s, int u) {
    return zero_swap_align(zero_swap_param_skew(s, u) + s->plan->units[u].shard * s->param_elem);
}

// the file offset a read of unit u's shard starts at: its first 4 KiB block
static size_t zero_swap_param_at(const ZeroSwap* s, int u) { return s->param_off[u] - zero_swap_param_skew(s, u); }

// In the master (the note above), during a step: whether the groups holding u's blocks
// are updated (refused if not: a read now would miss u's update, or even its staging's
// first part), and with wait, their writes done, so that a read of the blocks sees them.
static int zero_swap_master_quiet(ZeroSwap* s, int u, int wait) {
    if (!s->in_master || !s->run.on) { return 0; }
    size_t a = zero_swap_param_at(s, u), b = a + zero_swap_param_bytes(s, u);  // (P starts the file)
    int g0 = (int)(a / sizeof(float) / s->group), g1 = (int)((b / sizeof(float) - 1) / s->group);
    g1 = g1 < s->run.ngroups ? g1 : s->run.ngroups - 1;
    for (int g = g0; g <= g1; g++) {
        if (!s->run.done[g]) { return zero_error("zero swap: unit %d read from the master before the step carried it through", u); }
        if (wait && zero_swap_wait_group(s, g, 1) != 0) { return -1; }
    }
    return 0;
}

int zero_swap_master_write_begin(ZeroSwap* s, int u) {
    for (int w = 0; s->in_master && w < s->plan->num_units; w++) {
        while (s->reading[w] == 1) {  // (a read ahead of w may share a block with u's)
            if (zero_swap_reap(s, 1) < 0) { return -1; }
        }
    }
    for (int i = 0; i < 2 && s->in_master; i++) {
        if (u < 0 || s->stage_holds[i] == u) { s->stage_holds[i] = -1; }
    }
    return 0;
}

// unit u is in the parameter region (else a zero_error line)
static int zero_swap_param_check(const ZeroSwap* s, int u) {
    if (u < 0 || u >= s->plan->num_units || !zero_swap_param_on_nvme(s, u)) { return zero_error("zero swap: unit %d's shard is not on NVMe", u); }
    return 0;
}

// the staging buffer that holds unit u's current shard (written back or being so), or -1
static int zero_swap_stage_holding(const ZeroSwap* s, int u) {
    return s->stage_holds[0] == u ? 0 : s->stage_holds[1] == u ? 1 : -1;
}

int zero_swap_param_read_start(ZeroSwap* s, int u, void* buf) {
    if (zero_swap_param_check(s, u) != 0) { return -1; }
    if (s->reading[u]) { return zero_error("zero swap: unit %d is already being read ahead", u); }
    size_t bytes = zero_swap_param_bytes(s, u);
    int held = zero_swap_stage_holding(s, u);
    if (zero_swap_master_quiet(s, u, held < 0) != 0) { return -1; }
    if (held >= 0) {  // just updated (a deferred step runs just ahead of the reads): no disk read
        memcpy((char*)buf + zero_swap_param_skew(s, u), s->param_stage[held], s->plan->units[u].shard * s->param_elem);
        s->reading[u] = 2;
        s->c.stage_hit_bytes += (double)bytes;
        return 0;
    }
    // (a read must not overlap a write of its blocks: the step's last writes are done)
    if (zero_swap_stage_settle(s, 0) != 0 || zero_swap_stage_settle(s, 1) != 0) { return -1; }
    if (nvme_read_async(&s->nvme, buf, zero_swap_param_at(s, u), bytes, SWAP_TAG_READ | (uint64_t)u) != 0) { return -1; }
    s->reading[u] = 1;
    s->c.read_bytes += (double)bytes;
    return 0;
}

int zero_swap_param_read_test(ZeroSwap* s, int u) {
    if (zero_swap_param_check(s, u) != 0) { return -1; }
    if (!s->reading[u]) { return zero_error("zero swap: unit %d is not being read ahead", u); }
    for (int rc = 1; s->reading[u] == 1 && rc == 1;) {
        if ((rc = zero_swap_reap(s, 0)) < 0) { return -1; }
    }
    return s->reading[u] == 2;
}

int zero_swap_param_wait(ZeroSwap* s, int u) {
    if (zero_swap_param_check(s, u) != 0) { return -1; }
    if (!s->reading[u]) { return zero_error("zero swap: unit %d is not being read ahead", u); }
    while (s->reading[u] == 1) {
        if (zero_swap_reap(s, 1) < 0) { s->reading[u] = 0; return -1; }
    }
    s->reading[u] = 0;
    return 0;
}

// a read ahead of u still in flight is done before u's shard is touched again
static int zero_swap_param_quiet(ZeroSwap* s, int u) { return s->reading[u] ? zero_swap_param_wait(s, u) : 0; }

// starts writing the staged unit back from its buffer (in the master: keeps it for its
// reads); the next unit goes to the other
int zero_swap_param_put_start(ZeroSwap* s) {
    int u = s->staged_unit, i = s->stage_cur;
    size_t bytes = zero_swap_param_bytes(s, u);
    s->staged_unit = -1;
    if (s->in_master) {  // P has it (the note): the staging serves u's reads, if it holds all of u
        s->stage_holds[i] = s->stage_part ? -1 : u;
        s->stage_cur = 1 - i;
        return 0;
    }
    if (nvme_write_async(&s->nvme, s->param_stage[i], s->param_off[u], bytes, SWAP_TAG_PUT | (uint64_t)i) != 0) { return -1; }
    s->stage_writing[i] = 1;
    s->stage_holds[i] = u;
    s->c.write_bytes += (double)bytes;
    s->stage_cur = 1 - i;
    return 0;
}

// staging buffer i's write, if one is in flight, is done
static int zero_swap_stage_settle(ZeroSwap* s, int i) {
    while (s->stage_writing[i]) {
        if (zero_swap_reap(s, 1) < 0) { s->stage_writing[i] = 0; return -1; }
    }
    return 0;
}

int zero_swap_param_flush(ZeroSwap* s) {
    if (!s->is_open) { return 0; }
    if (s->staged_unit >= 0 && zero_swap_param_put_start(s) != 0) { return -1; }
    return zero_swap_stage_settle(s, 0) != 0 || zero_swap_stage_settle(s, 1) != 0 ? -1 : 0;
}

void* zero_swap_param_out(ZeroSwap* s, int u) {
    if (zero_swap_param_check(s, u) != 0) { return NULL; }
    if (s->staged_unit != u) {
        if (s->staged_unit >= 0 && zero_swap_param_put_start(s) != 0) { return NULL; }
        if (zero_swap_stage_settle(s, s->stage_cur) != 0 || zero_swap_param_quiet(s, u) != 0) { return NULL; }
        char* stage = s->param_stage[s->stage_cur];
        s->stage_holds[s->stage_cur] = -1;  // (about to be refilled)
        if (s->stage_holds[1 - s->stage_cur] == u) { s->stage_holds[1 - s->stage_cur] = -1; }  // (about to be stale)
        s->stage_part = s->in_master && s->run.on && s->staged_once[u];  // (no read back: P has the part)
        if (s->run.on && s->staged_once[u] && !s->in_master) {
            // a step in an order that splits u (zero_swap_step_begin's `first`): the groups
            // done so far wrote their part, which the rest of u's update goes on from (its
            // write, perhaps still in flight from the other buffer, is done first)
            if (zero_swap_stage_settle(s, 1 - s->stage_cur) != 0 ||
                zero_swap_io(s, 0, stage, s->param_off[u], zero_swap_param_bytes(s, u)) != 0) { return NULL; }
        } else {
            memset(stage, 0, s->param_stage_bytes);
        }
        s->staged_unit = u;
        if (s->run.on) { s->staged_once[u] = 1; }
    }
    return s->param_stage[s->stage_cur];
}

int zero_swap_param_read(ZeroSwap* s, int u, void* dst, size_t n) {
    if (zero_swap_param_check(s, u) != 0) { return -1; }
    if (n > s->plan->units[u].shard) { return zero_error("zero swap: %zu elements asked of unit %d's shard", n, u); }
    if (zero_swap_param_quiet(s, u) != 0) { return -1; }
    int held = zero_swap_stage_holding(s, u);
    if (zero_swap_master_quiet(s, u, held < 0) != 0) { return -1; }
    if (held >= 0) {  // no disk read: a staging buffer holds it
        memcpy(dst, s->param_stage[held], n * s->param_elem);
        s->c.stage_hit_bytes += (double)zero_swap_param_bytes(s, u);
        return 0;
    }
    // Through a staging buffer: with a unit staged by a step still in progress, the other
    // one, once its write is done (the staged unit is not whole yet: it must not be
    // written back now); else the current one, once what it holds is in the file.
    int i = s->staged_unit >= 0 ? 1 - s->stage_cur : s->stage_cur;
    if (s->staged_unit >= 0 ? zero_swap_stage_settle(s, i) != 0 : zero_swap_param_flush(s) != 0) { return -1; }
    char* stage = s->param_stage[i];
    size_t skew = zero_swap_param_skew(s, u);
    s->stage_holds[i] = -1;  // (refilled)
    if (zero_swap_io(s, 0, stage, zero_swap_param_at(s, u), zero_swap_param_bytes(s, u)) != 0) { return -1; }
    if (skew > 0) { memmove(stage, stage + skew, s->plan->units[u].shard * s->param_elem); }  // (held from the start, as staged)
    s->stage_holds[i] = u;
    memcpy(dst, stage, n * s->param_elem);
    return 0;
}

int zero_swap_param_write(ZeroSwap* s, int u, const void* src) {
    if (s->in_master) {  // a range of P (the note)
        if (zero_swap_param_check(s, u) != 0) { return -1; }
        if (s->run.on) { return zero_error("zero swap: unit %d's shard written while a step is in progress", u); }
        return zero_swap_state_write(s, ZERO_SWAP_P, u, 0, s->plan->units[u].shard, (const float*)src);
    }
    char* out = (char*)zero_swap_param_out(s, u);
    if (out == NULL) { return -1; }
    memcpy(out, src, s->plan->units[u].shard * s->param_elem);
    return zero_swap_param_flush(s);
}
