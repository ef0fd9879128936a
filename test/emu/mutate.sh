#!/usr/bin/env bash
# The mutation run (not in `make test`): does the emulator's race checker (test/emu/emu_device.h)
# catch a missing wait? Each event wait in the device engine (zero3/device*.cuh), its NCCL
# layer (zero3/nccl.cuh) and the GPU trainer (train_gpt2_zero3.cu) is removed in turn: a
# cudaStreamWaitEvent or cudaEventSynchronize becomes cudaSuccess, a call of zero_dev_wait,
# zero_dev_join, zero_nccl_after or zero_gpu_wait (the host's watched waits) becomes 0. Each
# mutant is built in a copy of the working tree and run under the out-of-order scheduler
# (device engine mutants: build/test_device_emu at 1-3 ranks in the configurations below;
# trainer mutants: the emulated GPU trainer) on several seeds until something catches it.
# Prints one line per removed wait:
#   CAUGHT (race)    the checker named the race
#   CAUGHT (failed)  the run failed otherwise (wrong numbers, a deadlock the scheduler found)
#   MISSED           every run passed
# and ends with "N caught, N missed". Run from the repo root: bash test/emu/mutate.sh [SEEDS]
# (about 20 minutes on 2 cores; bash reads a script as it runs: do not edit this one meanwhile).
# MATCH=REGEX mutates only the sites whose line matches it (e.g. the waits a change added).
set -u
SEEDS=${1:-"1 2 3"}
MPIRUN=${MPIRUN:-"mpirun --allow-run-as-root --oversubscribe"}
root=$(pwd)
work=$(mktemp -d /tmp/mutate.XXXXXX)
trap 'rm -rf "$work"' EXIT
# the working tree as it is (uncommitted changes too), without build outputs
tar -C "$root" --exclude=./build --exclude=./.git --exclude='./*.bin' -cf - . | tar -C "$work" -xf -
mkdir -p "$work/build"

# the engine's configurations, cheapest first: "RANKS ARGS"
ENGINE_RUNS=(
    "2 -z 3 -t 0 -f 3"
    "2 -z 3 -t 0 -f 3 -k 0 -n 3"
    "2 -z 1 -k 0 -n 3"
    "3 -z 3 -o 1 -p 1 -n 4 -k 0"
    "3 -z 2 -o 1 -n 4 -k 0"
    "2 -z 2 -a 2"
    "2 -z 1 -a 2"
    "2 -z 0 -a 2"
    "3 -z 3 -t 0 -f 0"
    "2 -z 3 -t 0 -f 3 -l 3000"
    "1 -z 3 -o 1 -n 4"
    "3 -z 2 -o 1 -a 2 -n 4"
    "3 -z 3 -o 1 -p 1 -n 5 -r 2"
    "3 -z 1 -o 1 -p 1 -n 4"
    "2 -z 3 -o 2 -t 0 -f 3 -k 0 -n 3"
    "3 -z 3 -o 2 -p 1 -n 4 -r 2"
    "2 -z 3 -o 3 -t 0 -f 3 -k 0 -n 3"
    "2 -z 3 -o 4 -p 1 -t 0 -n 4"
    "2 -z 3 -o 3 -t 0 -f 3 -L 8 -n 2"
)
# the trainer's: a tiny random model, a few steps, device engine
mkdir -p "$work/ref"
/usr/bin/python3 test/e2e/ref_gpt2.py "$work/ref" > "$work/ref.log" 2>&1 || { echo "ref_gpt2.py failed"; exit 1; }
TRAIN="-e $work/ref/model.bin -i $work/ref/train.bin -j $work/ref/train.bin -b 4 -t 64 -x 3 -v 0 -s 0 --zero-backend device"
TRAINER_RUNS=("1 -z 3" "1 -z 3 --offload-optimizer cpu --dpu 1" "2 -z 2 -d 1024" "1 -z 3 -d 1024"
             "1 -z 3 --offload-optimizer cpu --offload-param cpu --param-persistence-threshold 0")

