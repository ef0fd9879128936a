#!/usr/bin/env bash
# The ZeRO engine through the trainer, multi-rank under mpirun (N = 1..4, stages 0-3),
# on the PyTorch reference model (test/e2e/ref_gpt2.py, global batch 24 = 24x1 = 12x2 = 8x3 = 6x4):
#   losses      every (N, stage) run of the standard overfit run (-a 1 -x 8 -l 1e-3 -u 0
#               -q 1.0 -c 0.1) matches the single-rank stage-0 run and the PyTorch reference
#   accumulate  N=2 with 2 micro-steps equals N=4 with 1, at every stage
#   schedule    stage-3 prefetch depths 0..3, persistence on/off, reuse off, a tight live
#               budget: bit-identical losses (they change what is gathered when, not the math)
#   resume      a checkpoint resumed at every stage gives bit-identical losses
#   report      optimizer (stage >= 1), gradient (>= 2) and parameter (3) bytes per rank
#               are the shard sizes, 1/N of the padded model; stage 3 without reuse moves
#               exactly 1.5x the bytes of stage 0
#   memory      d4 on 4 ranks at stage 3: every rank's peak RSS and heap within --estimate's
#   config      --ds-config equals the same flags, flags override it, unknown keys warn;
#               bad values, mismatched ranks, a batch the world size does not divide fail
#   estimate    the model-state table; the device engine's tiers (the shard-free ones below
#               optimizer offload by the shard arrays); the largest GPT-3 on one GPU grows
#               with the host memory and NVMe; bad --estimate values refused
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, maxdiff, within, expect_error

if ! $PY test/e2e/ref_gpt2.py "$tmp" 24 > "$tmp/ref.log" 2>&1; then
    cat "$tmp/ref.log"; echo "0 passed, 1 failed"; exit 1
fi
M="-e $tmp/model.bin -i $tmp/train.bin -j $tmp/train.bin -t 64 -v 0 -s 0"
STD="$M -a 1 -x 8 -l 1e-3 -u 0 -q 1.0 -c 0.1"

# ---------------------------------------------------------------------------
# losses at every world size and stage
# Against the single-rank stage-0 run: the same arithmetic but for the order of fp32
# sums (sgemm over B/N rows, the sum over ranks, accumulation into shards), a few ulps
# per gradient. Over 8 AdamW steps at lr 1e-3 that moved the loss (about 5.7) by at
# most 1.5e-6 in our runs; 2e-5 leaves room for other BLAS builds, while a real bug
# (a shard offset, a missing 1/N, a stale gathered unit) moves it by 1e-3 or more.
run base 1 $STD -b 24 || bad "single-rank stage-0 run"
losses "$tmp/base.json" > "$tmp/base.l" 2>/dev/null
for n in 1 2 3 4; do
    for z in 0 1 2 3; do
        name="n${n}z${z}"
        if ! run "$name" "$n" $STD -b $((24 / n)) -z "$z"; then bad "N=$n stage $z run"; continue; fi
        losses "$tmp/$name.json" > "$tmp/$name.l"
        d=$(maxdiff "$tmp/base.l" "$tmp/$name.l")
        if within "$d" 2e-5; then
            ok "N=$n stage $z equals the single-rank stage-0 run (max diff $d)"
        else
            bad "N=$n stage $z vs single-rank stage 0: $d"
        fi
        # and the PyTorch reference, with test/e2e/test_reference.sh's tolerances
        read -r p f < <($PY test/e2e/check_report.py "$tmp/ref.bin" "$tmp/$name.json" 8 "$name" | tail -1)
        if [ "${f:-1}" = 0 ] && [ "${p:-0}" -gt 0 ]; then ok "N=$n stage $z matches PyTorch ($p checks)"
        else bad "N=$n stage $z vs PyTorch: $f of $((p + f)) checks failed"; fi
    done
done

# ---------------------------------------------------------------------------
# gradient accumulation: 2 ranks x 6 sequences x 2 micro-steps = 4 ranks x 6 x 1. Not
# overfitting (-a 1 would reuse one micro-batch): in order, the same tokens per step.
ACC="$M -x 4 -l 1e-3 -c 0.1 --shuffle 0 -b 6"
for z in 0 1 2 3; do
    if run "acc2_$z" 2 $ACC -d 1536 -z "$z" && run "acc4_$z" 4 $ACC -z "$z"; then
        losses "$tmp/acc2_$z.json" > "$tmp/a2"; losses "$tmp/acc4_$z.json" > "$tmp/a4"
        d=$(maxdiff "$tmp/a2" "$tmp/a4")
        within "$d" 2e-5 \
            && ok "stage $z: N=2 x 2 micro-steps equals N=4 x 1 (max diff $d)" || bad "stage $z accumulation: $d"
    else
        bad "stage $z accumulation runs"
    fi
