#!/usr/bin/env bash
# The device engine (zero3/device.cuh) on the CPU, through test/emu (see
# test/emu/test_device_emu.cc): every stage at 1-4 ranks against a plain fp32 reference, with
# gradient accumulation, stage 3's prefetch / persistence / live budget, CPU offload,
# --dpu and resume. Each run checks its fetches, norms, reductions per step, the reduced
# gradients and the gathered master, and runs under the emulator's out-of-order scheduler and
# race checker on three seeds. The bf16 build: the gradients reduced in fp32 equal the exact
# sum over 3 and 4 ranks bit for bit (--communication-data-type fp32), in bf16 within bf16's
# rounding at each hop. Beyond one node: MiCS, hpZ, qwZ and qgZ on "nodes" of consecutive
# ranks (-R), within bounds from the int8 blocks' error, their traffic checked by link.
source "$(dirname "$0")/../e2e/lib.sh"
EMU=./build/test_device_emu
EMU16=./build/test_device_emu_bf16
# the scheduler's seeds (test/emu/emu_device.h), each run under each; "lazy": the GPU runs
# nothing until the host waits (EMU_MAX_PER_CALL=-1), the host as far ahead as it can get
SEEDS=${EMU_SEEDS:-"1 2 3 lazy"}

emu() {  # emu N ARGS...: one run on N ranks, once per seed (the bf16 build with EMU_BIN=$EMU16)
    local n=$1; shift
    local bin=${EMU_BIN:-$EMU}
    for seed in $SEEDS; do
        local name="ranks $n seed $seed: $*"; [ "$bin" = "$EMU" ] || name="bf16, $name"
        local per_call=3; [ "$seed" = lazy ] && per_call=-1
        if EMU_SEED=${seed/lazy/4} EMU_MAX_PER_CALL=$per_call $MPIRUN -np "$n" -x EMU_SEED -x EMU_MAX_PER_CALL $bin "$@" \
               > "$tmp/emu.log" 2>&1 && grep -q '^ok:' "$tmp/emu.log"; then
            ok "$name"
        else
            bad "$name"
            grep -E 'FAIL|ERROR|error|RACE|earlier|later|emulated' "$tmp/emu.log" | head -6 | sed 's/^/  /'
        fi
    done
}

# the emulated NCCL itself: bf16 sums rounded at every hop of the ring, as on a GPU; int8,
# grouped sends and receives, ncclCommSplit, zero3/nccl.cuh's all-to-all (test_nccl_emu.cc)
for n in 3 4; do
    if EMU_SEED=1 $MPIRUN -np "$n" -x EMU_SEED ./build/test_nccl_emu > "$tmp/nccl.log" 2>&1 && grep -q '^ok:' "$tmp/nccl.log"; then
        ok "emulated NCCL at $n ranks: bf16 per hop of the ring, fp32 exact, int8, send/recv groups, split, all-to-all"
    else
        bad "emulated NCCL at $n ranks"; grep FAIL "$tmp/nccl.log" | head -4 | sed 's/^/  /'
    fi
done
for n in 1 2 3 4; do
    for z in 0 1 2 3; do emu "$n" -z "$z" -a 2; done
done
# stage 3: every unit gathered (persistence 0), without and with deep prefetch, a live
# budget that stops the prefetch, no clipping
emu 3 -z 3 -t 0 -f 0
emu 3 -z 3 -t 0 -f 3 -c 0
emu 2 -z 3 -t 0 -f 3 -l 3000
# no synchronisation by the host between steps: the engine's events alone order them
emu 2 -z 3 -t 0 -f 3 -k 0 -n 3
emu 2 -z 1 -k 0 -n 3
# CPU offload, with and without the delayed update, at one and three ranks
for n in 1 3; do
    for z in 1 2 3; do
        emu "$n" -z "$z" -o 1 -a 2 -n 4
        emu "$n" -z "$z" -o 1 -p 1 -n 4
    done
