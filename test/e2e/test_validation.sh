#!/usr/bin/env bash
# Input validation and non-finite steps, end to end on ./train_gpt2_zero3_cpu (run from the
# repo root after `make train_gpt2_zero3_cpu`):
#   bad files    a crafted bad file of each class (token shards, model file, tokenizer,
#                --ds-config JSON, checkpoint state) ends the run with a non-zero exit and a
#                message naming the file and the offset or value
#   non-finite   a step whose loss is not finite (the test hook ZERO3_TEST_NAN_STEP, or a
#                model with a huge parameter) is skipped: parameters and AdamW moments stay
#                bit for bit, the step line and the report say so, and --max-skipped-steps
#                stops the run with a message and a non-zero exit, and so does a run
#                whose every step was skipped
#   not files    a directory as -e or --ds-config, a config over 1 MiB, -g beyond -t, -l
#                below float's normal range, a resume with another model's shape
# A tiny model file (V 256 padded to 320, 1 layer, 32 channels) keeps every run short.
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, expect_error, engine_state

$PY - "$tmp" <<'EOF'
import sys, struct, numpy as np
d = sys.argv[1]
maxT, V, L, NH, C, Vp = 64, 256, 1, 2, 32, 320
def shard(path, toks, magic=20240520, count=None):
    h = np.zeros(256, dtype=np.int32); h[0] = magic; h[1] = 1
    h[2] = len(toks) if count is None else count
    open(path, "wb").write(h.tobytes() + np.asarray(toks, dtype=np.uint16).tobytes())
rng = np.random.RandomState(3)
toks = rng.randint(0, V, 6000)
shard(f"{d}/train.bin", toks)
for name, i, v in [("id_v", 5, V), ("id_vp1", 7, Vp - 1), ("id_big", 9, 60000)]:
    t = toks.copy(); t[i] = v; shard(f"{d}/{name}.bin", t)
shard(f"{d}/magic.bin", toks, magic=1234)
shard(f"{d}/trunc.bin", toks, count=7000)
# llm.c's model file: the header, then the 16 kinds in order
def model(path, header=(maxT, V, L, NH, C, Vp), poke=None, cut=None):
    maxT_, V_, L_, NH_, C_, Vp_ = header
    h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, 3, maxT_, V_, L_, NH_, C_, Vp_]
    r = np.random.RandomState(1)
    kinds = [(Vp*C, .02), (maxT*C, .02), (L*C, 1), (L*C, 0), (L*3*C*C, .02), (L*3*C, 0), (L*C*C, .02), (L*C, 0),
             (L*C, 1), (L*C, 0), (L*4*C*C, .02), (L*4*C, 0), (L*C*4*C, .02), (L*C, 0), (C, 1), (C, 0)]
    p = np.concatenate([np.ones(n, np.float32) if s == 1 else (r.randn(n) * s).astype(np.float32) for n, s in kinds])
    if poke is not None: p[poke[0]] = poke[1]
    b = h.tobytes() + p.tobytes()
    open(path, "wb").write(b if cut is None else b[:cut])
model(f"{d}/tiny.bin")
model(f"{d}/heads.bin", header=(maxT, V, L, 3, C, Vp))       # 32 channels over 3 heads
model(f"{d}/heads4.bin", header=(maxT, V, L, 4, C, Vp))      # tiny.bin's parameters, 4 heads of 8
model(f"{d}/vp.bin", header=(maxT, V, L, NH, C, 100))        # padded vocabulary below V
model(f"{d}/cut.bin", cut=20000)
model(f"{d}/nan.bin", poke=(Vp*C + 7, np.nan))              # wpe element 7: byte 1024 + 4*(Vp*C + 7)
model(f"{d}/huge.bin", poke=(3, 3e38))                       # wte[0][3]: every loss is infinite
# the tokenizer: header, then per token a length byte and the bytes (3 here); cut inside
# token 130, where the body is still long enough for 256 tokens of one byte
tok = np.zeros(256, dtype=np.uint32); tok[:4] = [20240328, 2, V, V - 1]
body = b"".join(bytes([3, i, i, i]) for i in range(V))
open(f"{d}/tok_cut.bin", "wb").write(tok.tobytes() + body[:4 * 130 + 2])
open(f"{d}/ds_type.json", "w").write('{"train_micro_batch_size_per_gpu": "two"}')
open(f"{d}/ds_big.json", "w").write('{"steps_per_print": 1' + ' ' * (1 << 20) + '}')   # 1 MiB + 22 bytes
EOF
M="-e $tmp/tiny.bin -i $tmp/train.bin -j $tmp/train.bin -b 2 -t 16 -v 0 -s 0 -l 1e-3 --seed 5 --shuffle 0"

