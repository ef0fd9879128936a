#!/usr/bin/env bash
# End-to-end tests of ./train_gpt2_zero3_cpu, run from the repo root after `make all data`:
#   bad input        each gets a non-zero exit and one line naming the flag or file
#   data parallel    N=2 ranks x B=4 == N=1 x B=8 == N=1 x B=4 x 2 accumulation steps
#   checkpoints      resuming from a checkpoint gives bit-identical losses (N=1 and N=2)
#   report           the --report JSON holds the fields DESIGN.md promises
#   vocabulary tiles --vocab-tile gives the untiled run's losses, stage 0 and stage 3 on 2 ranks
#   training         the loss falls on tinyshakespeare, a sample is printed
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, maxdiff, within, expect_error

# a synthetic shard of random tokens (uint16 < 50257) and a deliberately broken copy
$PY - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
def shard(path, toks, magic=20240520, version=1, count=None):
    h = np.zeros(256, dtype=np.int32); h[0] = magic; h[1] = version
    h[2] = len(toks) if count is None else count
    open(path, "wb").write(h.tobytes() + np.asarray(toks, dtype=np.uint16).tobytes())
# learnable on purpose, so that a few steps visibly lower the loss (by ~0.15 a step
# at lr 1e-3; uniform random tokens would leave nothing to learn): 256 distinct
# tokens, each followed by a fixed successor 3 times in 4
rng = np.random.RandomState(1)
toks = np.zeros(40000, dtype=np.int64)
for i in range(1, len(toks)):
    toks[i] = (toks[i - 1] * 7 + 3) % 256 if rng.rand() < 0.75 else rng.randint(0, 256)
toks = toks * 193 + 11   # spread over the vocabulary (max 255*193+11 < 50257)
shard(f"{d}/train.bin", toks)
shard(f"{d}/badmagic.bin", toks, magic=1234)
shard(f"{d}/short.bin", toks[:100])
shard(f"{d}/trunc.bin", toks, count=50000)
open(f"{d}/junk.bin", "wb").write(b"this is not a model file" * 100)
EOF
SMALL="-e d2 -i $tmp/train.bin -j $tmp/train.bin -t 32 -v 0 -s 0 -l 1e-3 --seed 5"
TS_TRAIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin TS_VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin

# ---------------------------------------------------------------------------
# bad input: exit code 1 (not a crash) and a message naming the flag or file
expect_error "unknown flag"            "-zz"             $BIN $SMALL -zz 1
expect_error "malformed value"         "-b"              $BIN $SMALL -b 4x
expect_error "missing value"           "-x"              $BIN $SMALL -x
expect_error "missing model file"      "$tmp/none.bin"   $BIN $SMALL -e "$tmp/none.bin"
expect_error "unknown ZeRO backend"    "--zero-backend"  $BIN $SMALL --zero-backend gpu
expect_error "device backend on CPU"   "--zero-backend device" $BIN $SMALL --zero-backend device
expect_error "--dpu on CPU"            "--dpu"           $BIN $SMALL --dpu 1
expect_error "--dpu out of range"      "--dpu"           $BIN $SMALL --dpu 2
expect_error "not a model file"        "$tmp/junk.bin"   $BIN $SMALL -e "$tmp/junk.bin"
expect_error "bad descriptor"          "d2x"             $BIN $SMALL -e d2x
expect_error "missing train data"      "$tmp/nothing*"   $BIN $SMALL -i "$tmp/nothing*"
expect_error "shard bad magic"         "badmagic.bin"    $BIN $SMALL -i "$tmp/badmagic.bin"
expect_error "shard shorter than a batch" "short.bin"    $BIN $SMALL -i "$tmp/short.bin"
expect_error "truncated shard"         "trunc.bin"       $BIN $SMALL -i "$tmp/trunc.bin"
expect_error "T above the model's max" "-t"              $BIN $SMALL -t 2048
expect_error "batch does not divide"   "-d"              $BIN $SMALL -b 4 -d 1000
expect_error "checkpoints without -o"  "-o"              $BIN $SMALL -n 5
expect_error "ZeRO stage out of range" "-z"             $BIN $SMALL -z 4
expect_error "param nvme without optimizer offload" "offload_param nvme" $BIN $SMALL -z 3 --offload-param nvme --nvme-path "$tmp"
expect_error "fp16 gradient reductions" "fp16 is not supported" $BIN $SMALL --communication-data-type fp16
expect_error "unwritable report"       "$tmp/no/dir/r.json" $BIN $SMALL -b 2 -x 1 --report "$tmp/no/dir/r.json"
expect_error "bad val data"            "badmagic.bin"    $BIN $SMALL -v 5 -j "$tmp/badmagic.bin"
expect_error "negative vocabulary tile" "--vocab-tile"   $BIN $SMALL --vocab-tile -8
expect_error "vocabulary tile not a number" "--vocab-tile" $BIN $SMALL --vocab-tile 1k