done
# parameter offload (stage 3, -o 2): the shards uploaded at every gather, the gradient
# shards added on the host; every unit gathered, no host synchronisation between steps,
# accumulation, --dpu, a resume, and the bf16 build's reductions in fp32 and in bf16
emu 3 -z 3 -o 2 -t 0 -a 2 -n 4
emu 2 -z 3 -o 2 -t 0 -f 3 -k 0 -n 3
emu 3 -z 3 -o 2 -p 1 -n 5 -r 2
for m in fp32 bf16; do EMU_BIN=$EMU16 emu 3 -z 3 -o 2 -t 0 -a 2 -m "$m"; done
# and both on NVMe (-o 3: the optimizer's regions and every parameter shard in the swap
# files, under $tmp): accumulation, no host synchronisation, a resume
TMPDIR=$tmp emu 3 -z 3 -o 3 -t 0 -a 2 -n 4
TMPDIR=$tmp emu 2 -z 3 -o 3 -t 0 -f 3 -k 0 -n 3
TMPDIR=$tmp emu 3 -z 3 -o 3 -n 4 -r 2
TMPDIR=$tmp emu 2 -z 3 -o 3 -t 0 -f 3 -L 8 -n 2   # 10 units: the pinned read buffers reused inside a pass
# offload_param.buffer_count: 3 buffers, no window ahead (the reads run 2 units ahead), and
# 1 (no read ahead: every gather reads its shard then); at the first seed and with the
# host as far ahead as it gets, where reused buffers would race
SEEDS="1 lazy" TMPDIR=$tmp emu 2 -z 3 -o 3 -t 0 -f 0 -L 8 -B 3 -n 2
SEEDS="1 lazy" TMPDIR=$tmp emu 2 -z 3 -o 3 -t 0 -f 0 -L 8 -B 1 -n 2
# and in bf16: the bf16 shards widened as they are added into the swap file, the sums
# there against the exact ones (and shown inexact: bf16 reductions)
EMU_BIN=$EMU16 SEEDS="1 lazy" TMPDIR=$tmp emu 2 -z 3 -o 3 -t 0 -a 2 -n 3
# the optimizer on NVMe with --dpu (-o 4: the parameters on the CPU), and across a resume
TMPDIR=$tmp emu 3 -z 3 -o 4 -p 1 -t 0 -n 4
TMPDIR=$tmp emu 2 -z 3 -o 4 -p 1 -n 5 -r 2
# resume: the state a checkpoint holds, read into a new engine after 2 of 4 steps (the
# pending --dpu update applied first, as a checkpoint does)
for z in 0 1 2 3; do emu 2 -z "$z" -n 4 -r 2 -t 0; done
emu 3 -z 3 -n 4 -r 2
emu 3 -z 2 -o 1 -n 4 -r 2
emu 3 -z 3 -o 1 -p 1 -n 5 -r 2
# bf16 gradients reduced in fp32 (exact) and in bf16 (rounded) at 3 and 4 ranks, every stage;
# stage 1's fp32 shards through the CPU Adam (offload, with and without --dpu)
for n in 3 4; do
    for z in 0 1 2 3; do
        for m in fp32 bf16; do EMU_BIN=$EMU16 emu "$n" -z "$z" -a 2 -m "$m"; done
    done
done
# beyond one node (stage 3), 2 "nodes" of 2 ranks (-R 2): MiCS with a group a node (only the
# replicas' all-reduce crosses), also without the host's synchronisation; hpZ inside the node;
# qwZ and qgZ's two hops, with hpZ, and across a resume (the slices made stale by the load);
# MiCS with both; one rank per node (qgZ's one hop, all across); the bf16 build with all three
emu 4 -z 3 -R 2 -M 2 -a 2
emu 4 -z 3 -R 2 -M 2 -n 3 -k 0
emu 4 -z 3 -R 2 -H 2 -a 2
emu 4 -z 3 -R 2 -W 1 -G 1 -a 2
emu 4 -z 3 -R 2 -H 2 -W 1 -G 1 -n 4 -r 2
emu 4 -z 3 -R 2 -M 2 -W 1 -G 1
emu 3 -z 3 -R 1 -W 1 -G 1
EMU_BIN=$EMU16 emu 4 -z 3 -R 2 -H 2 -W 1 -G 1 -a 2
EMU_BIN=$EMU16 emu 3 -z 1 -o 1 -n 4 -m fp32
EMU_BIN=$EMU16 emu 3 -z 1 -o 1 -p 1 -n 4 -m fp32
EMU_BIN=$EMU16 emu 2 -z 2 -o 1 -n 4 -r 2 -m fp32
finish
