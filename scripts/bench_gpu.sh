#!/usr/bin/env bash
# The GPU benchmark: every figure measured in this one run, on one GPU.
#  1. GPT-2 124M (d12, B=64, T=1024): tokens/s and MFU of ./train_gpt2_zero3 at -z 0, 1,
#     2, 3 and at -z 2 with --offload-optimizer cpu, next to a PyTorch GPT-2 of the same
#     shape (dev/bench_torch_gpt2.py: torch.compile, bf16 autocast, flash attention, fused
#     AdamW), with the ratio of each to -z 0 and to PyTorch.
#  2. GPT-2 1.5B (d48, B=8, T=1024, the settings of scripts/run_gpt2_1558M.sh): without
#     and with CPU optimizer offload (-z 2 --offload-optimizer cpu), also with --dpu 1.
#  3. The biggest GPT-3 size that trains on this GPU with offload: the settings of
#     scripts/run_gpt3_13B.sh, then 6.7B, then 2.7B (there with -z 2 --offload-optimizer
#     cpu), largest first; the first that trains is reported with its tokens/s. A size
#     whose host memory (the estimator's figure, zero3/estimate.h, plus the fp32 random
#     init) exceeds MemAvailable is skipped without running.
# The data is a synthetic shard of random tokens (the speed does not depend on it). Each
# run drops its first steps (warm-up: cuBLASLt heuristics, torch.compile); tokens/s is
# tokens over the time of the kept steps, MFU the trainer's formula on the same basis
# (6 * matmul params + 12 L T C FLOPs per token over the device's peak bf16 TFLOP/s).
# A configuration the trainer refuses or fails on is listed with its error line.
#
# Environment: STEPS (30) WARMUP (10) GRAD_ACCUM (1: micro-steps per step for d12 and
#   PyTorch), BIG_STEPS (6) BIG_WARMUP (2) BIG_ACCUM (4: for d48 and GPT-3; the real runs
#   accumulate far more, which hides more of the offloaded optimizer step), RECOMPUTE (0,
#   for d12), MODEL_XL (d48), B_XL (8), OUT (bench_gpu_out: reports and logs),
#   RUN_TIMEOUT (1800 s per run), PY (python3 with a CUDA PyTorch >= 2.0), HOST_GIB (host
#   memory the GPT-3 sizes may use; default MemAvailable).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"   # die, require_gpu, RUN_ROOT
cd "$RUN_ROOT"

STEPS=${STEPS:-30} WARMUP=${WARMUP:-10} GRAD_ACCUM=${GRAD_ACCUM:-1}
BIG_STEPS=${BIG_STEPS:-6} BIG_WARMUP=${BIG_WARMUP:-2} BIG_ACCUM=${BIG_ACCUM:-4}
RECOMPUTE=${RECOMPUTE:-0} MODEL_XL=${MODEL_XL:-d48} B_XL=${B_XL:-8}
OUT=${OUT:-bench_gpu_out} RUN_TIMEOUT=${RUN_TIMEOUT:-1800} PY=${PY:-python3}
if [ "$WARMUP" -ge "$STEPS" ] || [ "$BIG_WARMUP" -ge "$BIG_STEPS" ]; then
    die "WARMUP must be below STEPS (and BIG_WARMUP below BIG_STEPS)"
fi

require_gpu scripts/bench_gpu.sh
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || die "$PY has no CUDA PyTorch (needed for the PyTorch baseline): pip install torch, or set PY"
# nothing here builds: on a GPU machine that cannot, the binary comes in scripts/gpu_bundle.sh's bundle
[ -x ./train_gpt2_zero3 ] || die "./train_gpt2_zero3 is not built: make train_gpt2_zero3 (or scripts/gpu_bundle.sh exec DIR scripts/bench_gpu.sh)"
mkdir -p "$OUT"
rows="$OUT/rows.tsv"
: > "$rows"

# a shard of random tokens in llm.c's format (magic 20240520, version 1, uint16 tokens)
synth="$OUT/synth_train.bin"
ntok=$(( STEPS * 64 * 1024 * GRAD_ACCUM + 4 * 1024 * 1024 ))
if [ ! -f "$synth" ] || [ "$(( ($(stat -c %s "$synth") - 1024) / 2 ))" -lt "$ntok" ]; then
    "$PY" - "$synth" "$ntok" <<'PY'
