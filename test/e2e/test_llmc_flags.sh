#!/usr/bin/env bash
# llm.c's flags on ./train_gpt2_zero3_cpu, as llm.c's train_gpt2.cu means them (issue 27):
#   -h          alone (or --help) prints the usage and exits 0; -h 0 trains; -h 1 evaluates
#               HellaSwag (test_hellaswag.sh), so without its file it stops naming the file
#               instead of printing help and "succeeding"
#   -k wsd      the learning rates of the steps follow llm.c's warm-up, stable, 1 - sqrt decay
#   -nk -nm     after each checkpoint the K newest stay, and every multiple of M besides
#   -pn -pr -pg checked against the ranks MPI started: agreeing, the run goes on; not, every
#               process stops with a message saying how to launch
#   -pi -pf -ps accepted (MPI's world is the one used)
#   -sl -sg     the updates skipped are the steps whose loss or norm z-score (llm.c's
#               detector, recomputed here from the report) passes the threshold
#   main.log    llm.c's lines, fresh for a new run, appended to by a resumed one; main.jsonl
#               a JSON line per step; the step line's elapsed time and ETA
#   plot_log.py the runs' curves drawn in their panels; a partial or missing log named
#   --prompt    samples continue it; --top-k 1 is the same at any seed; bad ones refused
#   -lg -ge -f -w  accepted at the values that say what this trainer does, refused by name
#               at the others
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, expect_error

$PY - "$tmp" <<'EOF'
import sys, numpy as np
h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = 20000
toks = (np.arange(20000) * 7919) % 50000
open(f"{sys.argv[1]}/train.bin", "wb").write(h.tobytes() + toks.astype(np.uint16).tobytes())
EOF
SMALL="-e d2 -i $tmp/train.bin -j $tmp/train.bin -b 2 -t 32 -v 0 -s 0 -l 1e-3 --seed 5"

# ---------------------------------------------------------------------------
# -h: help alone, HellaSwag with a value
for h in "-h" "--help" "-b 2 -h" "-h -b 2"; do
    if $BIN $h > "$tmp/help" 2>&1 && grep -q "^Usage:" "$tmp/help" && grep -q -- "-nk, --keep-checkpoints" "$tmp/help"; then
        ok "'$h' prints the usage and exits 0"
    else
        bad "'$h': $(head -2 "$tmp/help" | tr '\n' ' ')"
    fi
done
run h0 1 $SMALL -x 2 -h 0 && [ "$(losses "$tmp/h0.json" | wc -l)" = 2 ] && ok "-h 0 trains" || bad "-h 0 did not train"
expect_error "-h 1 without its eval file" "flag -h 1: $tmp/none.bin: cannot open" $BIN $SMALL -x 2 -h 1 --hellaswag-file "$tmp/none.bin"
expect_error "-h 2"                   "flag -h"    $BIN $SMALL -x 2 -h 2

# ---------------------------------------------------------------------------
# -k wsd: 20 steps, 4 of warm-up, stable to step floor(0.8 * 20) = 16, then 1 - sqrt to -q
run wsd 1 $SMALL -x 20 -k wsd -u 4 -q 0.1
$PY - "$tmp/wsd.json" <<'EOF' && ok "-k wsd: the steps' learning rates are llm.c's wsd" || bad "-k wsd: learning rates"
import json, math, sys
lrs = [s["lr"] for s in json.load(open(sys.argv[1]))["steps"]]
assert len(lrs) == 20, lrs
lr, lo = 1e-3, 1e-4
for step, got in enumerate(lrs):
    if step < 4: want = lr * (step + 1) / 4
    elif step < 16: want = lr
    else: want = lo + (1 - math.sqrt((step - 16) / 4)) * (lr - lo)
    assert abs(got - want) <= 1e-6 * lr, (step, got, want)
EOF

# ---------------------------------------------------------------------------
# -nk 2 -nm 4: checkpoints every 2 steps to 10; the 2 newest (10, 8) stay, and 4 (a multiple of 4)
$BIN $SMALL -x 10 -n 2 -nk 2 -nm 4 -o "$tmp/ck" > "$tmp/ck.log" 2>&1
kept=$(cd "$tmp/ck" 2>/dev/null && ls DONE_* | tr '\n' ' ')
[ "$kept" = "DONE_00000004 DONE_00000008 DONE_00000010 " ] && ok "-nk 2 -nm 4: checkpoints 4, 8 and 10 stay" \
    || bad "-nk 2 -nm 4: kept $kept ($(grep -m1 -i error "$tmp/ck.log"))"
