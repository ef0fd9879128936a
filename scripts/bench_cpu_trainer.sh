#!/usr/bin/env bash
# CPU trainer speed: tokens/s and achieved GFLOP/s of forward + backward for d6 and d12
# at B=4 T=256, next to OpenBLAS's sgemm GFLOP/s at the model's own matmul shapes,
# measured in the same run. Not a test: it prints measured figures and ratios.
#   usage: scripts/bench_cpu_trainer.sh [steps]     (from the repo root, after make all data)
#   env:   BENCH_DEPTHS="6 12" BENCH_B=4 BENCH_T=256 (make test runs BENCH_DEPTHS=2 at B=1 T=16)
# The FLOP count is the usual one: per token, forward 2*(12 L C^2 + Vp C) for the
# matmuls plus 4 L T C for attention's two products (computed over the full square, as
# the trainer does), times 3 for forward + backward.
# ratio = achieved / sgemm GFLOP/s: the share of the step that would be spent in sgemm
# if every counted FLOP ran at sgemm speed, so near 1 means the step is mostly sgemm.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
make -s build/bench_sgemm
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
B=${BENCH_B:-4}; T=${BENCH_T:-256}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for d in ${BENCH_DEPTHS:-6 12}; do
    C=$((64 * d)); L=$d; Vp=50304
    sg=$(./build/bench_sgemm $C $((B * T)) 5 | sed 's/sgemm_gflops=//')
    ./train_gpt2_zero3_cpu -e d$d -b $B -t $T -x "$steps" -v 0 -s 0 -r 0 --report "$tmp/r$d.json" > "$tmp/log$d" 2>&1 \
        || { echo "d$d run failed:"; tail -3 "$tmp/log$d"; exit 1; }
    /usr/bin/python3 - "$tmp/r$d.json" "$sg" $L $C $T $Vp $B <<'PY'
import json, sys, statistics
r = json.load(open(sys.argv[1])); sg = float(sys.argv[2])
L, C, T, Vp, B = map(int, sys.argv[3:])
ms = statistics.median(s["ms"] for s in r["steps"][1:])      # the first step warms up
tok = B * T / (ms / 1e3)
matmul = 3 * 2 * (12 * L * C * C + Vp * C)                    # per token, fwd + bwd
attn = 3 * 4 * L * T * C
gflops = tok * (matmul + attn) / 1e9
print(f"d{L}: tokens_per_s={tok:.0f} step_ms={ms:.0f} achieved_gflops={gflops:.1f} "
      f"sgemm_gflops={sg:.1f} ratio={gflops / sg:.2f}")
PY
done