# every call site: FILE LINE K (the K-th wait call on that line)
PATTERN='(cudaStreamWaitEvent|cudaEventSynchronize|zero_dev_wait|zero_dev_join|zero_nccl_after|zero_gpu_wait)\s*\('
sites=()
for f in zero3/device.cuh zero3/device_step.cuh zero3/device_init.cuh zero3/device_swap.cuh zero3/nccl.cuh train_gpt2_zero3.cu; do
    while IFS=: read -r line text; do
        # skip comments and the functions' own definitions
        stripped=$(echo "$text" | sed -E 's#//.*##')
        echo "$stripped" | grep -qE "static (inline )?int (zero_dev_wait|zero_dev_join|zero_nccl_after)" && continue
        [ -n "${MATCH:-}" ] && ! echo "$stripped" | grep -qE "$MATCH" && continue
        n=$(echo "$stripped" | grep -oE "$PATTERN" | wc -l)
        for k in $(seq 1 "$n"); do sites+=("$f $line $k"); done
    done < <(grep -nE "$PATTERN" "$f")
done

caught=0; missed=0
for site in "${sites[@]}"; do
    read -r f line k <<< "$site"
    cp "$root/$f" "$work/$f"
    # the K-th call on the line, with its balanced parentheses, replaced
    perl -i -pe 'if ($. == '"$line"') { my $i = 0; s/\b(cudaStreamWaitEvent|cudaEventSynchronize|zero_dev_wait|zero_dev_join|zero_nccl_after|zero_gpu_wait)(\((?:[^()]++|(?2))*\))/++$i == '"$k"' ? ($1 =~ m{^cuda} ? "cudaSuccess" : "0") : "$1$2"/ge }' "$work/$f"
    what="$f:$line #$k: $(sed -n "${line}p" "$root/$f" | sed -E 's/^\s+//' | cut -c1-90)"
    if cmp -s "$root/$f" "$work/$f"; then echo "SKIPPED (no change) $what"; continue; fi
    result=MISSED
    if [ "$f" = train_gpt2_zero3.cu ]; then
        (cd "$work" && make -s build/train_gpt2_zero3_emu_fp32 > build/make.log 2>&1) || { echo "BUILD FAILED $what"; tail -3 "$work/build/make.log"; cp "$root/$f" "$work/$f"; continue; }
        runs=("${TRAINER_RUNS[@]}")
    else
        (cd "$work" && make -s build/test_device_emu build/train_gpt2_zero3_emu_fp32 > build/make.log 2>&1) || { echo "BUILD FAILED $what"; tail -3 "$work/build/make.log"; cp "$root/$f" "$work/$f"; continue; }
        runs=("${ENGINE_RUNS[@]}")
    fi
    # each seed, then the lazy schedule (EMU_MAX_PER_CALL=-1: the GPU runs only when the host waits)
    for seed in $SEEDS lazy; do
        per_call=3; [ "$seed" = lazy ] && per_call=-1
        for r in "${runs[@]}"; do
            read -r n args <<< "$r"
            if [ "$f" = train_gpt2_zero3.cu ]; then
                cmd="$work/build/train_gpt2_zero3_emu_fp32 $TRAIN $args"
            else
                cmd="$work/build/test_device_emu $args"
            fi
            EMU_SEED=${seed/lazy/4} EMU_MAX_PER_CALL=$per_call timeout 300 $MPIRUN -np "$n" -x EMU_SEED -x EMU_MAX_PER_CALL \
                $cmd > "$work/run.log" 2>&1
            rc=$?
            if grep -q "RACE" "$work/run.log"; then result="CAUGHT (race)"; elif [ $rc -ne 0 ]; then result="CAUGHT (failed, exit $rc)"; fi
            if [ "$result" != MISSED ]; then
                detail=$(grep -m1 -E "RACE|FAIL|emulated CUDA|error" "$work/run.log" | cut -c1-160)
                result="$result [seed $seed, ranks $n: $args] $detail"
                break 2
            fi
        done
    done
    echo "$result: $what"
    case "$result" in CAUGHT*) caught=$((caught + 1)) ;; *) missed=$((missed + 1)) ;; esac
    cp "$root/$f" "$work/$f"
done
echo "$caught caught, $missed missed"