# a bad model file truncated from a good one: write one, then cut it
$BIN $SMALL -b 2 -x 1 -n 1 -o "$tmp/ck0" > /dev/null 2>&1
if [ -f "$tmp/ck0/model_00000001.bin" ]; then
    head -c 100000 "$tmp/ck0/model_00000001.bin" > "$tmp/cut.bin"
    expect_error "truncated model"     "truncated"       $BIN $SMALL -e "$tmp/cut.bin"
else
    bad "writing a checkpoint for the truncated-model test"
fi

# ---------------------------------------------------------------------------
# Data parallel: the same global batch of 8 sequences split three ways. fp32 sums in
# a different order (per-rank sgemm of 4 rows vs 8, the all-reduce, the accumulation)
# differ by a few ulps of the gradient; over 4 AdamW steps at lr 1e-3 they move the
# loss (about 10.8) by far less than 1e-4 (we saw ~1e-6). A real bug in the layout
# or the averaging (a wrong offset, a missing 1/N) moves it by more than 1e-2.
DP="$SMALL -x 4 --shuffle 0"
$BIN $DP -b 8 --report "$tmp/dp1.json" > "$tmp/dp1.log" 2>&1 || bad "N=1 B=8 run ($(tail -1 "$tmp/dp1.log"))"
$MPIRUN -np 2 $BIN $DP -b 4 --report "$tmp/dp2.json" > "$tmp/dp2.log" 2>&1 || bad "N=2 B=4 run ($(tail -1 "$tmp/dp2.log"))"
$BIN $DP -b 4 -d 256 --report "$tmp/acc.json" > "$tmp/acc.log" 2>&1 || bad "N=1 B=4 accumulation run ($(tail -1 "$tmp/acc.log"))"
if [ -f "$tmp/dp1.json" ] && [ -f "$tmp/dp2.json" ] && [ -f "$tmp/acc.json" ]; then
    losses "$tmp/dp1.json" > "$tmp/l1"; losses "$tmp/dp2.json" > "$tmp/l2"; losses "$tmp/acc.json" > "$tmp/l3"
    d12=$(maxdiff "$tmp/l1" "$tmp/l2"); d13=$(maxdiff "$tmp/l1" "$tmp/l3")
    $PY -c "import sys; sys.exit(0 if $d12 < 1e-4 else 1)" && ok "N=2 x B=4 equals N=1 x B=8 (max diff $d12)" || bad "N=2 x B=4 vs N=1 x B=8: max diff $d12"
    $PY -c "import sys; sys.exit(0 if $d13 < 1e-4 else 1)" && ok "2 accumulation steps equal one batch of 8 (max diff $d13)" || bad "accumulation: max diff $d13"
    # and the runs really trained: the loss moved
    $PY -c "import sys; a=[float(x) for x in open('$tmp/l1')]; sys.exit(0 if a[0]-a[-1] > 0.3 else 1)" && ok "the loss falls over 4 steps" || bad "the loss did not fall: $(tr '\n' ' ' < "$tmp/l1")"
fi
# OpenBLAS's kernels (llmc/blas.h): on a CPU with AVX2 and FMA the trainer never runs
# OpenBLAS's Prescott (SSE3) fallback, which it picks for a CPU it does not know;
# OPENBLAS_CORETYPE, the user's, is kept even when it names Prescott. Both kernel sets
# compute the same fp32 products in other orders: the losses agree as the data-parallel
# splits above do (< 1e-4), bit-identical runs aside.
OPENBLAS_CORETYPE=Prescott $BIN $DP -b 8 --report "$tmp/presc.json" > "$tmp/presc.log" 2>&1 || bad "run with OPENBLAS_CORETYPE=Prescott ($(tail -1 "$tmp/presc.log"))"
if grep -q "OpenBLAS Prescott kernels" "$tmp/presc.log" && ! grep -q "^note: OpenBLAS" "$tmp/presc.log"; then
    ok "OPENBLAS_CORETYPE=Prescott is kept: the header says Prescott, no note"
