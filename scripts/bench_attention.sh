#!/usr/bin/env bash
# The trainer's attention beside PyTorch's, in one run on one GPU (a few seconds):
#
#   scripts/bench_attention.sh [B:NH:T:HS ...]      (default 64:12:1024:64 8:32:2048:80:
#                                                     d12's attention, GPT-3 2.7B's)
#
# build/bench_attention times --attention flash (the tensor-core kernels) and --attention
# cublas, forward and backward; dev/bench_torch_sdpa.py times F.scaled_dot_product_attention
# (causal, bf16) with each backend it has. Both count the same causal FLOPs, so TFLOP/s
# compare as speed. Prints both programs' lines, then per shape the ratio of our flash path
# to PyTorch's fastest backend, forward, backward and both, and last:
#   bench_attention: B:NH:T:HS flash_vs_sdpa=X fwd=X bwd=X ...  (one group per shape)
# Builds nothing (run it through scripts/gpu_bundle.sh exec DIR where nothing can be built).
# BA_ITERS (20), BA_DEVICE (cuda; cpu: PyTorch's smoke test beside an emulated build), PY.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"   # die, require_gpu, RUN_ROOT
cd "$RUN_ROOT" || exit 1
PY=${PY:-python3}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(64:12:1024:64 8:32:2048:80)
for s in "${shapes[@]}"; do [[ $s =~ ^[0-9]+:[0-9]+:[0-9]+:[0-9]+$ ]] || die "$s is not B:NH:T:HS"; done
require_gpu "scripts/bench_attention.sh"
[ -x build/bench_attention ] || die "build/bench_attention is not built (make build/bench_attention, or run this through scripts/gpu_bundle.sh exec DIR)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./build/bench_attention "${BA_ITERS:-20}" "${shapes[@]}" | tee "$tmp/ours.txt" || die "build/bench_attention failed"
for s in "${shapes[@]}"; do
    IFS=: read -r b nh t hs <<< "$s"
    "$PY" dev/bench_torch_sdpa.py -b "$b" --heads "$nh" -t "$t" --head-size "$hs" --iters "${BA_ITERS:-20}" \
        --device "${BA_DEVICE:-cuda}" --report "$tmp/sdpa_$b.$nh.$t.$hs.json" > "$tmp/sdpa.log" 2>&1 \
        || { tail -2 "$tmp/sdpa.log"; die "dev/bench_torch_sdpa.py failed at $s"; }
    grep -E '^(torch|sdpa)' "$tmp/sdpa.log"
done
"$PY" - "$tmp" "${shapes[@]}" <<'EOF'
import json, re, sys
tmp, shapes = sys.argv[1], sys.argv[2:]
ours = {}
for line in open(f"{tmp}/ours.txt"):
    m = re.match(r"attention B=(\d+) NH=(\d+) T=(\d+) hs=(\d+) path=(\w+) (fwd_ms=.*)", line)
    if m:
        ours[(":".join(m.groups()[:4]), m.group(5))] = {k: float(v) for k, v in re.findall(r"(\w+)=([-+0-9.e]+)", m.group(6))}
out = []
for s in shapes:
    b, nh, t, hs = s.split(":")
    r = json.load(open(f"{tmp}/sdpa_{b}.{nh}.{t}.{hs}.json"))
    best = max((x for x in r["backends"] if x["available"]), key=lambda x: x["fwd_bwd_tflops"], default=None)
    fl = ours.get((s, "flash"))
    if best is None or fl is None:
        print(f"{s}: no ratio (flash {'ran' if fl else 'did not run'}, SDPA {'ran' if best else 'did not run'})")
        continue
    x = {k: fl[f"{k}_tflops"] / best[f"{k}_tflops"] for k in ("fwd", "bwd", "fwd_bwd")}
    cb = ours.get((s, "cublas"))
    print(f"{s}: flash {fl['fwd_bwd_tflops']:.1f} TFLOP/s forward and backward, PyTorch's {best['backend']} "
          f"{best['fwd_bwd_tflops']:.1f}: {x['fwd_bwd']:.3f}x (forward {x['fwd']:.3f}x, backward {x['bwd']:.3f}x)"
          + (f"; the cuBLAS path {cb['fwd_bwd_tflops']:.1f}" if cb else ""))
    out.append(f"{s} flash_vs_sdpa={x['fwd_bwd']:.3f} fwd={x['fwd']:.3f} bwd={x['bwd']:.3f} sdpa_backend={best['backend']}")
print("bench_attention: " + " ".join(out))
EOF