# ---------------------------------------------------------------------------
# bad files: the run stops with exit 1 and names the file and the offset or value
expect_error "shard: token id = V"          "id_v.bin: token 5 (byte offset 1034) is 256"    $BIN $M -x 2 -i "$tmp/id_v.bin"
expect_error "shard: token id = Vp-1"       "id_vp1.bin: token 7 (byte offset 1038) is 319"  $BIN $M -x 2 -i "$tmp/id_vp1.bin"
expect_error "shard: token id past Vp"      "id_big.bin: token 9 (byte offset 1042) is 60000" $BIN $M -x 2 -i "$tmp/id_big.bin"
expect_error "val shard: token id = V"      "id_v.bin: token 5"   $BIN $M -x 2 -v 1 -j "$tmp/id_v.bin"
expect_error "shard: bad id at 2 ranks"         "id_v.bin: token 5"   $MPIRUN -np 2 $BIN $M -x 2 -b 1 -i "$tmp/id_v.bin"
expect_error "shard: wrong magic"           "magic.bin has bad magic 1234"  $BIN $M -x 2 -i "$tmp/magic.bin"
expect_error "shard: truncated"             "trunc.bin is truncated"        $BIN $M -x 2 -i "$tmp/trunc.bin"
expect_error "model: C not divisible by NH" "channels 32 not divisible by num_heads 3" $BIN $M -x 1 -e "$tmp/heads.bin"
expect_error "model: Vp below V"            "padded_vocab_size 100 must be >= vocab_size 256" $BIN $M -x 1 -e "$tmp/vp.bin"
expect_error "model: truncated"             "cut.bin is 20000 bytes"        $BIN $M -x 1 -e "$tmp/cut.bin"
expect_error "model: NaN parameter"         "nan.bin: parameter wpe element 7 (byte offset $((1024 + 4 * (320 * 32 + 7)))) is nan" \
    $BIN $M -x 1 -e "$tmp/nan.bin"
# at 2 ranks wpe element 7 (unit 0's element 320*32 + 7) lies in rank 1's shard (unit 0 is
# 12288 elements, 6144 a shard): only rank 1 reads it; every rank stops, the message names it
expect_error "model: NaN in rank 1's shard at 2 ranks" "nan.bin: parameter wpe element 7 (byte offset $((1024 + 4 * (320 * 32 + 7)))) is nan, not a finite number (rank 1's shard)" \
    timeout 120 $MPIRUN -np 2 $BIN $M -x 1 -b 1 -z 3 -e "$tmp/nan.bin"
expect_error "tokenizer cut inside a token" "tok_cut.bin: truncated: token 130 (byte offset 1544) needs 3 bytes, 1 left" \
    $BIN $M -x 1 -s 1 --tokenizer "$tmp/tok_cut.bin"
expect_error "ds-config: wrong type"        "train_micro_batch_size_per_gpu" $BIN $M -x 1 --ds-config "$tmp/ds_type.json"
# what is not a file of its kind is named as what it is (a directory read as a model
# file was "truncated: shorter than its 1024-byte header", as a config "read error")
mkdir -p "$tmp/adir"
expect_error "model: a directory"           "cannot open model file $tmp/adir: it is a directory, not a regular file" $BIN $M -x 1 -e "$tmp/adir"
expect_error "ds-config: a directory"       "--ds-config $tmp/adir: cannot open: it is a directory, not a regular file" $BIN $M -x 1 --ds-config "$tmp/adir"
expect_error "ds-config: over 1 MiB"        "ds_big.json: 1048598 bytes, over the limit of 1048576 bytes (1 MiB)" \
    $BIN $M -x 1 --ds-config "$tmp/ds_big.json"
# flags: a sample longer than the sequence is refused (it was cut to -t); a learning rate
# below float's normal range is one (it was "out of range [0, 10]"), one no float holds is not
expect_error "-g beyond -t"                 "flag -g: 17 tokens per sample is more than the sequence length -t 16" $BIN $M -x 1 -s 1 -g 17
$BIN $M -x 1 -l 1e-45 > "$tmp/lr.log" 2>&1 && ok "-l 1e-45 (a subnormal float) trains" || bad "-l 1e-45: $(grep -m1 error "$tmp/lr.log")"
expect_error "-l 1e-50"                     "flag -l: 1e-50 is too small for a float: it would be 0" $BIN $M -x 1 -l 1e-50