$BIN $SMALL -x 10 -n 2 -nk 2 -o "$tmp/ck2" > /dev/null 2>&1
kept=$(cd "$tmp/ck2" 2>/dev/null && ls DONE_* | tr '\n' ' ')
[ "$kept" = "DONE_00000008 DONE_00000010 " ] && ok "-nk 2 alone (--keep-checkpoints): checkpoints 8 and 10 stay" || bad "-nk 2: kept $kept"

# ---------------------------------------------------------------------------
# the multi-node flags against MPI (here: one node)
run layout 2 $SMALL -x 2 -pn 2 -pg 2 -pi fs -pf "$tmp" && ok "-pn 2 -pg 2 -pi fs -pf DIR at 2 ranks on one node: trains" \
    || bad "-pn 2 -pg 2 at 2 ranks did not train"
run layout1 1 $SMALL -x 1 -pn 1 -pr 0 -pg 1 -pi tcp -ps 10.0.0.1 && ok "-pn 1 -pr 0 -pg 1 -pi tcp -ps IP at 1 rank: trains" \
    || bad "-pn 1 -pr 0 -pg 1 at 1 rank did not train"
expect_error "-pn 4 at 2 ranks" "flag -pn 4: MPI sees a world of 2 processes" $MPIRUN -np 2 $BIN $SMALL -x 1 -pn 4
expect_error "-pn 2 in a world of 1 (srun without PMIx)" "srun --mpi=pmix" $BIN $SMALL -x 1 -pn 2
expect_error "-pr 0 given to both of 2 ranks" "flag -pr 0: MPI made this process rank 1 of 2" $MPIRUN -np 2 $BIN $SMALL -x 1 -pr 0
expect_error "-pg 1 with 2 ranks on the node" "flag -pg 1: MPI put 2 processes on this node" $MPIRUN -np 2 $BIN $SMALL -x 1 -pg 1
expect_error "-pi other"            "flag -pi"   $BIN $SMALL -x 1 -pi nccl

# ---------------------------------------------------------------------------
# llm.c's GPU flags: what this trainer does is accepted, anything else is refused by name
run gpuflags 1 $SMALL -x 1 -lg -1 -ge 0 -f 0 -w 1 -sl 0 -sg 0 && ok "-lg -1 -ge 0 -f 0 -w 1 -sl 0 -sg 0: trains" \
    || bad "llm.c's flags at this trainer's values did not train"
expect_error "-lg 10 (GPU telemetry)" "flag -lg 10: GPU telemetry is not read" $BIN $SMALL -x 1 -lg 10
expect_error "-ge 1 on the CPU trainer" "flag -ge 1: train_gpt2_zero3_cpu computes its GELU apart" $BIN $SMALL -x 1 -ge 1
expect_error "-ge 2 on the CPU trainer" "flag -ge 2: train_gpt2_zero3_cpu computes its GELU apart" $BIN $SMALL -x 1 -ge 2
expect_error "-ge 3" "flag -ge" $BIN $SMALL -x 1 -ge 3
expect_error "-f 1 (TF32)" "flag -f 1: nothing here computes in TF32" $BIN $SMALL -x 1 -f 1
expect_error "-w 0 (no master weights)" "flag -w 0: ZeRO always keeps the fp32 master" $BIN $SMALL -x 1 -w 0

