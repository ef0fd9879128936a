#!/usr/bin/env bash
# HellaSwag (-h 1, llm.c's eval file; issue 27) end to end:
#   the file     ./tokenize --hellaswag writes byte for byte what test/e2e/ref_bpe.py writes
#                from the same jsonl by llm.c's recipe (an independent BPE and writer); a
#                bad line is refused naming its line, and no file is left
#   when         at every -v step but step 0, and at the last: main.log's "s:N eval:X"
#                lines and the report's hellaswag array, at those steps only
#   the scores   every completion's score (the mean loss over its tokens) against PyTorch
#                (test/e2e/ref_hellaswag.py, ref_gpt2.py's forward in float64) on the run's
#                checkpointed model; the accuracy is the count of lowest-score completions
#                that are the label, as llm.c's acc_norm
#   anywhere     the same scores at 1, 2 and 3 ranks, stages 0, 2 and 3, with the
#                vocabulary tiled (the GPU trainer's against these: the validation section
#                of test/gpu/test_gpu_trainer.sh, emulated in make test)
#   refusals     a batch too small for an example's completions, a missing file, a token
#                shard given as the eval file, rows longer than -t, a truncated file, a FIFO
#
# Tolerances. The fp32 trainers differ from PyTorch's float64 only in rounding order, as
# in test_reference.sh: tol = max(10 d, 16 fp32 ulps of the score), d = the PyTorch
# float32-vs-float64 difference of that score (ref_hellaswag.py prints it). A wrong mask
# (one position more or less) or row moves a score by 1e-2 or more on this model. Where
# the best two completions are closer than twice the tolerance, the prediction is not
# compared (either is right).
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, expect_error
DATA=dev/data/tinyshakespeare/tiny_shakespeare_val.bin

# ten examples from tinyshakespeare: a line, the line after it among three others
$PY - "$tmp/hs.jsonl" <<'EOF'
import json, random, sys
lines = [l.strip() for l in open("dev/data/tinyshakespeare/input.txt") if len(l.strip().split()) >= 5]
rng = random.Random(7)
with open(sys.argv[1], "w") as f:
    for i in range(10):
        k = rng.randrange(len(lines) - 1)
        label = rng.randrange(4)
        others = [lines[rng.randrange(len(lines))] for _ in range(3)]
        endings = others[:label] + [lines[k + 1]] + others[label:]
        # the label as a number, and as HellaSwag's files sometimes have it, a string
        f.write(json.dumps({"ind": i, "ctx": lines[k], "endings": endings, "label": label if i % 3 else str(label)}) + "\n")
EOF

# ---------------------------------------------------------------------------
# the file
if ./tokenize --hellaswag "$tmp/hs.jsonl" "$tmp/hs.bin" > "$tmp/tok.log" 2>&1 &&
   $PY test/e2e/ref_bpe.py --hellaswag "$tmp/hs.jsonl" "$tmp/ref_hs.bin" > "$tmp/ref_tok.log" 2>&1 &&
   cmp -s "$tmp/hs.bin" "$tmp/ref_hs.bin"; then
    ok "./tokenize --hellaswag: the eval file of llm.c's recipe, byte for byte"
else
    bad "./tokenize --hellaswag differs from ref_bpe.py's ($(cat "$tmp/tok.log" "$tmp/ref_tok.log" | tail -2 | tr '\n' ' '))"
fi
sed -n 3p "$tmp/hs.jsonl" | sed 's/"label": [0-9]*/"label": 4/' > "$tmp/bad_label.jsonl"
sed -n 1p "$tmp/hs.jsonl" > "$tmp/no_ctx.jsonl"; sed -n 2p "$tmp/hs.jsonl" | sed 's/"ctx"/"context"/' >> "$tmp/no_ctx.jsonl"
{ sed -n 1p "$tmp/hs.jsonl"; echo '{"ctx": "a", "endings": ["b",'; } > "$tmp/not_json.jsonl"
expect_error "tokenize: a label past the endings" "bad_label.jsonl line 1: \"label\" must be the index of one of its 4 endings" \
    ./tokenize --hellaswag "$tmp/bad_label.jsonl" "$tmp/x.bin"
