#!/usr/bin/env bash
# ZeRO on the CPU trainer: step time and time waiting on communication at each stage,
# for the d6 model on N=2 ranks, and stage 3 with prefetch off; every figure is set
# next to stage 0 measured in the same run. Not a test: it prints measured figures.
#   usage: scripts/bench_zero_cpu.sh [steps] [B] [T]   (from the repo root, after make all data)
#   env:   BENCH_MODEL=d6 (make test runs d2, 2 steps, B=1, T=16)
# With 2 ranks on a 2-core machine each rank gets one core, and the collectives run on
# the same cores as the compute: "wait" is the time a rank sat in a collective's wait.
# Stage 3 at the DeepSpeed defaults (max_reuse_distance and max_live_parameters 1e9)
# keeps a unit this small gathered from its forward to its backward, so it moves 2 Psi
# like stage 0; the "no reuse" row gathers at every use: 3 Psi, the smallest working set.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}; B=${2:-4}; T=${3:-128}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model=${BENCH_MODEL:-d6}
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 2"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $model, N=2, B=$B, T=$T per rank, $steps steps"
run() {  # name flags...
    local name=$1; shift
    $MPIRUN ./train_gpt2_zero3_cpu -e "$model" -b $B -t $T -x "$steps" -v 0 -s 0 -r 0 "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1 \
        || { echo "$name failed:"; tail -3 "$tmp/$name.log"; exit 1; }
}
run z0 -z 0
run z1 -z 1
run z2 -z 2
run z3 -z 3 --prefetch 2
run z3nopf -z 3 --prefetch 0
# no reuse, nothing persistent: every unit gathered at each use, the smallest working set
run z3min -z 3 --prefetch 2 --max-reuse-distance 0 --param-persistence-threshold 0
/usr/bin/python3 - "$tmp" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def load(n):
    r = json.load(open(f"{d}/{n}.json"))
    s = r["steps"][1:]                       # the first step warms up
    ms = statistics.median(x["ms"] for x in s)
    wait = statistics.median(x["comm_wait_ms"] for x in s)
    c = r["comm"]["per_rank_bytes_per_step"]
    mb = (c["allgather"] + c["reduce_scatter"] + c["allreduce"]) / 1e6
    mem = r["memory"]["per_rank"][0]
    states = (mem["params"] + mem["grads"] + mem["optimizer"]) / 2**20
    return ms, wait, mb, states, mem["buffers"] / 2**20
base = load("z0")[0]
print(f"{'run':<22}{'step ms':>9}{'vs z0':>7}{'comm wait ms':>14}{'MB sent/step':>14}{'states MiB':>12}{'buffers MiB':>13}")
for name, label in (("z0", "stage 0"), ("z1", "stage 1"), ("z2", "stage 2"),
                    ("z3", "stage 3, prefetch 2"), ("z3nopf", "stage 3, prefetch off"),
                    ("z3min", "stage 3, no reuse")):
    ms, wait, mb, states, buf = load(name)
    print(f"{label:<22}{ms:9.1f}{ms / base:7.2f}{wait:14.1f}{mb:14.1f}{states:12.1f}{buf:13.1f}")
z3 = load("z3")[0]; z3n = load("z3nopf")[0]
z3m = load("z3min")[0]
print(f"zero_cpu: stage3_vs_stage0={z3 / base:.3f} stage3_noprefetch_vs_stage0={z3n / base:.3f} stage3_noreuse_vs_stage0={z3m / base:.3f}")
PY