else
    bad "OPENBLAS_CORETYPE=Prescott: $(grep -m1 "OpenBLAS" "$tmp/presc.log")"
fi
kernels=$(sed -nE 's/.*OpenBLAS ([A-Za-z0-9]+) kernels.*/\1/p' "$tmp/dp1.log" | head -1)
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    [ -n "$kernels" ] && [ "$kernels" != Prescott ] && ok "AVX2 CPU: the trainer runs OpenBLAS's $kernels kernels, not Prescott's" \
        || bad "AVX2 CPU: the header says OpenBLAS '${kernels}' kernels"
else
    [ -n "$kernels" ] && ok "no AVX2: the header names OpenBLAS's $kernels kernels" || bad "the header names no OpenBLAS kernels"
fi
if [ -f "$tmp/presc.json" ] && [ -f "$tmp/dp1.json" ]; then
    losses "$tmp/presc.json" > "$tmp/lp"; losses "$tmp/dp1.json" > "$tmp/lsel"
    d=$(maxdiff "$tmp/lsel" "$tmp/lp")
    $PY -c "import sys; sys.exit(0 if $d < 1e-4 else 1)" && ok "Prescott's kernels and the selected ones: the same losses (max diff $d)" || bad "kernels: max diff $d"
fi
# --communication-data-type: the host engine's gradients are fp32 and reduced in fp32
# whatever it says (fp32: the same run bit for bit; bf16: the same, with a warning)
for m in fp32 bf16; do
    $MPIRUN -np 2 $BIN $DP -b 4 --communication-data-type $m --report "$tmp/dpc_$m.json" > "$tmp/dpc_$m.log" 2>&1 || bad "N=2 run with --communication-data-type $m"
    if [ -f "$tmp/dp2.json" ] && [ -f "$tmp/dpc_$m.json" ]; then
        losses "$tmp/dpc_$m.json" > "$tmp/lc"
        d=$(maxdiff "$tmp/l2" "$tmp/lc")
        within "$d" 0 && ok "--communication-data-type $m on the host engine: the same losses, bit for bit" || bad "--communication-data-type $m: max diff $d"
    fi
done
grep -q "communication data type bf16 has no effect" "$tmp/dpc_bf16.log" && ok "bf16 reductions on the CPU trainer: a warning says they have no effect" \
    || bad "no warning for --communication-data-type bf16 on the CPU trainer"

# ---------------------------------------------------------------------------
# Vocabulary tiles (--vocab-tile): the classifier in tiles of 1000 columns (51 tiles of the
# 50304, the last of 304 holding the vocabulary's end and the padding) gives the untiled
# run's training losses, validation losses and sample. Both compute the same fp32
# expressions: the tiled softmax sum is rounded once per tile (51 roundings, 3e-6 of the
# sum, 3e-6 of a loss of ~10.8) and sgemm sums over other blocks of columns; over 4 AdamW
# steps at lr 1e-3 such differences move the loss by far less than 1e-4 (seen: 0, the
# same bits), while a sum not rescaled when the max grows, or a target taken from the
# wrong tile, moves it by 1e-2 .. 1. At stage 0 on one rank and at stage 3 on two.
VT="$SMALL -b 4 -x 4 --shuffle 0 -v 2 -m 2 -s 4 -g 8 -i $TS_TRAIN -j $TS_VAL"
sample() { awk '/^generating:/{getline; f=1; next} /^---$/{f=0} f' "$1"; }
for cfg in "1 0" "2 3"; do
    set -- $cfg
    run "vt_u$1" "$1" $VT -z "$2" && run "vt_t$1" "$1" $VT -z "$2" --vocab-tile 1000
    if [ -f "$tmp/vt_u$1.json" ] && [ -f "$tmp/vt_t$1.json" ]; then
        losses "$tmp/vt_u$1.json" > "$tmp/vu"; losses "$tmp/vt_t$1.json" > "$tmp/vt"
        d=$(maxdiff "$tmp/vu" "$tmp/vt")
        within "$d" 1e-4 && ok "--vocab-tile 1000 at N=$1 stage $2: the untiled losses (max diff $d)" || bad "--vocab-tile 1000 at N=$1 stage $2: max diff $d"
        $PY - "$tmp/vt_u$1.json" "$tmp/vt_t$1.json" <<'EOF' && ok "--vocab-tile 1000 at N=$1 stage $2: the untiled validation losses, less activation memory" || bad "--vocab-tile at N=$1 stage $2: validation or memory"