done

# ---------------------------------------------------------------------------
# stage-3 schedule knobs never change the arithmetic: bit-identical losses. This model's
# units: the embedding 20480 elements, each block 49984, the final layernorm 128. So
# threshold 0 gathers every unit at each use, 30000 keeps the embedding and the final
# layernorm gathered, 1e9 keeps everything; a live budget of 60000 leaves no room to
# prefetch a block next to another; bucket sizes of 1 allow one unit in flight at a time.
run s3ref 2 $STD -b 12 -z 3 --prefetch 0 --param-persistence-threshold 0 || bad "stage-3 reference run"
losses "$tmp/s3ref.json" > "$tmp/s3.l" 2>/dev/null
knobs=(
  "--prefetch 1 --param-persistence-threshold 0"
  "--prefetch 2 --param-persistence-threshold 0"
  "--prefetch 3 --param-persistence-threshold 0"
  "--prefetch 2 --param-persistence-threshold 30000"
  "--prefetch 3 --param-persistence-threshold 1e9"
  "--prefetch 2 --param-persistence-threshold 0 --max-reuse-distance 0"
  "--prefetch 3 --param-persistence-threshold 0 --max-live-parameters 60000"
  "--prefetch 2 --param-persistence-threshold 0 --prefetch-bucket-size 1 --reduce-bucket-size 1"
)
for k in "${knobs[@]}"; do
    if run knob 2 $STD -b 12 -z 3 $k; then
        losses "$tmp/knob.json" > "$tmp/k.l"
        cmp -s "$tmp/s3.l" "$tmp/k.l" && ok "stage 3 $k: bit-identical losses" || bad "stage 3 $k changed the losses"
    else
        bad "stage 3 $k run"
    fi
done

# ---------------------------------------------------------------------------
# resume: 6 steps straight vs 3, stop, resume to 6, at every stage on 2 ranks; shuffled
# data, so the dataloader position is part of what must come back
R="$M -b 6 --shuffle 1 -k constant -u 2 -l 1e-3 -c 0.1"
for z in 0 1 2 3; do
    run "full$z" 2 $R -z "$z" -x 6 > /dev/null
    $MPIRUN -np 2 $BIN $R -z "$z" -x 3 -o "$tmp/ck$z" -n 3 > "$tmp/part$z.log" 2>&1
    run "res$z" 2 $R -z "$z" -x 6 -o "$tmp/ck$z" -n 3 -y 1 > /dev/null
    if grep -q "resumed from" "$tmp/res$z.log" 2>/dev/null; then
        losses "$tmp/full$z.json" | tail -3 > "$tmp/f"; losses "$tmp/res$z.json" > "$tmp/r"
        [ -s "$tmp/r" ] && cmp -s "$tmp/f" "$tmp/r" && ok "stage $z: resume is bit-identical" \
            || bad "stage $z resume: $(tr '\n' ' ' < "$tmp/f") vs $(tr '\n' ' ' < "$tmp/r")"
    else
        bad "stage $z: did not resume ($(grep -m1 -i error "$tmp/res$z.log" "$tmp/part$z.log"))"
    fi
done
# another world size or stage resumes (test_reshard.sh), but not with another global batch:
# refused, naming both sides
$MPIRUN -np 3 $BIN $M -b 2 --shuffle 1 -k constant -u 2 -l 1e-3 -c 0.1 -z 3 -x 6 -o "$tmp/ck3" -n 3 -y 1 > "$tmp/wrong.log" 2>&1
[ $? -ne 0 ] && grep -q "saved with 2 ranks x -b 6" "$tmp/wrong.log" && ok "resume with another global batch is refused" || bad "resume on 3 ranks: $(tail -2 "$tmp/wrong.log")"