import array, os, sys
path, n = sys.argv[1], int(sys.argv[2])
hdr = array.array("i", [0] * 256)
hdr[0], hdr[1], hdr[2] = 20240520, 1, n
raw = array.array("H", os.urandom(2 * n))
toks = array.array("H", (t % 50257 for t in raw))
with open(path, "wb") as f:
    f.write(hdr.tobytes())
    f.write(toks.tobytes())
PY
fi

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
echo "GPU: $gpu; host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 2^20}' /proc/meminfo)"
echo "$(date -u +%Y-%m-%dT%H:%MZ); torch $("$PY" -c 'import torch; print(torch.__version__)')"

# record GROUP LABEL JSON WARMUP STATUS: one line for the table at the end
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$rows"; }

# why a run failed: its first error line, or its exit code
why() {
    local log=$1 rc=$2 line
    line=$(grep -m1 -i -E 'error|out of memory|refused|not in the GPU trainer' "$log" || true)
    if [ "$rc" -eq 124 ]; then line="timed out after ${RUN_TIMEOUT}s"; fi
    echo "${line:-exit $rc (see $log)}" | tr '\t' ' ' | cut -c1-160
}

# ours GROUP LABEL NAME WARMUP FLAGS...: ./train_gpt2_zero3 on the synthetic shard
ours() {
    local group=$1 label=$2 name=$3 warm=$4; shift 4
    echo "running $label: ./train_gpt2_zero3 $*"
    local rc=0
    timeout "$RUN_TIMEOUT" ./train_gpt2_zero3 -i "$synth" -j "$synth" -v 0 -s 0 -n 0 "$@" \
        --report "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then record "$group" "$label" "$OUT/$name.json" "$warm" ok
    else record "$group" "$label" "" "$warm" "failed: $(why "$OUT/$name.log" "$rc")"; fi
    return "$rc"
}

# 1. GPT-2 124M at every stage, and PyTorch
d12=(-e d12 -b 64 -t 1024 -r "$RECOMPUTE" -x "$STEPS" -d $((64 * 1024 * GRAD_ACCUM)) -l 6e-4 -c 0.1)
ours d12 "-z 0" d12_z0 "$WARMUP" "${d12[@]}" -z 0 || true
ours d12 "-z 1" d12_z1 "$WARMUP" "${d12[@]}" -z 1 || true
ours d12 "-z 2" d12_z2 "$WARMUP" "${d12[@]}" -z 2 || true
ours d12 "-z 3" d12_z3 "$WARMUP" "${d12[@]}" -z 3 || true
ours d12 "-z 2 --offload-optimizer cpu" d12_z2_cpu "$WARMUP" "${d12[@]}" -z 2 --offload-optimizer cpu || true
echo "running PyTorch: dev/bench_torch_gpt2.py"
rc=0
timeout "$RUN_TIMEOUT" "$PY" dev/bench_torch_gpt2.py -L 12 -H 12 -C 768 -b 64 -t 1024 --accum "$GRAD_ACCUM" \
    --steps "$STEPS" --warmup 0 --report "$OUT/torch_d12.json" > "$OUT/torch_d12.log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ]; then record d12 "PyTorch (compile, bf16, fused AdamW)" "$OUT/torch_d12.json" "$WARMUP" torch
else record d12 "PyTorch (compile, bf16, fused AdamW)" "" "$WARMUP" "failed: $(why "$OUT/torch_d12.log" "$rc")"; fi

# 2. GPT-2 1.5B without and with CPU optimizer offload
xl=(-e "$MODEL_XL" -b "$B_XL" -t 1024 -r 0 -x "$BIG_STEPS" -d $((B_XL * 1024 * BIG_ACCUM)) -l 6e-4 -c 0.1)
ours xl "-z 0, no offload" xl_z0 "$BIG_WARMUP" "${xl[@]}" -z 0 || true
ours xl "-z 2 --offload-optimizer cpu" xl_z2_cpu "$BIG_WARMUP" "${xl[@]}" -z 2 --offload-optimizer cpu || true
# ZeRO-Offload's delayed update: the CPU Adam of one step overlaps the GPU's next
ours xl "-z 2 --offload-optimizer cpu --dpu 1" xl_z2_cpu_dpu "$BIG_WARMUP" "${xl[@]}" -z 2 --offload-optimizer cpu --dpu 1 || true