expect_error "tokenize: no ctx"   "no_ctx.jsonl line 2: no \"ctx\" string" ./tokenize --hellaswag "$tmp/no_ctx.jsonl" "$tmp/x.bin"
expect_error "tokenize: not JSON" "not_json.jsonl line 2: not JSON" ./tokenize --hellaswag "$tmp/not_json.jsonl" "$tmp/x.bin"
[ ! -e "$tmp/x.bin" ] && [ ! -e "$tmp/x.bin.tmp" ] && ok "tokenize: no eval file left by a failure" || bad "tokenize left $tmp/x.bin"
expect_error "tokenize: the output over its input" "IN.txt" ./tokenize --hellaswag "$tmp/hs.jsonl" "$tmp/hs.jsonl"

# ---------------------------------------------------------------------------
# when: -x 4 -v 2 evaluates at steps 2 and 4; the checkpoint of step 4 is the model scored below
HS="-h 1 --hellaswag-file $tmp/hs.bin"
export ZERO3_TEST_HELLASWAG_DUMP="$tmp/train.dump"
run train 1 -e d2 -i $DATA -j $DATA -b 4 -t 64 -x 4 -v 2 -m 1 -s 0 $HS -n 4 -o "$tmp/run"
unset ZERO3_TEST_HELLASWAG_DUMP
if [ "$(grep eval: "$tmp/run/main.log" | cut -d' ' -f1 | tr '\n' ' ')" = "s:2 s:4 " ]; then
    ok "main.log: s:N eval:X at steps 2 and 4 (every -v but step 0, and the last)"
else
    bad "main.log's eval lines: $(grep eval: "$tmp/run/main.log" | tr '\n' ' ')"
fi
# the accuracy logged = the report's = the count of predictions equal to the labels
$PY - "$tmp/train.json" "$tmp/train.dump" "$tmp/run/main.log" <<'EOF' && ok "accuracy: report = main.log = predictions that are the label" || bad "accuracy"
import json, sys
rep = json.load(open(sys.argv[1]))["hellaswag"]
assert [r["step"] for r in rep] == [2, 4], rep
rows = [l.split() for l in open(sys.argv[2])]
logged = {int(l.split()[0][2:]): float(l.split()[1][5:]) for l in open(sys.argv[3]) if " eval:" in l}
for r in rep:
    mine = [x for x in rows if int(x[0]) == r["step"]]
    assert len(mine) == 10 and r["examples"] == 10, (len(mine), r)
    correct = sum(x[2] == x[3] for x in mine)
    assert r["correct"] == correct and abs(r["accuracy"] - correct / 10) < 1e-7, (r, correct)
    assert abs(logged[r["step"]] - correct / 10) < 1e-4, (logged, r)
EOF

# ---------------------------------------------------------------------------
# the scores against PyTorch, on the model of step 4
if ! $PY test/e2e/ref_hellaswag.py "$tmp/run/model_00000004.bin" "$tmp/hs.bin" "$tmp/ref.txt" > "$tmp/ref.log" 2>&1; then
    bad "ref_hellaswag.py: $(tail -2 "$tmp/ref.log" | tr '\n' ' ')"
    finish; exit