# ---------------------------------------------------------------------------
# memory and communication from the reports
$PY - "$tmp" <<'EOF' && ok "report: model states shrink as 1/N by stage" || bad "report: model-state bytes"
import json, sys
d = sys.argv[1]
for n in (1, 2, 3, 4):
    for z in (0, 1, 2, 3):
        r = json.load(open(f"{d}/n{n}z{z}.json"))
        P = r["num_parameters_padded"] * 4          # bytes of the padded fp32 model
        shard = P / n
        # each of the 4 units pads to a multiple of N shards of 64 floats (256 bytes)
        assert r["num_parameters_padded"] - r["num_parameters"] < 4 * n * 64
        for m in r["memory"]["per_rank"]:
            exp_params = P if z < 3 else shard
            exp_grads = {0: P, 1: P + shard, 2: shard, 3: shard}[z]
            exp_opt = 2 * P if z == 0 else 2 * shard
            assert m["params"] == exp_params, (n, z, "params", m["params"], exp_params)
            assert m["grads"] == exp_grads, (n, z, "grads", m["grads"], exp_grads)
            assert m["optimizer"] == exp_opt, (n, z, "optimizer", m["optimizer"], exp_opt)
            assert m["peak"] >= m["params"] + m["grads"] + m["optimizer"]
EOF
# bounded working set at stage 3 (nothing persistent, so nothing is kept by rule): at
# most the unit in use and 2 prefetched, the embedding's gradient (live through the
# backward), a block's gradient and up to two receive shards in flight
run ws 4 $STD -b 6 -z 3 --param-persistence-threshold 0 || bad "working-set run"
$PY - "$tmp/ws.json" <<'EOF' && ok "report: the stage-3 working set is bounded" || bad "report: stage-3 working set"
import json, sys
r = json.load(open(sys.argv[1]))
largest = (12 * 64 * 64 + 13 * 64) * 4   # a block, the largest unit of this model (bytes)
full = r["num_parameters_padded"] * 4
for m in r["memory"]["per_rank"]:
    assert 0 < m["buffers"] <= (3 + 2) * largest + 2 * largest / 4, (m["buffers"], largest)
    assert m["params"] == full / 4, m["params"]
EOF
# memory as measured: d4 (GPT-2 widths, 4 layers) on 4 ranks at stage 3 with small windows,
# 2 steps. Each rank's peak resident memory over the steps (the kernel's VmHWM, the report's
# kernel.per_rank) within --estimate's peak per rank + 32 MiB for the process's own (Open
# MPI, OpenBLAS, the program: 19 MB measured), and its peak heap (build/alloc_peak.so)
# within the estimate + 8 MiB (3.7 MiB measured). Open MPI's MPI_Ireduce_scatter_block,
# which the reduce-scatters were before zero3/comm.h's [Note: reduce-scatter in pieces],
# mallocs two whole units on every rank (each rank's heap 96 MiB past its bound) and fills
# both on rank 0 (its RSS 92 MiB past this bound) and one on rank 2 (39 MiB past)
PEAK=${PEAK:-build/alloc_peak.so}
MEM="-e d4 -i $tmp/train.bin -j $tmp/train.bin -b 1 -t 32 -v 0 -s 0 -x 2 -z 3 --reduce-bucket-size 1e6 --max-reuse-distance 0 --prefetch 1"
rm -rf "$tmp/peak"; mkdir -p "$tmp/peak"
if [ ! -f "$PEAK" ]; then
    bad "memory as measured: $PEAK is not built (make $PEAK)"
elif $MPIRUN -np 1 $BIN $MEM --estimate 1:4 > "$tmp/mem_est.txt" 2>&1 \
        && $MPIRUN -np 4 -x ALLOC_PEAK_DIR="$tmp/peak" -x LD_PRELOAD="$PWD/$PEAK" $BIN $MEM --report "$tmp/mem.json" > "$tmp/mem.log" 2>&1; then
    $PY - "$tmp/mem.json" "$tmp/mem_est.txt" "$tmp/peak" <<'EOF' && ok "memory as measured: every rank's peak RSS and heap within --estimate's" || bad "memory as measured: a rank's peak exceeds --estimate's (see above)"
import json, re, sys
r = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read()
est = float(re.search(r"peak_bytes_per_rank=([0-9.e+]+)", text).group(1))
MiB, failed = 2**20, False
for k in r["kernel"]["per_rank"]:
    rss = k["peak_rss_steps"]
    heap = int(dict(l.split() for l in open(f"{sys.argv[3]}/rank_{k['rank']}.txt"))["peak_live_bytes"])
    print(f"  rank {k['rank']}: peak RSS {rss / MiB:.1f} MiB (bound {(est + 32 * MiB) / MiB:.1f}), peak heap {heap / MiB:.1f} MiB "
          f"(bound {(est + 8 * MiB) / MiB:.1f}), --estimate {est / MiB:.1f} MiB: RSS / estimate {rss / est:.3f}")
    failed |= rss <= 0 or rss > est + 32 * MiB or heap > est + 8 * MiB
