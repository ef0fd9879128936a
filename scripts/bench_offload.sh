#!/usr/bin/env bash
# Offload on the CPU trainer: step time of the d6 model at N=2, stage 3, with no offload,
# optimizer offload to CPU, to NVMe, and parameters to NVMe too; how long the offloaded
# update takes, and how much of it the step hides.
#   usage: scripts/bench_offload.sh [NVME_DIR] [steps] [B] [T]   (from the repo root, after make all data)
#   env:   BENCH_MODEL=d6 (make test runs d2, 2 steps, B=1, T=16)
# hidden = 1 - (step_offload - step_none) / (update_offload - update_none): of the extra
# time the offloaded update takes over the on-device one (host copies, CPU Adam, NVMe
# reads and writes), the share that did not lengthen the step. The CPU trainer runs the
# update inside zero_step, after the backward, so only the NVMe reads and writes of the
# sub-group pipeline overlap (with the CPU Adam of other groups): expect little hiding
# here; the GPU trainer will overlap it with the device's backward. Step-time noise on a
# shared machine is tens of ms, so a hidden share is meaningful only when the extra
# update time is well above that. Not a test: it prints measured figures.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp}; steps=${2:-6}; B=${3:-4}; T=${4:-128}
tmp=$(mktemp -d); nv=$(mktemp -d "$dir/bench_offload.XXXXXX")
trap 'rm -rf "$tmp" "$nv"' EXIT
model=${BENCH_MODEL:-d6}
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 2"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "machine: $(nproc --all) cores; $model, N=2, stage 3, B=$B, T=$T per rank, $steps steps; NVMe dir $dir ($(df -h "$dir" | tail -1 | awk '{print $1}'))"
run() {
    local name=$1; shift
    $MPIRUN ./train_gpt2_zero3_cpu -e "$model" -b $B -t $T -x "$steps" -v 0 -s 0 -r 0 -z 3 "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1 \
        || { echo "$name failed:"; tail -3 "$tmp/$name.log"; exit 1; }
}
run none
run cpu --offload-optimizer cpu
run nvme --offload-optimizer nvme --nvme-path "$nv" --sub-group-size 2e6
run pnvme --offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --nvme-path "$nv" --sub-group-size 2e6
/usr/bin/python3 - "$tmp" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def load(n):
    r = json.load(open(f"{d}/{n}.json"))
    ms = statistics.median(x["ms"] for x in r["steps"][1:])
    t = r["transfers_per_step"]
    m = r["memory"]["per_rank"][0]
    dev = (m["params"] + m["grads"] + m["optimizer"]) / 2**20
    host = (m["host_params"] + m["host_grads"] + m["host_optimizer"] + m["host_buffers"]) / 2**20
    return ms, t["update_ms"], (t["nvme_read"] + t["nvme_write"]) / 1e6, dev, host, m["nvme"] / 2**20
base, base_upd = load("none")[:2]
print(f"{'run':<26}{'step ms':>9}{'vs none':>9}{'update ms':>11}{'hidden':>8}{'NVMe MB/step':>14}{'device MiB':>12}{'host MiB':>10}{'NVMe MiB':>10}")
out = []
for n, label in (("none", "no offload"), ("cpu", "optimizer -> cpu"), ("nvme", "optimizer -> nvme"),
                 ("pnvme", "optimizer+params -> nvme")):
    ms, upd, io, dev, host, nvme = load(n)
    extra = upd - base_upd
    hidden = 1 - (ms - base) / extra if n != "none" and extra > 0 else float("nan")
    out.append((n, ms / base, hidden))
    print(f"{label:<26}{ms:9.1f}{ms / base:9.2f}{upd:11.1f}{hidden:8.2f}{io:14.1f}{dev:12.1f}{host:10.1f}{nvme:10.1f}")
print("offload: " + " ".join(f"{n}_vs_none={r:.3f} {n}_hidden={h:.2f}" for n, r, h in out[1:]))
PY