# checkpoint state files: cut short, and a header field out of range. The checkpoint's
# manifest would name the damage first: an empty DONE marker, as an earlier version wrote
# it, resumes unverified with --allow-unverified 1, so the state file's own checks are what is left
if $BIN $M -x 2 -n 2 -o "$tmp/ck" > "$tmp/ck.log" 2>&1 && [ -f "$tmp/ck/DONE_00000002" ]; then
    : > "$tmp/ck/DONE_00000002"
    st="$tmp/ck/state_00000002_00000.bin"
    cp "$st" "$tmp/state.bak"
    size=$(stat -c %s "$st")
    head -c $((size - 8)) "$tmp/state.bak" > "$st"
    expect_error "checkpoint: state file cut short" "state_00000002_00000.bin is $((size - 8)) bytes but its headers describe $size" \
        $BIN $M -x 4 -o "$tmp/ck" -y 1 --allow-unverified 1
    # B (int32 at byte 64 of CheckpointHeader) set to 0
    cp "$tmp/state.bak" "$st"
    printf '\x00\x00\x00\x00' | dd of="$st" bs=1 seek=64 conv=notrunc status=none
    expect_error "checkpoint: header out of range" "state_00000002_00000.bin: header out of range" $BIN $M -x 4 -o "$tmp/ck" -y 1 --allow-unverified 1
else
    bad "writing a checkpoint for the state-file tests ($(tail -1 "$tmp/ck.log"))"
fi

# ---------------------------------------------------------------------------
# non-finite: step 2 (0-based, the report's "step") of 5 gets a NaN loss on the last rank.
# Its update is skipped, so the checkpoint after it (step 3) holds exactly the model and
# engine state of the one before it (step 2); the report and the step line record it.
for cfg in "1 0" "1 3" "2 0" "2 3"; do
    set -- $cfg
    n=$1 z=$2 name="nan_n$1_z$2"
    if ZERO3_TEST_NAN_STEP=2 run "$name" "$n" $M -x 5 -z "$z" -n 1 -o "$tmp/$name"; then
        d="$tmp/$name"
        cmp -s "$d/model_00000002.bin" "$d/model_00000003.bin" && ok "$name: the skipped step left the model bit for bit" \
            || bad "$name: model_2 and model_3 differ"
        cmp -s "$d/model_00000003.bin" "$d/model_00000004.bin" && bad "$name: the step after the skip did not update" \
            || ok "$name: the step after the skip updates again"
        same=1
        for ((r = 0; r < n; r++)); do
            cmp -s <(engine_state "$d/state_00000002_0000$r.bin") <(engine_state "$d/state_00000003_0000$r.bin") || same=0
        done
        [ $same -eq 1 ] && ok "$name: every rank's parameters and AdamW moments unchanged by the skip" \
            || bad "$name: an engine state changed over the skipped step"
        $PY -c "
import json, sys
r = json.load(open(sys.argv[1]))
ok = r['skipped_steps'] == 1 and [s['skipped'] for s in r['steps']] == [False, False, True, False, False]
sys.exit(0 if ok else 1)" "$tmp/$name.json" && ok "$name: the report marks step 2 skipped, skipped_steps 1" \
            || bad "$name: the report's skipped fields are wrong"
        [ "$(grep -c 'skipped (non-finite loss/norm)' "$tmp/$name.log")" = 1 ] && grep -q "step    3/5.*skipped (non-finite" "$tmp/$name.log" \
            && ok "$name: step line 3 says skipped (non-finite loss/norm)" || bad "$name: no step line says skipped"
    else
        bad "$name: the run with one non-finite step failed"
    fi
done

# the skip count is part of a checkpoint: a resume after a skipped step continues as the
# run without a stop does (AdamW's step counter included), loss for loss
R="$M -k constant -u 2"
ZERO3_TEST_NAN_STEP=1 run skipfull 1 $R -x 5
ZERO3_TEST_NAN_STEP=1 run skippart 1 $R -x 3 -n 3 -o "$tmp/skipres" > /dev/null
ZERO3_TEST_NAN_STEP=1 run skipres 1 $R -x 5 -o "$tmp/skipres" -y 1
if [ -f "$tmp/skipfull.json" ] && [ -f "$tmp/skipres.json" ]; then
    losses "$tmp/skipfull.json" | tail -2 > "$tmp/sf"; losses "$tmp/skipres.json" > "$tmp/sr"
    cmp -s "$tmp/sf" "$tmp/sr" && ok "resumed after a skipped step: the same losses bit for bit" \
        || bad "resume after a skip differs: $(tr '\n' ' ' < "$tmp/sf") vs $(tr '\n' ' ' < "$tmp/sr")"