sys.exit(1 if failed else 0)
EOF
else
    bad "memory as measured: the d4 run ($(grep -m1 -i error "$tmp/mem.log" "$tmp/mem_est.txt"))"
fi
# communication: stage 3 with no reuse and nothing persistent gathers every unit twice
# (forward, backward) and reduce-scatters it once: 3 x vs stage 0's ring all-reduce 2 x
run c0 2 $STD -b 12 -z 0 || bad "comm run stage 0"
run c3 2 $STD -b 12 -z 3 --param-persistence-threshold 0 --max-reuse-distance 0 || bad "comm run stage 3"
run c3d 2 $STD -b 12 -z 3 || bad "comm run stage 3 defaults"
$PY - "$tmp" <<'EOF' && ok "report: stage 3 moves 1.5x the bytes of stage 0; reuse only lowers it" || bad "report: communication bytes"
import json, sys
d = sys.argv[1]
c = lambda f: json.load(open(f"{d}/{f}.json"))["comm"]["per_rank_bytes_per_step"]
c0, c3, c3d = c("c0"), c("c3"), c("c3d")
s0 = c0["allreduce"]; s3 = c3["allgather"] + c3["reduce_scatter"] + c3["allreduce"]
P = json.load(open(f"{d}/c0.json"))["num_parameters_padded"] * 4
assert s0 == 2 * (2 - 1) / 2 * P, (s0, P)                 # ring all-reduce on 2 ranks
assert c0["allgather"] == 0 and c0["reduce_scatter"] == 0
assert abs(s3 / s0 - 1.5) < 1e-12, s3 / s0
s3d = c3d["allgather"] + c3d["reduce_scatter"]
assert s0 <= s3d < s3, (s0, s3d, s3)                       # kept units are not gathered again
for z, f in ((1, "n2z1"), (2, "n2z2")):                    # stages 1-2: reduce-scatter + all-gather = 2 Psi
    cz = c(f)
    assert cz["allgather"] + cz["reduce_scatter"] == s0 and cz["allreduce"] == 0, (z, cz)
print("stage0", s0, "stage3", s3, "ratio", s3 / s0, "stage3 defaults", s3d / s0)
EOF

# ---------------------------------------------------------------------------
# configuration: --ds-config, overrides, warnings, bad values
cat > "$tmp/ds.json" <<'EOF'
{
  "train_micro_batch_size_per_gpu": 12,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 0,
                        "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                        "overlap_comm": true, "contiguous_gradients": true, "reduce_bucket_size": 5e8,
                        "stage3_frobnicate": 1},
  "wall_clock_breakdown": false
}
EOF
if run dsc 2 $M -a 1 -x 8 -u 0 -q 1.0 --ds-config "$tmp/ds.json"; then
    losses "$tmp/dsc.json" > "$tmp/dsc.l"
    cmp -s "$tmp/dsc.l" "$tmp/n2z3.l" && ok "--ds-config gives the same run as the flags" || bad "--ds-config run differs from flags: $(maxdiff "$tmp/dsc.l" "$tmp/n2z3.l")"
    grep -q "stage3_frobnicate" "$tmp/dsc.log" && ok "unknown key warned about by name" || bad "no warning for the unknown key"
    [ "$(grep -c "stage3_frobnicate" "$tmp/dsc.log")" = 1 ] && ok "the warning is printed once (rank 0)" || bad "warning printed $(grep -c stage3_frobnicate "$tmp/dsc.log") times"
else
    bad "--ds-config run"
fi
run dso 2 $M -a 1 -x 2 -u 0 --ds-config "$tmp/ds.json" -z 1 -b 6 \
  && $PY -c "import json,sys; r=json.load(open('$tmp/dso.json')); sys.exit(0 if r['zero_stage']==1 and r['config']['B']==6 else 1)" \
  && ok "flags override the JSON (-z 1 -b 6)" || bad "flags did not override the JSON"

