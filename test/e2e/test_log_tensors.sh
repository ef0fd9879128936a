#!/usr/bin/env bash
# --log-tensors (llmc/tensor_log.h) against NumPy on the checkpoints of the same run: every
# step saved (-n 1), figures every 2 steps of 4; the line of 0-based step S against the
# consolidated master of checkpoint S+1 (the norms, maxima) and of checkpoint S (the update
# ratio), and extract-optimizer's m and v of S+1; each of the 4 + 12 L tensors and each
# layer. The engines and tiers read their state differently (zero_state_shard), so each
# runs: the host engine at 1 rank stage 0, 2 ranks stage 3, 2 ranks stage 1 with the
# optimizer on the CPU, 2 ranks stage 3 with both tiers on NVMe; the device engine
# (emulated, fp32) at 1 rank stage 3 without offload, with the optimizer on NVMe, with
# parameters and optimizer on the CPU (the gradient summed on the host) and with both on
# NVMe, stage 2 with --dpu, at 2 ranks stage 1;
# the host-staged backend at 2 ranks stage 3. The gradient's figures against the one
# NumPy recovers from two steps' m: (m' - b1 m) / ((1 - b1) s), s the clip's factor of the
# step's norm, within 1e-5 (m's fp32 roundings, amplified by 1 / (1 - b1): measured below
# 1e-6); and the tensors' gradient norms together against the step's norm, within 1e-6.
# Tolerances: the trainer sums squares in double over fp32 values and prints 9 digits;
# NumPy sums the same values in double in another order: 2e-8 relative holds both (a wrong
# range, tensor or state is off by far more). Also: --log-tensors without -o is refused.
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, expect_error
TOOL=./checkpoint_tool
EMU32=${EMU32:-build/train_gpt2_zero3_emu_fp32}

$PY test/e2e/ref_gpt2.py --inputs-only "$tmp" > /dev/null || { bad "ref_gpt2.py --inputs-only"; finish; exit 1; }
M="-e $tmp/model.bin -i $tmp/train.bin -t 64 -x 4 -v 0 -s 0 -l 1e-3 -c 0.1 -n 1 --log-tensors 2"
mkdir -p "$tmp/nvme"
NV="--offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --nvme-path $tmp/nvme"

# check NAME: the run's lines against its checkpoints
check() {
    local name=$1 dir=$tmp/$1 out=$tmp/$1.out s
    mkdir -p "$out"
    for s in 1 2 3 4; do
        $TOOL consolidate "$dir" $s "$out/c$s.bin" > /dev/null && $TOOL extract-optimizer "$dir" $s "$out/o$s.bin" > /dev/null \
            || { bad "$name: consolidate / extract-optimizer of step $s"; return; }
    done
    $PY - "$out" "$dir/main.jsonl" <<'EOF' && ok "$name: every tensor's and layer's figures at steps 1 and 3 = NumPy's on the checkpoints" || bad "$name: $(tail -1 "$out/why" 2>/dev/null)"
import json, sys, numpy as np
d = sys.argv[1]
lines = [json.loads(l) for l in open(sys.argv[2]) if '"tensors"' in l]
norms = {l["step"]: l["norm"] for l in map(json.loads, open(sys.argv[2])) if "loss" in l and "norm" in l}
assert [l["step"] for l in lines] == [1, 3], [l["step"] for l in lines]
h = np.fromfile(d + "/c1.bin", np.int32, 256); maxT, L, C, Vp = int(h[2]), int(h[4]), int(h[6]), int(h[7])
block = [("ln1w", C), ("ln1b", C), ("qkvw", 3*C*C), ("qkvb", 3*C), ("attprojw", C*C), ("attprojb", C), ("ln2w", C),
         ("ln2b", C), ("fcw", 4*C*C), ("fcb", 4*C), ("fcprojw", 4*C*C), ("fcprojb", C)]
kinds = [("wte", Vp*C, 1), ("wpe", maxT*C, 1)] + [(k, n, L) for k, n in block] + [("lnfw", C, 1), ("lnfb", C, 1)]
where, at = {}, 0
for k, n, count in kinds:
    for l in range(count):
        where[k if count == 1 else f"{k}.{l}"] = (at, n); at += n
numel = at
def close(a, b, what, rel=2e-8):
    if not abs(a - b) <= rel * max(abs(b), 1e-30):
        open(d + "/why", "w").write(f"{what}: {a!r} against NumPy's {b!r}\n"); sys.exit(1)
GTOL = 1e-5
for line in lines:
    S = line["step"]
    p = np.fromfile(f"{d}/c{S+1}.bin", np.float32, offset=1024).astype(np.float64)
    p0 = np.fromfile(f"{d}/c{S}.bin", np.float32, offset=1024).astype(np.float64)
    o = np.fromfile(f"{d}/o{S+1}.bin", np.float32, offset=24).astype(np.float64)
    m, v = o[:numel], o[numel:]
    m0 = np.fromfile(f"{d}/o{S}.bin", np.float32, offset=24).astype(np.float64)[:numel]
    # the mean gradient from AdamW's m: m' = b1 m + (1 - b1) s g, s the clip's factor of
    # the step's norm (b1 and 1 - b1 as the fp32 constants the update uses)
    b1 = float(np.float32(0.9)); s = min(1.0, 1.0 / norms[S])  # llm.c clips at 1 (-c is the weight decay)
    g = (m - b1 * m0) / (float(np.float32(1) - np.float32(0.9)) * s)
    total = np.sqrt(sum(line["tensors"][k]["grad_norm"] ** 2 for k in where))
    close(total, norms[S], f"step {S}: the tensors' gradient norms together against the step's norm", 1e-6)
    assert len(line["tensors"]) == len(where), (len(line["tensors"]), len(where))
    def figures(idx):
        x = {}
        for key, arr in (("param", p), ("m", m), ("v", v)):
            x[key + "_norm"] = np.sqrt(np.sum(arr[idx] ** 2)); x[key + "_max"] = np.max(np.abs(arr[idx]))
        x["update_ratio"] = np.sqrt(np.sum((p[idx] - p0[idx]) ** 2)) / x["param_norm"]
        x["grad_norm"] = np.sqrt(np.sum(g[idx] ** 2)); x["grad_max"] = np.max(np.abs(g[idx]))
        return x
    for name, (a, n) in where.items():
        want = figures(np.arange(a, a + n))
        for key, val in want.items(): close(line["tensors"][name][key], val, f"step {S} {name} {key}", GTOL if key.startswith("grad") else 2e-8)
    for l in range(L):
        idx = np.concatenate([np.arange(*(lambda a, n: (a, a + n))(*where[f"{k}.{l}"])) for k, _ in block])
        want = figures(idx); got = line["layers"][l]
        assert got["layer"] == l
        for key, val in want.items(): close(got[key], val, f"step {S} layer {l} {key}", GTOL if key.startswith("grad") else 2e-8)
    assert line["tensors"]["wte"]["update_ratio"] > 0 and line["tensors"]["qkvw.0"]["v_max"] > 0
EOF
}