# ---------------------------------------------------------------------------
# -sl, -sg: llm.c's outlier detector (z-score over the last 128 values, the new one included).
# On a tiny model, 170 steps at a learning rate small enough that the batches' noise, not
# the descent, moves the loss: a run without them gives the z-scores; a threshold below the
# largest of the steps past the window makes the run skip at least once; then every step's
# skipped_outlier in the report must be what the detector says of the losses and norms the
# same report holds, and a skipped step must not count towards --max-skipped-steps
$PY test/e2e/ref_gpt2.py --inputs-only "$tmp/tiny" > /dev/null 2>&1
Z="-e $tmp/tiny/model.bin -i $tmp/tiny/train.bin -j $tmp/tiny/train.bin -b 1 -t 16 -v 0 -s 0 -l 1e-5 -x 170 --max-skipped-steps 0"
for kind in "-sl loss" "-sg grad_norm"; do
    flag=${kind% *}; key=${kind#* }
    run zfree 1 $Z || { bad "$flag: the run without it failed"; continue; }
    # halfway between the third and fourth largest z-scores: one step at least is skipped
    k=$($PY test/e2e/zscore.py "$tmp/zfree.json" "$key" | grep -v nan | sort -g | tail -4 | head -2 | awk '{s += $1} END {printf "%.4f", s / 2}')
    if run zrun 1 $Z $flag "$k"; then
        want=$($PY test/e2e/zscore.py "$tmp/zrun.json" "$key" "$k")
        got=$($PY -c "import json,sys; print(''.join('1' if s['skipped_outlier'] else '0' for s in json.load(open(sys.argv[1]))['steps']))" "$tmp/zrun.json")
        tot=$($PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['skipped_steps'], r['skipped_outlier_steps'])" "$tmp/zrun.json")
        n=$(tr -cd 1 <<< "$got" | wc -c)
        if [[ "$got" == ${want//\?/[01]} ]] && [ "$n" -ge 1 ] && [ "$tot" = "$n $n" ]; then
            ok "$flag $k: the $n steps skipped are those whose z-score passes it; the run goes on past --max-skipped-steps 0"
        else
            bad "$flag $k: skipped $got, the detector says $want; report $tot"
        fi
    else
        bad "$flag $k: $(grep -m1 -i error "$tmp/zrun.log")"
    fi
done
# a threshold no z-score can reach ((n - 1) / sqrt(n) = 11.2 for 128) changes nothing
run zbig 1 $Z -sl 11.3 -sg 11.3 && run zfree 1 $Z && cmp -s <(losses "$tmp/zfree.json") <(losses "$tmp/zbig.json") \
    && ok "-sl 11.3 -sg 11.3 (past any z-score of a window of 128): the losses of a run without them" || bad "-sl/-sg 11.3 changed the run"

# ---------------------------------------------------------------------------
# main.log as llm.c writes it (s:N trl:X lr:Y norm:Z, s:N tel:X), and main.jsonl, a JSON line
# per step: made fresh by a new run, appended to by a resumed one; the step line's ETA
$BIN $SMALL -x 4 -v 2 -n 2 -o "$tmp/lg" > "$tmp/lg.log" 2>&1
$BIN $SMALL -x 6 -v 2 -n 2 -o "$tmp/lg" -y 1 > "$tmp/lg2.log" 2>&1
if $PY - "$tmp/lg/main.log" "$tmp/lg/main.jsonl" <<'EOF'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
trl = [l for l in lines if " trl:" in l]; tel = [l for l in lines if " tel:" in l]
assert all(re.fullmatch(r"s:\d+ trl:\d+\.\d{4} lr:\d+\.\d{6} norm:\d+\.\d{2}", l) for l in trl), trl
assert all(re.fullmatch(r"s:\d+ tel:\d+\.\d{4}", l) for l in tel), tel
assert [int(l.split()[0][2:]) for l in trl] == [0, 1, 2, 3, 4, 5], trl     # 0-3, then the resumed 4-5
assert [int(l.split()[0][2:]) for l in tel] == [0, 2, 4, 4, 6], tel        # (the resume validates at its start, 4)
steps = [json.loads(l) for l in open(sys.argv[2])]
assert [s["step"] for s in steps] == [0, 1, 2, 3, 4, 5], steps
for s, l in zip(steps, trl):
    assert f"trl:{s['loss']:.4f}" in l and s["ms"] > 0 and s["tokens_per_s"] > 0 and s["rss_bytes"] > 0 and s["skipped"] is False, (s, l)
EOF
then ok "main.log: llm.c's lines, appended to by the resumed run; main.jsonl: every step, as JSON"
else bad "main.log / main.jsonl: $(head -3 "$tmp/lg/main.log" | tr '\n' ' ')"; fi
grep -qE "^step    6/6 .* \| [0-9]+ s, ETA 0 s" "$tmp/lg2.log" && grep -qE "^step    1/4 .* \| [0-9]+ s, ETA [0-9]+ s" "$tmp/lg.log" \
    && ok "the step line says the elapsed time and the ETA" || bad "no ETA on the step line: $(grep -m1 '^step' "$tmp/lg.log")"
$BIN $SMALL -x 2 -v 0 -o "$tmp/lg" > /dev/null 2>&1
[ "$(grep -c trl "$tmp/lg/main.log")" = 2 ] && [ "$(wc -l < "$tmp/lg/main.jsonl")" = 2 ] \
    && ok "a new run (-y 0) starts main.log and main.jsonl afresh" || bad "a new run kept the old log: $(wc -l < "$tmp/lg/main.log") lines"

# ---------------------------------------------------------------------------
# scripts/plot_log.py: two runs overlaid in six panels; each panel with data has both runs'
# colours drawn in it (read back from the PNG), the HellaSwag one (no eval lines) neither; a
# line cut short is passed over with a warning; a directory without main.log is an error
$BIN $SMALL -x 6 -v 2 -o "$tmp/plotA" > /dev/null 2>&1
$BIN $SMALL -x 6 -v 2 -l 5e-4 -o "$tmp/plotB" > /dev/null 2>&1
printf 's:6 tr' >> "$tmp/plotB/main.log"   # a run killed while writing
if $PY scripts/plot_log.py "$tmp/plot.png" "$tmp/plotA" "$tmp/plotB" > "$tmp/plot.out" 2> "$tmp/plot.err" \
    && grep -q "loss against steps: 4 curves" "$tmp/plot.out" && grep -q "HellaSwag accuracy: 0 curves" "$tmp/plot.out" \
    && grep -q "plotB/main.log line 11 is not one of main.log's" "$tmp/plot.err" \
    && $PY - "$tmp/plot.png" <<'EOF'
import sys
import matplotlib.image as mpimg
img = (mpimg.imread(sys.argv[1])[:, :, :3] * 255).round()
h, w = img.shape[:2]
def count(panel, rgb):  # pixels of colour rgb (within 30) inside panel (row, col) of the 2 x 3 grid
    r, c = panel
    sub = img[r * h // 2:(r + 1) * h // 2, c * w // 3:(c + 1) * w // 3]
    return int((abs(sub - rgb).max(axis=2) < 30).sum())
C0, C1 = (31, 119, 180), (255, 127, 14)   # matplotlib's first two colours: the two runs
for panel in [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]:
    assert count(panel, C0) > 30 and count(panel, C1) > 30, (panel, count(panel, C0), count(panel, C1))
assert count((0, 2), C0) == 0 and count((0, 2), C1) == 0, "curves in the HellaSwag panel"
EOF
then ok "plot_log.py: two runs in five panels, none in HellaSwag's; a cut line passed over with a warning"
else bad "plot_log.py: $(cat "$tmp/plot.out" "$tmp/plot.err" | tail -3 | tr '\n' ' ')"; fi
mkdir -p "$tmp/nolog"
expect_error "plot_log.py on a directory without main.log" "has no main.log" $PY scripts/plot_log.py "$tmp/p2.png" "$tmp/nolog"
: > "$tmp/nolog/main.log"
expect_error "plot_log.py on an empty main.log" "holds no step" $PY scripts/plot_log.py "$tmp/p2.png" "$tmp/nolog"

# ---------------------------------------------------------------------------
# --prompt, --temperature, --top-k: a sample continues the prompt; with --top-k 1 it is the
# likeliest token each time, the same whatever the sampler's seed (the model from a file)
$BIN $SMALL -x 0 -n 1 -o "$tmp/m0" > /dev/null 2>&1
P="-e $tmp/m0/model_00000000.bin -i $tmp/train.bin -j $tmp/train.bin -b 2 -t 32 -v 0 -x 0 -s 1 -g 16"  # (-x 0: the sample of the model as loaded)
sample() { sed -n '/^generating:/{n;n;p;q}' "$1"; }   # the first sample's text (after "generating:" and "---")
$BIN $P --prompt "The king said" --top-k 1 --seed 1 > "$tmp/pa.log" 2>&1
$BIN $P --prompt "The king said" --top-k 1 --seed 2 --temperature 0.7 > "$tmp/pb.log" 2>&1
$BIN $P --prompt "The king said" --seed 1 > "$tmp/pc.log" 2>&1
$BIN $P --prompt "The king said" --seed 2 > "$tmp/pd.log" 2>&1
a=$(sample "$tmp/pa.log"); b=$(sample "$tmp/pb.log"); c=$(sample "$tmp/pc.log"); d=$(sample "$tmp/pd.log")
[[ "$a" == "The king said"?* ]] && [[ "$c" == "The king said"?* ]] && [ "$a" = "$b" ] && [ "$c" != "$d" ] \
    && ok "--prompt: the samples continue it; --top-k 1 the same at any seed and temperature, the full draw not" \
    || bad "--prompt / --top-k: '$a' '$b' '$c' '$d'"
expect_error "--prompt without samples"  "flag --prompt: there are no samples to continue (-s 0)" $BIN $P -s 0 --prompt "Hi"
expect_error "--prompt too long for -g"  "leave no room for a generated one" $BIN $P -g 4 --prompt "one two three four five"
expect_error "--prompt, no encoder"      "cannot load GPT-2's encoder from --encoder $tmp/none" $BIN $P --prompt "Hi" --encoder "$tmp/none"
expect_error "--prompt not UTF-8"        "flag --prompt:" $BIN $P --prompt "$(printf 'ab\xff')"
expect_error "--temperature 0"           "flag --temperature" $BIN $P --temperature 0
expect_error "--top-k -1"                "flag --top-k" $BIN $P --top-k -1

finish
