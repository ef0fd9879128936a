#!/usr/bin/env bash
# dev/ab_matrix.sh OLD NEW: the same runs with two builds of the trainers, compared field by
# field. For a refactor that must change no number (issue 25's "bit-identical before and
# after"): every loss, gradient norm, learning rate, validation loss, byte count and memory
# figure of each run's --report, and its main.log, must be equal; only timings may differ.
#
# OLD and NEW are checkouts where the binaries are built: ./train_gpt2_zero3_cpu, and for the
# GPU rows build/train_gpt2_zero3_emu and build/train_gpt2_zero3_emu_fp32 (make those targets;
# rows whose binary is missing in either are reported as not run, never as equal).
#   ROWS=cpu|gpu|all (default all)    ONLY=REGEX: the rows whose name matches
#   KEEP=1: leave the runs' directory
# Prints one line per row (SAME, DIFF with the first differing fields, or FAILED) and
# "N same, N different"; exits 1 when any row differs or failed.
set -u
OLD=$(cd "${1:?usage: dev/ab_matrix.sh OLD_CHECKOUT NEW_CHECKOUT}" && pwd)
NEW=$(cd "${2:?usage: dev/ab_matrix.sh OLD_CHECKOUT NEW_CHECKOUT}" && pwd)
ROWS=${ROWS:-all}
PY=${PY:-python3}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
DATA=$(cd "$(dirname "$0")/.." && pwd)/dev/data/tinyshakespeare
tmp=$(mktemp -d /tmp/ab_matrix.XXXXXX)
[ "${KEEP:-0}" = 1 ] && echo "runs in $tmp" || trap 'rm -rf "$tmp"' EXIT
same=0; diff=0; notrun=0