# host engine (the CPU trainer)
run h1z0 1 $M -b 4 -z 0 -o "$tmp/h1z0" && check h1z0 || bad "h1z0 run"
run h2z3 2 $M -b 2 -z 3 -o "$tmp/h2z3" && check h2z3 || bad "h2z3 run"
run h2z1c 2 $M -b 2 -z 1 --offload-optimizer cpu -o "$tmp/h2z1c" && check h2z1c || bad "h2z1c run"
run h2nv 2 $M -b 2 -z 3 $NV --param-persistence-threshold 0 -o "$tmp/h2nv" && check h2nv || bad "h2nv run"
# device engine (emulated GPU, fp32)
if [ ! -x "$EMU32" ]; then bad "missing $EMU32 (make build/train_gpt2_zero3_emu_fp32)"
else
    BIN=$EMU32 run d1z3 1 $M -b 4 -z 3 --zero-backend device -o "$tmp/d1z3" && check d1z3 || bad "d1z3 run"
    BIN=$EMU32 run d1nv 1 $M -b 4 -z 3 --zero-backend device --offload-optimizer nvme --nvme-path "$tmp/nvme" -o "$tmp/d1nv" \
        && check d1nv || bad "d1nv run"
    BIN=$EMU32 run d1dpu 1 $M -b 4 -z 2 --zero-backend device --offload-optimizer cpu --dpu 1 -o "$tmp/d1dpu" && check d1dpu || bad "d1dpu run"
    BIN=$EMU32 run d1pc 1 $M -b 4 -z 3 --zero-backend device --offload-optimizer cpu --offload-param cpu -o "$tmp/d1pc" \
        && check d1pc || bad "d1pc run"
    BIN=$EMU32 run d1pnv 1 $M -b 4 -z 3 --zero-backend device $NV -o "$tmp/d1pnv" && check d1pnv || bad "d1pnv run"
    BIN=$EMU32 run d2z1 2 $M -b 2 -z 1 --zero-backend device -o "$tmp/d2z1" && check d2z1 || bad "d2z1 run"
    # the host-staged backend: the host engine's states behind the GPU's copies
    BIN=$EMU32 run s2z3 2 $M -b 2 -z 3 --zero-backend host -o "$tmp/s2z3" && check s2z3 || bad "s2z3 run"
fi
# plot_log.py passes over the figures' lines without a word
$PY scripts/plot_log.py "$tmp/plot.png" "$tmp/h1z0" > /dev/null 2> "$tmp/plot.err" && [ ! -s "$tmp/plot.err" ] \
    && ok "plot_log.py reads a main.jsonl with the figures' lines, silently" || bad "plot_log.py: $(head -2 "$tmp/plot.err")"
expect_error "--log-tensors without -o" "give -o DIR" $BIN -e "$tmp/model.bin" -i "$tmp/train.bin" -t 64 -b 4 -x 1 --log-tensors 1
finish