fi
# compare NAME DUMP STEP KIND: DUMP's scores of STEP against the reference (KIND fp32 or bf16)
compare() {
    $PY - "$tmp/ref.txt" "$2" "$3" "$4" <<'EOF' && ok "$1: every score matches PyTorch's ($4)" || bad "$1: scores against PyTorch ($4)"
import sys
ref = {}
for l in open(sys.argv[1]):
    p = l.split()
    ref[int(p[0])] = (int(p[1]), [float(x) for x in p[3::2]], [float(x) for x in p[4::2]])
step = int(sys.argv[3])
rows = [l.split() for l in open(sys.argv[2]) if int(l.split()[0]) == step]
assert len(rows) == len(ref), (len(rows), len(ref))
worst = 0.0
for p in rows:
    i, label, pred = int(p[1]), int(p[2]), int(p[3])
    scores = [float(x) for x in p[4:]]
    want, d = ref[i][1], ref[i][2]
    assert label == ref[i][0], (i, label)
    tol = [max(10 * e, 16 * 2.0 ** -24 * abs(w)) for w, e in zip(want, d)]
    for j, (s, w, t) in enumerate(zip(scores, want, tol)):
        assert abs(s - w) <= t, (i, j, s, w, t)
        worst = max(worst, abs(s - w))
    order = sorted(range(len(want)), key=lambda j: (want[j], j))
    if want[order[1]] - want[order[0]] > 2 * max(tol):
        assert pred == order[0], (i, pred, order)
print("largest difference", worst)
EOF
}
compare "-x 4 -v 2, step 4" "$tmp/train.dump" 4 fp32

# the model of step 4 scored at step 0 of -x 0 (the last step): ranks, stages, tiles
M="$tmp/run/model_00000004.bin"
EVAL="-e $M -i $DATA -j $DATA -t 64 -x 0 -v 0 -s 0 $HS"
# score NAME N BIN ARGS...: NAME's dump in $tmp/NAME.dump
score() {
    local name=$1 n=$2 bin=$3; shift 3
    ZERO3_TEST_HELLASWAG_DUMP="$tmp/$name.dump" $MPIRUN -np "$n" $bin $EVAL "$@" > "$tmp/$name.log" 2>&1 ||
        echo "  ($name: exit $?: $(grep -m1 -i error "$tmp/$name.log"))"
}
score z0 1 $BIN -b 4
score z3_2 2 $BIN -b 4 -z 3
score z2_3 3 $BIN -b 8 -z 2 --vocab-tile 1024
score z3_3 3 $BIN -b 12 -z 3    # 3 examples a batch: 4, 3, 3 examples, so ranks 1 and 2 run an empty batch
compare "1 rank, stage 0"                        "$tmp/z0.dump" 0 fp32
compare "2 ranks, stage 3"                       "$tmp/z3_2.dump" 0 fp32
compare "3 ranks, stage 2, vocabulary tiles"     "$tmp/z2_3.dump" 0 fp32
compare "3 ranks, stage 3, empty batches"        "$tmp/z3_3.dump" 0 fp32
# (the GPU trainer: test/gpu/test_gpu_trainer.sh's validation section, against this trainer)

# ---------------------------------------------------------------------------
# refusals
$PY - "$DATA" "$tmp/hs.bin" "$tmp/short.bin" <<'EOF'
import sys
open(sys.argv[3], "wb").write(open(sys.argv[2], "rb").read()[:-7])
EOF
expect_error "-h 1 -b 2: an example's 4 rows" "has 4 completions, one row each: more than the batch's -b 2 rows" \
    $BIN $EVAL -b 2
expect_error "-h 1, no eval file" "$tmp/none.bin: cannot open" $BIN $EVAL -b 4 --hellaswag-file "$tmp/none.bin"
expect_error "-h 1, no eval file: how to make one" "./tokenize --hellaswag" $BIN $EVAL -b 4 --hellaswag-file "$tmp/none.bin"
expect_error "-h 1, a token shard as the eval file" "not an eval file" $BIN $EVAL -b 4 --hellaswag-file $DATA
expect_error "-h 1 -t 16: rows longer than -t" "more than -t 16" $BIN -e d2 -i $DATA -j $DATA -t 16 -b 4 -x 0 -v 0 -s 0 $HS
expect_error "-h 1, a truncated eval file" "short.bin: example 9" $BIN $EVAL -b 4 --hellaswag-file "$tmp/short.bin"
mkfifo "$tmp/fifo"   # read only when a regular file: a FIFO is named, never waited on
expect_error "-h 1, a FIFO as the eval file" "fifo: cannot open: it is a FIFO" timeout 60 $BIN $EVAL -b 4 --hellaswag-file "$tmp/fifo"
finish