echo '{"zero_optimization": {"stage": 5}}' > "$tmp/bad_stage.json"
echo '{"zero_optimization": {"stage": 3, "reduce_bucket_size": -1}}' > "$tmp/bad_bucket.json"
echo '{"zero_optimization": {"stage": "three"}}' > "$tmp/bad_type.json"
printf '{"zero_optimization": {\n  "stage": 3,\n  oops\n}}\n' > "$tmp/bad_json.json"
echo '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1}' > "$tmp/bad_batch.json"
expect_error "stage out of range in JSON"  "stage"             $MPIRUN -np 1 $BIN $M -x 1 --ds-config "$tmp/bad_stage.json"
expect_error "negative bucket in JSON"     "reduce_bucket_size" $MPIRUN -np 1 $BIN $M -x 1 --ds-config "$tmp/bad_bucket.json"
expect_error "wrong type in JSON"          "stage"             $MPIRUN -np 1 $BIN $M -x 1 --ds-config "$tmp/bad_type.json"
expect_error "malformed JSON"              "bad_json.json"     $MPIRUN -np 1 $BIN $M -x 1 --ds-config "$tmp/bad_json.json"
expect_error "missing JSON file"           "nope.json"         $MPIRUN -np 1 $BIN $M -x 1 --ds-config "$tmp/nope.json"
expect_error "inconsistent batch sizes"    "train_batch_size"  $MPIRUN -np 2 $BIN $M -x 1 --ds-config "$tmp/bad_batch.json"
expect_error "world size not dividing -d"  "-d"                $MPIRUN -np 3 $BIN $M -x 1 -b 4 -d 1024
expect_error "bad --prefetch"              "--prefetch"        $MPIRUN -np 1 $BIN $M -x 1 -z 3 --prefetch lots
expect_error "offload_param without stage 3" "offload"         $MPIRUN -np 1 $BIN $M -x 1 -z 2 --offload-param cpu
expect_error "ranks with different stages" "different ZeRO"   $MPIRUN -np 1 $BIN $M -x 1 -b 4 -z 2 : -np 1 $BIN $M -x 1 -b 4 -z 3
expect_error "ranks with different batch"  "different training" $MPIRUN -np 1 $BIN $M -x 1 -b 4 : -np 1 $BIN $M -x 1 -b 2
expect_error "ranks with different backends" "different training" $MPIRUN -np 1 $BIN $M -x 1 -b 4 --zero-backend host : -np 1 $BIN $M -x 1 -b 4

# the estimator prints a table for a GPT-3 size without training
if $BIN -e gpt3:c12288 --estimate 8:8 > "$tmp/est.log" 2>&1 && grep -qi "stage" "$tmp/est.log" && grep -q "gpt3:c12288" "$tmp/est.log"; then
    ok "--estimate prints the model-state table for gpt3:c12288"
else
    bad "--estimate: $(head -3 "$tmp/est.log")"
fi

# ... and the GPU trainer's device engine per rank at every tier (zero3/dev_estimate.h): the
# shard-free tiers hold less GPU memory than stage 3 with the optimizer alone on the CPU, by
# at least the shard arrays that one keeps (its fp32 accumulators, and but with the
# optimizer alone on NVMe, whose update is uploaded, its parameter shards)
if $BIN -e gpt3:c768 -b 1 -t 256 --estimate 1:4 > "$tmp/dev_est.log" 2>&1; then
    $PY - "$tmp/dev_est.log" <<'EOF2' && ok "--estimate: the device engine's 12 tiers, the shard-free ones below optimizer offload by the shard arrays" \
        || bad "--estimate: the device engine's tiers: $(grep -m2 '^dev_estimate' "$tmp/dev_est.log")"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("dev_estimate:"):
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        rows[(kv["stage"], kv["offload_optimizer"], kv["offload_param"])] = {k: (float(v) if re.match(r"^[0-9.e+]+$", v) else v) for k, v in kv.items()}
assert len(rows) == 12, sorted(rows)
opt = rows[("3", "cpu", "none")]
shard_arrays = opt["gpu_params"] + opt["gpu_grads"]
assert shard_arrays > 0
for tier in (("3", "cpu", "cpu"), ("3", "cpu", "nvme"), ("3", "nvme", "none"), ("3", "nvme", "nvme")):
    r = rows[tier]
    kept = opt["gpu_params"] if tier[2] == "none" else 0
    assert opt["gpu_peak_per_rank"] - r["gpu_peak_per_rank"] >= shard_arrays - kept, (tier, opt, r)
    assert r["gpu_params"] == kept and r["gpu_grads"] == r["gpu_optimizer"] == 0, r