# the deterministic fields of a report (timings, rates, the kernel's RSS and I/O counters out),
# then main.log, as one normalized text
digest() {
    $PY - "$1" "$2" "$3" <<'EOF'
import json, re, sys
timing = re.compile(r'(^|_)(ms|s)(_|$)|tokens_per_s|peak_rss|^kernel$|mfu|time|elapsed')
def walk(x, path):
    if isinstance(x, dict):
        for k in sorted(x):
            if not timing.search(k):
                walk(x[k], path + "." + k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            walk(v, "%s[%d]" % (path, i))
    else:
        print("%s = %r" % (path, x.replace(sys.argv[3], "@OUT") if isinstance(x, str) else x))
walk(json.load(open(sys.argv[1])), "report")  # (argv[3]: the run's directory, named @OUT)
try:
    for line in open(sys.argv[2]):
        print("main.log: " + line.rstrip().replace(sys.argv[3], "@OUT"))
except FileNotFoundError:
    print("main.log: (none)")
EOF
}

# row NAME N BIN ARGS...: the run with both builds (each in its own output directory; a
# "@OUT" in ARGS is that directory), then the comparison
row() {
    local name=$1 n=$2 bin=$3; shift 3
    [[ "$name" =~ ${ONLY:-.} ]] || return 0
    if [ ! -x "$OLD/$bin" ] || [ ! -x "$NEW/$bin" ]; then
        echo "NOT RUN $name ($bin missing in a checkout)"; notrun=$((notrun + 1)); return
    fi
    local side rc=0
    for side in old new; do
        local root=$OLD; [ $side = new ] && root=$NEW
        local out=$tmp/$name.$side; mkdir -p "$out"
        local args=("${@//@OUT/$out}")
        (cd "$root" && $MPIRUN -np "$n" "./$bin" "${args[@]}" --report "$out/report.json") > "$out/stdout" 2>&1 || rc=1
    done
    if [ $rc -ne 0 ]; then
        echo "FAILED $name ($(grep -h -m1 -i error "$tmp/$name".*/stdout | head -1))"; diff=$((diff + 1)); return
    fi
    for side in old new; do
        if ! digest "$tmp/$name.$side/report.json" "$tmp/$name.$side/o/main.log" "$tmp/$name.$side" > "$tmp/$name.$side.txt"; then
            echo "FAILED $name (the $side report could not be read)"; diff=$((diff + 1)); return
        fi
    done
    if cmp -s "$tmp/$name.old.txt" "$tmp/$name.new.txt"; then
        echo "SAME    $name ($(wc -l < "$tmp/$name.new.txt") fields)"; same=$((same + 1))
    else
        echo "DIFF    $name: $(diff "$tmp/$name.old.txt" "$tmp/$name.new.txt" | grep '^[<>]' | head -4 | tr '\n' ' ')"
        diff=$((diff + 1))
    fi
}

T="-i $DATA/tiny_shakespeare_train.bin -j $DATA/tiny_shakespeare_val.bin -e d2 -b 2 -t 32 -x 4 -v 2 -m 2 -s 0 -c 0.1 -o @OUT/o"
CPU=train_gpt2_zero3_cpu
if [ "$ROWS" != gpu ]; then
    for n in 1 2 3 4; do
        for z in 0 1 2 3; do row "cpu_z${z}_n$n" $n $CPU $T -z $z; done
    done
    row cpu_off_cpu     2 $CPU $T -z 3 --offload-optimizer cpu
    row cpu_off_nvme    2 $CPU $T -z 3 --offload-optimizer nvme --nvme-path @OUT --sub-group-size 100000
    row cpu_param_cpu   2 $CPU $T -z 3 --offload-optimizer cpu --offload-param cpu
    row cpu_param_nvme  3 $CPU $T -z 3 --offload-optimizer nvme --offload-param nvme --nvme-path @OUT --max-in-cpu 100000
    row cpu_z2_off_cpu  3 $CPU $T -z 2 --offload-optimizer cpu
    row cpu_mics        4 $CPU $T -z 3 --mics-shard-size 2 --ranks-per-node 2
    row cpu_zpp         4 $CPU $T -z 3 --ranks-per-node 2 --zero-hpz-partition-size 2 --zero-quantized-weights 1 --zero-quantized-gradients 1
    row cpu_accum       2 $CPU $T -z 3 -d 256
    # resume across world size and stage: saved at stage 1 on 2 ranks, resumed at stage 3 on 4
    # (-b 1: the same 4 sequences per step)
    row cpu_save        2 $CPU $T -z 1 -x 2 -n 2
    if [ -d "$tmp/cpu_save.old/o" ] && [ -d "$tmp/cpu_save.new/o" ]; then
        # the resumed run's -o is a copy of the directory its own build saved
        for side in old new; do mkdir -p "$tmp/cpu_resume.$side"; cp -r "$tmp/cpu_save.$side/o" "$tmp/cpu_resume.$side/o"; done
        R="-i $DATA/tiny_shakespeare_train.bin -j $DATA/tiny_shakespeare_val.bin -e d2 -b 2 -t 32 -x 4 -v 2 -m 2 -s 0 -c 0.1 -o @OUT/o -y 1"
        row cpu_resume 4 $CPU ${R/-b 2/-b 1} -z 3
    fi
fi

G="-i $DATA/tiny_shakespeare_train.bin -j $DATA/tiny_shakespeare_val.bin -e d2 -b 2 -t 32 -x 3 -v 2 -m 1 -s 0 -c 0.1 -o @OUT/o"
if [ "$ROWS" != cpu ]; then
    for b in build/train_gpt2_zero3_emu build/train_gpt2_zero3_emu_fp32; do
        s=${b##*_emu}; s=${s:-_bf16}
        row "gpu${s}_dev_z0"     2 $b $G -z 0 --zero-backend device
        row "gpu${s}_dev_z3"     2 $b $G -z 3 --zero-backend device
        row "gpu${s}_dev_off"    2 $b $G -z 3 --zero-backend device --offload-optimizer cpu
        row "gpu${s}_dev_dpu"    1 $b $G -z 2 --zero-backend device --offload-optimizer cpu --dpu 1
        row "gpu${s}_host_z3"    2 $b $G -z 3 --zero-backend host
        row "gpu${s}_host_nvme"  2 $b $G -z 3 --zero-backend host --offload-optimizer nvme --offload-param cpu --nvme-path @OUT
        # the device engine's other layouts of the step (stages 1-2, one rank, offload at stage 1)
        row "gpu${s}_dev_z1"     2 $b $G -z 1 --zero-backend device
        row "gpu${s}_dev_z2"     2 $b $G -z 2 --zero-backend device
        row "gpu${s}_dev_z1_off" 2 $b $G -z 1 --zero-backend device --offload-optimizer cpu
        row "gpu${s}_dev_z0_n1"  1 $b $G -z 0 --zero-backend device
        row "gpu${s}_dev_z1_n1"  1 $b $G -z 1 --zero-backend device
    done
    # bf16 with the gradients reduced in fp32 (the norm and AdamW read the fp32 copies)
    b=build/train_gpt2_zero3_emu
    for z in 0 1 2 3; do row "gpu_bf16_dev_z${z}_c32" 2 $b $G -z $z --zero-backend device --communication-data-type fp32; done
    row "gpu_bf16_dev_z1_c32_off" 2 $b $G -z 1 --zero-backend device --communication-data-type fp32 --offload-optimizer cpu
fi

echo "$same same, $diff different$([ $notrun -gt 0 ] && echo ", $notrun not run")"
[ $diff -eq 0 ]