import json, sys
u, t = (json.load(open(p)) for p in sys.argv[1:3])
assert len(u["val"]) == len(t["val"]) == 3
assert all(abs(a["loss"] - b["loss"]) <= 1e-4 for a, b in zip(u["val"], t["val"])), (u["val"], t["val"])
mu, mt = u["memory"]["per_rank"][0]["activations"], t["memory"]["per_rank"][0]["activations"]
assert mt < mu / 4, (mu, mt)
EOF
        [ -n "$(sample "$tmp/vt_u$1.log")" ] && [ "$(sample "$tmp/vt_u$1.log")" = "$(sample "$tmp/vt_t$1.log")" ] \
            && ok "--vocab-tile 1000 at N=$1 stage $2: the untiled run's sample" || bad "--vocab-tile at N=$1 stage $2: samples differ"
    else
        bad "--vocab-tile runs at N=$1 stage $2"
    fi
done

# ---------------------------------------------------------------------------
# Checkpoints: 6 steps straight vs 3 steps, stop, resume to 6. Shuffling on, so the
# dataloader position and epoch order must be restored too; equal to the last bit.
# The stop is made with -x 3, so the schedule must not depend on -x: warmup then a
# constant learning rate (a cosine's shape follows -x). With -a 1 (overfit the first
# batch) the resumed steps train on that batch again, as the straight run does (the saved
# position is the batch after it: resumed there, the losses went up).
resume_test() {  # resume_test N [FLAGS]
    local n=$1 extra=${2:-} run="$BIN"
    [ "$n" -gt 1 ] && run="$MPIRUN -np $n $BIN"
    local R="$SMALL -b 2 --shuffle 1 -k constant -u 2 -c 0.1 $extra" id=$n${extra// /}
    $run $R -x 6 --report "$tmp/full$id.json" > "$tmp/full$id.log" 2>&1
    $run $R -x 3 -o "$tmp/part$id" -n 3 > "$tmp/part$id.log" 2>&1
    $run $R -x 6 -o "$tmp/part$id" -n 3 -y 1 --report "$tmp/res$id.json" > "$tmp/res$id.log" 2>&1
    if ! grep -q "resumed from" "$tmp/res$id.log"; then bad "resume N=$n${extra:+ $extra}: did not resume ($(tail -2 "$tmp/res$id.log" | tr '\n' ' '))"; return; fi
    losses "$tmp/full$id.json" | tail -3 > "$tmp/f"; losses "$tmp/res$id.json" > "$tmp/r"
    if [ -s "$tmp/r" ] && cmp -s "$tmp/f" "$tmp/r"; then ok "resume at N=$n${extra:+ $extra} is bit-identical ($(wc -l < "$tmp/r") steps)"
    else bad "resume at N=$n${extra:+ $extra} differs: $(tr '\n' ' ' < "$tmp/f") vs $(tr '\n' ' ' < "$tmp/r")"; fi
}
resume_test 1
resume_test 2
resume_test 1 "-a 1"
ls "$tmp/part1"/*.tmp > /dev/null 2>&1 && bad "temporary checkpoint files left behind" || ok "no temporary files left in the checkpoint directory"

# A checkpoint that cannot be written (here a file-size limit, as on a full disk) is a
# clear error; the earlier checkpoint stays complete and is the one resumed from. The
# limit (20 MB) is below the d2 model file (28 MB) and above what MPI itself writes.
R1="$SMALL -b 2 --shuffle 1 -k constant -u 2 -c 0.1"
$BIN $R1 -x 2 -o "$tmp/full_disk" -n 1 > /dev/null 2>&1
size2=$(stat -c %s "$tmp/full_disk/model_00000002.bin" 2>/dev/null)
(ulimit -f 20000; exec $BIN $R1 -x 4 -o "$tmp/full_disk" -n 1 -y 1) > "$tmp/fd.out" 2> "$tmp/fd.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "model_00000003.bin" "$tmp/fd.err" && grep -qi "too large" "$tmp/fd.err"; then
    ok "a checkpoint that does not fit fails with a clear error (exit $rc)"
else
    bad "full disk: exit $rc, $(tail -2 "$tmp/fd.err" | tr '\n' ' ')"
fi
[ ! -e "$tmp/full_disk/DONE_00000003" ] && ! ls "$tmp/full_disk"/*.tmp > /dev/null 2>&1 \
    && [ "$(stat -c %s "$tmp/full_disk/model_00000002.bin")" = "$size2" ] \
    && ok "after the failed save: no marker, no temporary files, step 2 intact" || bad "the failed save left debris: $(ls "$tmp/full_disk")"
$BIN $R1 -x 3 -o "$tmp/full_disk" -y 1 > "$tmp/fd2.out" 2>&1 && grep -q "resumed from .* at step 2" "$tmp/fd2.out" \
    && ok "the run resumes from the last complete checkpoint" || bad "resume after a failed save: $(tail -2 "$tmp/fd2.out")"

# resuming with another batch shape would read other data: refused, naming it
expect_error "resume with another -b" "-b 2" $BIN $R1 -b 4 -x 4 -o "$tmp/full_disk" -y 1
# a run that saves a step again over an earlier run's checkpoint first takes its DONE
# marker away: the files being replaced (here the model file, which no longer fits) never
# count as complete
[ -e "$tmp/full_disk/DONE_00000001" ] || bad "setup: no DONE_00000001 in $tmp/full_disk"
(ulimit -f 20000; exec $BIN $R1 -x 2 -o "$tmp/full_disk" -n 1) > /dev/null 2>&1
if [ ! -e "$tmp/full_disk/DONE_00000001" ] && [ -e "$tmp/full_disk/DONE_00000002" ]; then
    ok "saving a step again removes its old DONE marker first"
else
    bad "a half-rewritten checkpoint still has its DONE marker: $(ls "$tmp/full_disk" | tr '\n' ' ')"
fi

# a saved checkpoint is an llm.c model file that loads with -e and trains on
if [ -f "$tmp/part1/model_00000003.bin" ] && $BIN $SMALL -b 2 -x 1 -e "$tmp/part1/model_00000003.bin" > "$tmp/load.log" 2>&1; then
    ok "a checkpoint loads as a model with -e"
else
    bad "loading a checkpoint with -e: $(tail -2 "$tmp/load.log" 2>/dev/null | tr '\n' ' ')"
fi
# --save-bf16 1: the model file is llm.c's bf16 version 5 (what llm.c's GPU trainer reads),
# every parameter the fp32 master rounded to nearest even; it loads with -e too
$BIN $SMALL -b 2 -x 2 -n 2 -o "$tmp/bf16ck" --save-bf16 1 > "$tmp/bf16ck.log" 2>&1
if [ -f "$tmp/bf16ck/model_00000002.bin" ] && $PY - "$tmp/bf16ck/model_00000002.bin" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", data[:1024])
L, C, Vp, maxT = h[4], h[6], h[7], h[2]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
assert h[0] == 20240326 and h[1] == 5 and len(data) == 1024 + 2 * n, (h[:8], len(data), n)
EOF
then
    if $BIN $SMALL -b 2 -x 1 -e "$tmp/bf16ck/model_00000002.bin" > "$tmp/loadbf16.log" 2>&1; then
        ok "--save-bf16 1 writes llm.c's version 5 model file (bf16, llm.c's size) and it loads with -e"
    else
        bad "loading a bf16 checkpoint with -e: $(tail -1 "$tmp/loadbf16.log")"
    fi
else
    bad "--save-bf16 1: no version 5 model file ($(tail -1 "$tmp/bf16ck.log"))"
fi

# ---------------------------------------------------------------------------
# the report holds the contract's fields, with per-rank memory for every rank
if [ -f "$tmp/dp2.json" ]; then
    $PY - "$tmp/dp2.json" "$tmp/dp2.log" <<'EOF' && ok "report fields (world_size 2, steps, memory.per_rank, comm, startup)" || bad "report fields"
import json, re, sys
r = json.load(open(sys.argv[1]))
# start-up: the whole, the engine's build within it, the initial parameters within that; the
# log's line says the same, to its one decimal
su = r["startup"]
assert su["seconds"] >= su["engine_seconds"] >= su["fill_seconds"] > 0, su
m = re.search(r"^start-up: ([0-9.]+) s to the first step \(the engine's build ([0-9.]+) s, of which the initial parameters ([0-9.]+) s\)$",
              open(sys.argv[2]).read(), re.M)
assert m and [float(x) for x in m.groups()] == [round(su[k], 1) for k in ("seconds", "engine_seconds", "fill_seconds")], (m and m.groups(), su)
assert r["world_size"] == 2 and r["zero_stage"] == 0
assert r["num_parameters"] > 0
assert len(r["steps"]) == 4
for s in r["steps"]:
    assert set(["step", "loss", "ms", "tokens_per_s"]) <= set(s), s
    assert s["ms"] > 0 and s["tokens_per_s"] > 0
mem = r["memory"]["per_rank"]
assert [m["rank"] for m in mem] == [0, 1]
P = r["num_parameters_padded"]   # units padded to 256-byte shards: under 2 x 64 floats a unit
assert 0 <= P - r["num_parameters"] < 4 * 2 * 64
for m in mem:
    # fp32, stage 0: params and grads 4 bytes per parameter, AdamW's m and v 8
    assert m["params"] == 4 * P and m["grads"] == m["params"]
    assert m["optimizer"] == 2 * m["params"] and m["activations"] > 0
    assert m["peak"] >= m["params"] + m["grads"] + m["optimizer"] + m["activations"]
c = r["comm"]["per_rank_bytes_per_step"]
# a ring all-reduce over 2 ranks moves 2 (N-1)/N = 1x the gradient bytes per rank
assert c["allreduce"] == 4 * P, c
assert c["allgather"] == 0 and c["reduce_scatter"] == 0
EOF
fi

# ---------------------------------------------------------------------------
# --profile-ops: the last 2 of 4 steps timed op by op; the table, the report's rows,
# main.jsonl's, the timeline and the marked steps agree (test/e2e/check_ops.py); no device
# rates on the CPU, so no floors
if $BIN $DP -b 2 --profile-ops 2 -o "$tmp/prof" --report "$tmp/prof.json" > "$tmp/prof.log" 2>&1; then
    $PY test/e2e/check_ops.py "$tmp/prof.json" "$tmp/prof" "$tmp/prof.log" 2 0 0 encoder qkv attention attention_bwd ln1_bwd \
        classifier optimizer > "$tmp/prof.check" 2>&1
    grep -E '^(PASS|FAIL) ' "$tmp/prof.check"
    read -r p f < <(tail -1 "$tmp/prof.check")
    pass=$((pass + ${p:-0})); fail=$((fail + ${f:-1}))
else
    bad "--profile-ops run: $(tail -2 "$tmp/prof.log" | tr '\n' ' ')"
fi

# ---------------------------------------------------------------------------
# real data: tinyshakespeare, the loss falls well below the uniform 10.8, and a
# sample is decoded with the tokenizer file
TS=dev/data/tinyshakespeare
$BIN -e d2 -i $TS/tiny_shakespeare_train.bin -j $TS/tiny_shakespeare_val.bin -b 8 -t 64 -x 30 \
     -l 2e-3 -u 5 -v 30 -m 4 -s 30 -g 24 --report "$tmp/ts.json" > "$tmp/ts.log" 2>&1
if [ -f "$tmp/ts.json" ]; then
    $PY - "$tmp/ts.json" <<'EOF' && ok "tinyshakespeare: loss falls by more than 2 nats in 30 steps" || bad "tinyshakespeare loss: $(grep -E '^step' "$tmp/ts.log" | sed -n '1p;$p' | tr '\n' ' ')"
import json, sys
r = json.load(open(sys.argv[1]))
first, last = r["steps"][0]["loss"], r["steps"][-1]["loss"]
assert first > 10 and last < first - 2, (first, last)
assert r["val"][-1]["loss"] < r["val"][0]["loss"] - 2, r["val"]
EOF
    # the sample is text between the --- lines: decoded pieces, not <token ids>
    sample=$(awk '/^generating:/{getline; f=1; next} /^---$/{f=0} f' "$tmp/ts.log")
    if [ -n "$sample" ] && ! grep -q '<[0-9]*>' <<< "$sample"; then ok "a decoded text sample is printed"
    else bad "sample: '$sample'"; fi
else
    bad "tinyshakespeare run: $(tail -3 "$tmp/ts.log" | tr '\n' ' ')"
fi

finish