for r in rows.values():
    assert r["gpu_peak_per_rank"] == r["gpu_engine"] + max(r["gpu_activations"], r["gpu_init"]), r
    assert r["host_pinned_per_rank"] == r["host_params"] + r["host_grads"] + r["host_optimizer"] + r["host_buffers"], r
assert rows[("3", "nvme", "nvme")]["nvme_per_rank"] > 0 and rows[("3", "cpu", "none")]["nvme_per_rank"] == 0
EOF2
else
    bad "--estimate 1:4 for gpt3:c768: $(tail -2 "$tmp/dev_est.log")"
fi

# the largest GPT-3 on one 80 GiB GPU grows with the host memory (no NVMe: 6.7B at 128 GiB, 13B at 512)
largest() { $BIN -e gpt3:c768 -b 1 -t 2048 -r 2 --attention flash --estimate "1:1,gpu=80,host=$1,nvme=$2" 2>&1 | sed -nE 's/^dev_fit: .* params=([0-9]+) .*/\1/p'; }
small=$(largest 128 0) big=$(largest 512 0) disk=$(largest 128 4000)
if [ -n "$small" ] && [ -n "$big" ] && [ "$big" -gt "$small" ] && [ -n "$disk" ] && [ "$disk" -gt "$small" ]; then
    ok "--estimate's fit: the largest GPT-3 on an 80 GiB GPU grows with the host memory ($small -> $big parameters) and with NVMe ($disk)"
else
    bad "--estimate's fit: 128 GiB host: '$small', 512 GiB: '$big', 128 GiB + 4 TB NVMe: '$disk' parameters"
fi
# -r -1 (the default) under --estimate with gpu=: the least recompute whose activations fit
# the GPU less this run's engine and the margin (5%, at least 1 GiB), or 2 when none does,
# said on its own line; the tables after it at that -r. d12 at B=64 with the cuBLAS
# attention on GPUs of 80, 51, 48 and 40 GiB meets each case (checked from the line's own
# figures, and the choices 0, 1, 2 and 2 named: the four must not all agree)
picks=""
for g in 80 51 48 40; do
    $BIN -e d12 -b 64 -t 1024 --estimate "1:1,gpu=$g,host=128" > "$tmp/r_auto_$g.log" 2>&1
    pick=$($PY - "$tmp/r_auto_$g.log" "$g" <<'EOF2'
import re, sys
text = open(sys.argv[1]).read(); gpu = float(sys.argv[2])
m = re.search(r"^recompute: -r -1 takes -r (\d)[^:]*: ([\d.]+) GiB left .* engine \(([\d.]+) GiB\).* take ([\d.]+) GiB at -r 0, ([\d.]+) at -r 1, ([\d.]+) at -r 2$", text, re.M)
r, room, engine, acts = int(m[1]), float(m[2]), float(m[3]), [float(m[i]) for i in (4, 5, 6)]
assert abs(room - (gpu - engine - max(1.0, 0.05 * gpu))) < 0.02, (room, gpu, engine)
want = next((k for k in range(3) if acts[k] <= room), 2)
assert r == want, (r, want, room, acts)
assert ("(none fits)" in m[0]) == (acts[r] > room), m[0]
assert f"at -b 64 -t 1024 -r {r} --attention cublas" in text, "the tables at the -r taken"
print(r)
EOF2
)
    picks="$picks${pick:-?}"
done
[ "$picks" = 0122 ] && ok "--estimate gpu=80/51/48/40: -r -1 takes the least recompute that fits ($picks), the tables at it" \
    || bad "--estimate's -r -1: picks '$picks' for gpu=80/51/48/40 (want 0122): $(grep -h '^recompute' "$tmp"/r_auto_*.log | head -2)"
expect_error "--estimate with a bad host memory" "flag --estimate: '1:1,gpu=80,host=12x'" $BIN -e d6 --estimate 1:1,gpu=80,host=12x
expect_error "--estimate with gpu= but no host=" "needs both gpu=GIB and host=GIB" $BIN -e d6 --estimate 1:1,gpu=80
expect_error "--estimate with an unknown key" "is not gpu=GIB, host=GIB or nvme=GB" $BIN -e d6 --estimate 1:1,gpu=80,host=128,disk=9

finish