# 3. the biggest GPT-3 size with offload, from the run scripts' own settings
# val KEY: a field of the run script's "# plan:" line in $plan
val() { sed -E "s/.* $1=([^ ]+).*/\1/" <<< "$plan"; }
avail_gib=${HOST_GIB:-$(awk '/MemAvailable/ {printf "%.1f", $2 / 2^20}' /proc/meminfo)}
for tag in 13B 6.7B 2.7B; do
    env_over=()
    if [ "$tag" = 2.7B ]; then env_over=(OFFLOAD_OPTIMIZER=cpu ZERO_STAGE=2); fi
    dry=$(env "${env_over[@]}" DRY_RUN=1 NGPU=1 OUT_DIR="$OUT/run_gpt3_$tag" bash "scripts/run_gpt3_$tag.sh")
    plan=$(grep '^# plan:' <<< "$dry")
    cmd=()
    eval "cmd=($(grep -v '^#' <<< "$dry"))"
    params=$(val params) b=$(val B) t=$(val T) opt=$(val offload_optimizer) param=$(val offload_param)
    label="GPT-3 $tag ($(val model), -z $(val stage), optimizer $opt, params $param, B=$b, $BIG_ACCUM micro-steps/step)"
    # host bytes per rank at N=1 (zero3/estimate.h): (12 + 4) Psi for cpu optimizer offload,
    # + 2 Psi for cpu parameter offload; + 4 Psi for the fp32 init the trainer makes first
    need_gib=$(awk -v p="$params" -v o="$opt" -v q="$param" \
        'BEGIN { printf "%.1f", p * ((o == "cpu" ? 16 : 0) + (q == "cpu" ? 2 : 0) + 4) / 2^30 }')
    if awk -v n="$need_gib" -v a="$avail_gib" 'BEGIN { exit !(n > a) }'; then
        record gpt3 "$label" "" "$BIG_WARMUP" "skipped: needs ~$need_gib GiB of host memory, MemAvailable is $avail_gib GiB"
        continue
    fi
    echo "running $label: ${cmd[*]}"
    rc=0
    timeout "$RUN_TIMEOUT" "${cmd[@]}" -i "$synth" -j "$synth" -v 0 -s 0 -n 0 -y 0 -x "$BIG_STEPS" \
        -d $((b * t * BIG_ACCUM)) --report "$OUT/gpt3_$tag.json" > "$OUT/gpt3_$tag.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ]; then record gpt3 "$label" "$OUT/gpt3_$tag.json" "$BIG_WARMUP" ok; break; fi
    record gpt3 "$label" "" "$BIG_WARMUP" "failed: $(why "$OUT/gpt3_$tag.log" "$rc")"
done
grep -q $'^gpt3\t.*\tok$' "$rows" || record gpt3 "none of these GPT-3 sizes trained here" "" 0 ""

echo
"$PY" - "$rows" <<'PY'
import sys
sys.path.insert(0, "dev")
from report_figures import figures  # tokens/s and MFU of a report's kept steps
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]

res = {}
for group, label, path, warm, status in rows:
    res[(group, label)] = figures(path, warm)[:2] if path else None

def line(group, label, status, base=None, torch=None):
    f = res[(group, label)]
    if f is None:
        print(f"  {label:<44} {status}".rstrip())
        return
    tps, mfu = f
    mfu_s = f"{100 * mfu:5.1f}%" if mfu is not None else "   n/a"
    r1 = f"{tps / base:9.2f}" if base else ""
    r2 = f"{tps / torch:11.2f}" if torch else ""
    print(f"  {label:<44} {tps:12.0f} {mfu_s:>7} {r1} {r2}".rstrip())

titles = {"d12": ("GPT-2 124M (d12), B=64, T=1024", "vs -z 0", "vs PyTorch"),
          "xl": ("GPT-2 1.5B (d48), B=8, T=1024", "vs no offload", ""),
          "gpt3": ("Biggest GPT-3 with offload, largest first", "", "")}
for group in ("d12", "xl", "gpt3"):
    mine = [r for r in rows if r[0] == group]
    if not mine:
        continue
    title, c1, c2 = titles[group]
    print(title)
    print(f"  {'config':<44} {'tokens/s':>12} {'MFU':>7} {c1:>9} {c2:>11}".rstrip())
    base = res.get((group, mine[0][1]))
    base = base[0] if base else None
    tref = [res[(g, l)] for g, l, p, w, s in mine if s == "torch" and res[(g, l)]]
    torch = tref[0][0] if tref else None
    for g, label, path, warm, status in mine:
        line(g, label, status, base if group != "gpt3" else None, torch if group == "d12" else None)
PY
