#!/usr/bin/env bash
# The emulated GPU trainer (build/train_gpt2_zero3_emu{,_fp32}) under other schedules: the
# out-of-order scheduler of test/emu (emu_device.h) with seeds 2 and 3 besides the seed 1
# that test/gpu/test_gpu_trainer.sh runs with. Every stage of the device engine at 2 ranks,
# CPU offload with --dpu, the host-staged backend, bf16, and a resume: each run passes the
# race checker (a race stops it), and its losses equal seed 1's bit for bit, since which
# ready operation runs first must change nothing that is computed; and two runs under the
# lazy schedule.
source "$(dirname "$0")/../e2e/lib.sh"
GPU=build/train_gpt2_zero3_emu
GPU32=build/train_gpt2_zero3_emu_fp32
SEEDS=${EMU_SEEDS:-"2 3"}
REF=$tmp/ref
mkdir -p "$REF"
$PY test/e2e/ref_gpt2.py "$REF" > "$tmp/ref.log" 2>&1 || { bad "test/e2e/ref_gpt2.py"; finish; exit 1; }
RUN="-e $REF/model.bin -i $REF/train.bin -j $REF/train.bin -b 4 -t 64 -x 4 -l 1e-3 -v 0 -s 0"

# seeded NAME SEED N BIN ARGS...: one run on N ranks under the given seed
seeded() {
    local name=$1 seed=$2 n=$3 bin=$4; shift 4
    EMU_SEED=$seed EMU_MAX_PER_CALL=${EMU_MAX_PER_CALL:-3} $MPIRUN -np "$n" -x EMU_SEED -x EMU_MAX_PER_CALL $bin "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "  ($name: exit $rc)"; grep -m6 -E "RACE|earlier|later|error|emulated" "$tmp/$name.log" | sed 's/^/    /'
    fi
    return $rc
}
# case NAME N BIN ARGS...: seed 1, then each other seed, the same losses
case_() {
    local name=$1 n=$2 bin=$3; shift 3
    seeded "$name.1" 1 "$n" "$bin" "$@" || { bad "$name: seed 1"; return; }
    losses "$tmp/$name.1.json" > "$tmp/$name.1.l"
    for s in $SEEDS; do
        if seeded "$name.$s" "$s" "$n" "$bin" "$@"; then
            losses "$tmp/$name.$s.json" > "$tmp/$name.$s.l"
            if cmp -s "$tmp/$name.1.l" "$tmp/$name.$s.l"; then ok "$name: seed $s, no race, losses = seed 1's"
            else bad "$name: seed $s changed the losses"; fi
        else
            bad "$name: seed $s"
        fi
    done
}

# (-d 1024: two micro-steps of 4 x 64 on each of the 2 ranks)
for z in 0 1 2 3; do case_ "device z$z N=2" 2 $GPU32 $RUN -z $z --zero-backend device -d 1024; done
case_ "device z3 N=1 no reuse" 1 $GPU32 $RUN -z 3 --zero-backend device --max-reuse-distance 0 --param-persistence-threshold 0
case_ "device z2 N=2 offload cpu --dpu" 2 $GPU32 $RUN -z 2 --zero-backend device --offload-optimizer cpu --dpu 1
case_ "device z3 N=1 offload cpu" 1 $GPU32 $RUN -z 3 --zero-backend device --offload-optimizer cpu
case_ "bf16 device z3 N=2" 2 $GPU $RUN -z 3 --zero-backend device
case_ "host backend z3 N=2" 2 $GPU32 $RUN -z 3 --zero-backend host
# ZeRO-Infinity on the device engine: the optimizer on NVMe with --dpu, the parameters on
# the CPU (and below, lazily, both on NVMe: the host reads and stages shards far ahead)
mkdir -p "$tmp/swap"
INF="-z 3 --zero-backend device --nvme-path $tmp/swap --param-persistence-threshold 0"
case_ "device z3 N=2 optimizer nvme --dpu, parameters cpu" 2 $GPU32 $RUN $INF --offload-optimizer nvme --offload-param cpu --dpu 1
# the lazy schedule (EMU_MAX_PER_CALL=-1: nothing runs until the host waits, so the host gets
# as far ahead as the code lets it), with accumulation: the host fills the next micro-batch's
# pinned staging buffer while the last one's upload may still be queued
export EMU_MAX_PER_CALL=-1
case_ "lazy: device z3 N=1 accumulating" 1 $GPU32 $RUN -z 3 --zero-backend device -d 1024
case_ "lazy: device z2 N=2 offload cpu --dpu" 2 $GPU32 $RUN -z 2 --zero-backend device --offload-optimizer cpu --dpu 1 -d 1024
case_ "lazy: device z3 N=2 both on NVMe" 2 $GPU32 $RUN $INF --offload-optimizer nvme --offload-param nvme --max-in-cpu 0 -d 1024
unset EMU_MAX_PER_CALL

# resume: 2 steps with a checkpoint, then the last 2 resumed, under each seed
for s in 1 $SEEDS; do
    mkdir -p "$tmp/ck$s"
    seeded "ck.$s" "$s" 2 $GPU32 $RUN -z 3 --zero-backend device -n 2 -o "$tmp/ck$s" || bad "checkpointing run, seed $s"
    rm -f "$tmp/ck$s/DONE_00000004"
    seeded "res.$s" "$s" 2 $GPU32 $RUN -z 3 --zero-backend device -n 2 -o "$tmp/ck$s" -y 1 || bad "resumed run, seed $s"
done
losses "$tmp/ck.1.json" | tail -2 > "$tmp/want"
for s in 1 $SEEDS; do
    if [ -f "$tmp/res.$s.json" ]; then
        losses "$tmp/res.$s.json" > "$tmp/got"
        cmp -s "$tmp/want" "$tmp/got" && ok "resume at step 2, seed $s: the uninterrupted losses" || bad "resume at step 2, seed $s: other losses"
    else
        bad "resume at step 2, seed $s: no report"
    fi
done
finish