else
    bad "the resume-after-skip runs"
fi

# --max-skipped-steps: a model whose every loss is infinite. N skips in a row are borne,
# the next stops the run with exit 1 and a message; the checkpoints written are finite
# and complete, the report records the skips
expect_error "stop after 2+1 skipped steps" "stopping at step 3: 3 consecutive steps had a non-finite loss or gradient norm" \
    $BIN $M -x 10 -e "$tmp/huge.bin" --max-skipped-steps 2 -n 1 -o "$tmp/huge" --report "$tmp/huge.json"
[ -f "$tmp/huge/DONE_00000002" ] && [ ! -f "$tmp/huge/DONE_00000003" ] && ok "the checkpoints before the stop are complete, none after" \
    || bad "checkpoints around the stop: $(ls "$tmp/huge" | tr '\n' ' ')"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['skipped_steps']==3 and len(r['steps'])==3 else 1)" "$tmp/huge.json" \
    && ok "the report of the stopped run holds its 3 skipped steps" || bad "the stopped run's report"
expect_error "--max-skipped-steps 0 stops at the first" "stopping at step 2: 1 consecutive step had" \
    env ZERO3_TEST_NAN_STEP=1 $MPIRUN -np 2 $BIN $M -x 5 -z 3 --max-skipped-steps 0
expect_error "--max-skipped-steps out of range" "--max-skipped-steps" $BIN $M -x 1 --max-skipped-steps -1
# a run whose every step was skipped trained nothing: exit 1 with a message (it was exit 0),
# after its report; one good step among them is a run that trained
expect_error "every step skipped" "every one of this run's 2 steps (steps 1-2) had a non-finite loss or gradient norm and was skipped: nothing was trained" \
    $BIN $M -x 2 -e "$tmp/huge.bin" --report "$tmp/huge2.json"
$PY -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['skipped_steps']==2 else 1)" "$tmp/huge2.json" \
    && ok "the report of the run that trained nothing is written, with its 2 skipped steps" || bad "the all-skipped run's report"
expect_error "the one step skipped, at 2 ranks" "the one step of this run (step 1) had a non-finite loss" \
    env ZERO3_TEST_NAN_STEP=0 $MPIRUN -np 2 $BIN $M -x 1 -b 1
ZERO3_TEST_NAN_STEP=0 $BIN $M -x 2 > "$tmp/one_good.log" 2>&1 && ok "one skipped step and one trained: exit 0" \
    || bad "a run with one good step failed: $(grep -m1 error "$tmp/one_good.log")"

# a resume with a model of another shape than the checkpoint's: tiny.bin's parameters
# in 4 heads where it had 2 (the same parameter count: the state files' check passes)
if $BIN $M -x 1 -n 1 -o "$tmp/ckh" > "$tmp/ckh.log" 2>&1; then
    expect_error "resume with another head count" "the checkpoint at step 1 in $tmp/ckh is of another model than -e $tmp/heads4.bin ($tmp/ckh/model_00000001.bin: heads 2, -e's 4)" \
        $BIN $M -x 2 -n 1 -o "$tmp/ckh" -y 1 -e "$tmp/heads4.bin"
    [ ! -e "$tmp/ckh/DONE_00000002" ] && ./checkpoint_tool verify "$tmp/ckh" > /dev/null 2>&1 \
        && ok "the refused resume wrote nothing; the checkpoint verifies" || bad "the refused resume touched $tmp/ckh"
    # (a copy: -e inside -o as a checkpoint's own file is refused, test_checkpoint.sh)
    cp "$tmp/ckh/model_00000001.bin" "$tmp/ckh_model.bin"
    $BIN $M -x 2 -n 1 -o "$tmp/ckh" -y 1 -e "$tmp/ckh_model.bin" > "$tmp/ckh2.log" 2>&1 \
        && grep -q "resumed from" "$tmp/ckh2.log" && ok "a resume with -e the checkpoint's model file" || bad "resume with the checkpoint's model"
else
    bad "the checkpoint for the head-count test ($(tail -1 "$tmp/ckh.log"))"
fi

finish
