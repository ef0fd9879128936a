#!/usr/bin/env bash
# CPU AdamW speed (zero3/cpu_adam.h) next to memory bandwidth and PyTorch, in one run.
#   usage: scripts/bench_cpu_adam.sh [n_params] [iters] [runs]   (defaults 100000000 5 3, from the repo root)
# 1. build/bench_cpu_adam (make build/bench_cpu_adam: -O3 -march=native -fopenmp) runs `runs` times;
#    each run times `iters` cpu_adam_step calls over n_params (fp32 p, g, m, v) and a
#    STREAM-style double triad, best call of each; the best run of each is kept (the
#    machine is shared: the best is the least disturbed).
# 2. torch.optim.AdamW(foreach=True) on the same number of parameters (100 tensors of
#    n_params / 100, fp32 grads), same thread count, best of `iters` steps after a warm-up
#    step, with Debian's PyTorch (/usr/bin/python3).
# Conventions (bytes per element counted, decimal GB/s):
#   gbps       = 28 B/param: read p, g, m, v (16) + write p, m, v (12); no hidden traffic
#                (every written line was read first, so there is no extra write-allocate)
#   triad_gbps = 24 B/element of a[i] = b[i] + s*c[i] in double, STREAM's convention:
#                2 reads + 1 write of 8 bytes; the write-allocate read of a[] is not counted
#                (the memory really moves 32 B/element)
#   pct_of_triad = 100 * gbps / triad_gbps;  x_torch = mparam_per_s / torch_mparam_per_s
# The last line is the summary:
#   cpu_adam: mparam_per_s=X gbps=Y triad_gbps=Z pct_of_triad=P torch_mparam_per_s=T x_torch=R
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000000}
iters=${2:-5}
runs=${3:-3}
threads=$(nproc)
export OMP_NUM_THREADS=$threads
make -s build/bench_cpu_adam
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "machine: $threads cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB"
for r in $(seq "$runs"); do
    ./build/bench_cpu_adam "$n" "$iters" | tee -a "$tmp/c.txt"
done

# one after the other: the C arrays are freed before torch allocates its own
/usr/bin/python3 - "$n" "$iters" "$threads" > "$tmp/torch.txt" <<'PY'
import sys, time, torch
n, iters, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
k = 100                                   # a model's worth of tensors, for foreach to batch
sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
params = [torch.nn.Parameter(torch.rand(s) - 0.5) for s in sizes]
for p in params:
    p.grad = (torch.rand(p.shape) - 0.5) * 1e-2
opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True)
opt.step()                                # warm-up: allocates exp_avg, exp_avg_sq
best = float("inf")
for _ in range(iters):
    t0 = time.perf_counter()
    opt.step()
    best = min(best, time.perf_counter() - t0)
print(f"torch: version={torch.__version__} threads={torch.get_num_threads()} n={n} "
      f"best_ms={best * 1e3:.2f} torch_mparam_per_s={n / best / 1e6:.1f}")
PY
cat "$tmp/torch.txt"

# best of the runs for each figure, then the summary line
awk '
    /^cpu_adam:/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "mparam_per_s" && kv[2] > mp) mp = kv[2]; if (kv[1] == "gbps" && kv[2] > gb) gb = kv[2] } }
    /^triad:/    { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "triad_gbps" && kv[2] > tr) tr = kv[2] } }
    /^torch:/    { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "torch_mparam_per_s") to = kv[2] } }
    END {
        if (mp == 0 || tr == 0 || to == 0) { print "bench_cpu_adam: missing figures" > "/dev/stderr"; exit 1 }
        printf "cpu_adam: mparam_per_s=%.1f gbps=%.2f triad_gbps=%.2f pct_of_triad=%.1f torch_mparam_per_s=%.1f x_torch=%.2f\n",
               mp, gb, tr, 100 * gb / tr, to, mp / to
    }' "$tmp/c.txt" "$tmp/torch.txt"
