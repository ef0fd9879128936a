#!/usr/bin/env bash
# llm.c's own run scripts (karpathy/llm.c scripts/run_gpt2_{124M,350M,774M,1558M}.sh and
# run_gpt3_125M.sh), their command lines with only the binary's name swapped, scaled down:
# the same flags in the same order, the sizes made small (d2, B 4, T 64, 2 ranks, a few
# steps, tinyshakespeare through ./tokenize --shards under FineWeb's names, a HellaSwag file
# of 10 examples at llm.c's default path), each run inside the scripts' loop: until
# DONE_<last step> exists, launch with -y 1 and sleep 1. Checked per script: the loop ends
# with the final checkpoint verified (checkpoint_tool verify), main.log holds llm.c's lines
# (trl, tel, eval) up to the last step. For 124M, whose script gives no -x (one epoch), the
# last step is the epoch's, computed here from the shards; its first launch loses a rank at
# step 3 (the test hook ZERO3_TEST_STOP stops it, the test kills it), and the loop's second
# launch resumes from the checkpoint of step 2 and finishes.
# Scripts with -ge 1 (GELU in the matmul's epilogue: the bf16 GPU build's) run the GPU
# trainer, emulated on the CPU (build/train_gpt2_zero3_emu); the others the CPU trainer.
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish
GPU=${GPU:-build/train_gpt2_zero3_emu}
root=$PWD
cpu=$root/${BIN#./}
gpu=$root/$GPU
[ -x "$gpu" ] || { bad "missing $GPU (make $GPU)"; finish; exit; }

# the data where llm.c's scripts look for it, relative to the run's directory
w=$tmp/w
mkdir -p "$w/dev/data/fineweb10B" "$w/dev/data/fineweb100B" "$w/dev/data/edu_fineweb100B" "$w/dev/data/hellaswag"
head -c 24000 dev/data/tinyshakespeare/input.txt > "$tmp/text.txt"
for d in fineweb10B/fineweb fineweb100B/fineweb edu_fineweb100B/edu_fineweb; do
    ./tokenize --shards "$w/dev/data/$d" --shard-size 2500 "$tmp/text.txt" > "$tmp/shards.log" 2>&1 || bad "tokenize --shards $d: $(tail -1 "$tmp/shards.log")"
done
$PY - "$tmp/hs.jsonl" <<'EOF'
import json, random, sys
lines = [l.strip() for l in open("dev/data/tinyshakespeare/input.txt") if 5 <= len(l.strip().split()) <= 8]
rng = random.Random(11)
with open(sys.argv[1], "w") as f:
    for i in range(10):
        k, label = rng.randrange(len(lines) - 1), rng.randrange(4)
        endings = [lines[rng.randrange(len(lines))] for _ in range(3)]
        endings.insert(label, lines[k + 1])
        f.write(json.dumps({"ctx": lines[k], "endings": endings, "label": label}) + "\n")
EOF
./tokenize --hellaswag "$tmp/hs.jsonl" "$w/dev/data/hellaswag/hellaswag_val.bin" > "$tmp/hs.log" 2>&1 || bad "tokenize --hellaswag: $(tail -1 "$tmp/hs.log")"
# 124M runs one epoch: 2 ranks x B 4 x T 32 = 256 tokens a micro-step, -d 512: 2 a step
epoch=$($PY -c "
import glob, struct
chunks = sum((struct.unpack('<3i', open(f, 'rb').read(12))[2] - 1) // 256 for f in glob.glob('$w/dev/data/fineweb10B/fineweb_train_*.bin'))
print(chunks // 2)")

# loop NAME DONE_STEP COMMAND...: llm.c's while-true loop around COMMAND in $w, at most 4
# launches; each launch's output in $tmp/NAME.N.log. The first launch gets $FIRST_ENV.
loop() {
    local name=$1 last=$2; shift 2
    local out_dir=log_$name done_file n=0 start=$SECONDS  # (the caller's command says -o log_$name)
    done_file=$(printf '%s/DONE_%08d' "$out_dir" "$last")
    (
        cd "$w" || exit 1
        while true; do
            if [ -f "$done_file" ]; then echo "File $done_file exists. Exiting the loop."; break; fi
            n=$((n + 1))
            [ $n -le 4 ] || { echo "no $done_file after 4 launches"; exit 1; }
            local t0=$SECONDS
            env ${FIRST_ENV:-} "$@" > "$tmp/$name.$n.log" 2>&1
            echo "launch $n: exit $?, $((SECONDS - t0)) s"
            FIRST_ENV=""
            sleep 1
        done
        echo "$n launch(es), $((SECONDS - start)) s"
    ) > "$tmp/$name.loop" 2>&1
    local rc=$?
    if [ $rc -eq 0 ] && "$root/checkpoint_tool" verify "$w/log_$name" "$last" > "$tmp/$name.verify" 2>&1; then
        ok "$name: the loop ends ($(tail -1 "$tmp/$name.loop")), DONE_$(printf %08d "$last") verifies"
    else
        bad "$name: $(tail -1 "$tmp/$name.loop") $(tail -1 "$tmp/$name.verify" 2>/dev/null); last log: $(grep -m2 -i error "$tmp/$name".*.log | tr '\n' ' ')"
    fi
    $PY - "$w/log_$name/main.log" "$last" <<'EOF' && ok "$name: main.log has llm.c's trl, tel and eval lines to step $last" || bad "$name: main.log"
import re, sys
text = open(sys.argv[1]).read()
last = int(sys.argv[2])
trl = [int(m) for m in re.findall(r"^s:(\d+) trl:[0-9.]+ lr:[0-9.e-]+ norm:[0-9.]+$", text, re.M)]
tel = [int(m) for m in re.findall(r"^s:(\d+) tel:[0-9.]+$", text, re.M)]
ev = [int(m) for m in re.findall(r"^s:(\d+) eval:[0-9.]+$", text, re.M)]
assert trl and max(trl) == last - 1, trl
assert last in tel and last in ev, (tel, ev)
EOF
}

# gpt2 124M: no -x; a rank lost at step 3 of the first launch (stopped by the hook, then killed)
( for _ in $(seq 600); do
      p=$(ps -eo pid=,stat=,args= | awk -v b="$cpu" '$2 ~ /^T/ && $3 == b { print $1; exit }')
      [ -n "$p" ] && { kill -KILL "$p"; exit 0; }
      sleep 0.1
  done ) &
killer=$!
out_dir=log_gpt2_124M
FIRST_ENV="ZERO3_TEST_STOP=1:3:before" loop gpt2_124M "$epoch" \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$cpu" \
                -i "dev/data/fineweb10B/fineweb_train_*.bin" \
                -j "dev/data/fineweb10B/fineweb_val_*.bin" \
                -o "$out_dir" \
                -v 2 -s 4 -g 4 \
                -h 1 \
                -b 4 -t 32 \
                -d 512 \
                -r 0 \
                -z 1 \
                -c 0.1 \
                -l 0.0006 \
                -q 0.0 \
                -u 2 \
                -n 2 \
                -y 1 \
                -e "d2"
kill "$killer" 2>/dev/null; wait "$killer" 2>/dev/null
cat "$tmp/gpt2_124M.loop"
if [ -f "$tmp/gpt2_124M.2.log" ] && grep -q "resum" "$tmp/gpt2_124M.2.log"; then
    ok "gpt2_124M: the rank lost in the first launch; the second resumed"
else
    bad "gpt2_124M: no second launch resuming ($(tail -1 "$tmp/gpt2_124M.loop"))"
fi

out_dir=log_gpt2_350M
loop gpt2_350M 3 \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$cpu" \
                -i "dev/data/fineweb100B/fineweb_train_*.bin" \
                -j "dev/data/fineweb100B/fineweb_val_*.bin" \
                -o "$out_dir" \
                -v 2 -s 4 -g 4 \
                -h 1 \
                -b 4 -t 32 \
                -d 512 \
                -r 0 \
                -z 1 \
                -c 0.1 \
                -l 0.0003 \
                -q 0.0 \
                -u 2 \
                -n 2 \
                -x 3 \
                -y 1 \
                -e "d2"

out_dir=log_gpt2_774M
loop gpt2_774M 3 \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$cpu" \
                -i "dev/data/fineweb100B/fineweb_train_*.bin" \
                -j "dev/data/fineweb100B/fineweb_val_*.bin" \
                -o "$out_dir" \
                -v 2 -s 3 -g 4 \
                -h 1 \
                -b 4 -t 32 \
                -d 512 \
                -r 0 \
                -z 1 \
                -c 0.1 \
                -l 0.00025 \
                -q 0.0 \
                -u 2 \
                -n 2 \
                -x 3 \
                -y 1 \
                -e "d2"

out_dir=log_gpt2_1558M
loop gpt2_1558M 2 \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$gpu" \
                -i "dev/data/edu_fineweb100B/edu_fineweb_train_*.bin" \
                -j "dev/data/edu_fineweb100B/edu_fineweb_val_*.bin" \
                -o "$out_dir" \
                -v 2 -s 2 -g 4 \
                -h 1 \
                -b 4 -t 32 \
                -d 512 \
                -r 0 \
                -z 1 \
                -c 0.1 \
                -k "cosine" \
                -l 0.0006 \
                -q 0.1 \
                -u 2 \
                -n 2 \
                -x 2 \
                -ge 1 \
                -y 1 \
                -e "d2"

out_dir=log_gpt3_125M
loop gpt3_125M 3 \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$gpu" \
                -i "dev/data/fineweb100B/fineweb_train_*.bin" \
                -j "dev/data/fineweb100B/fineweb_val_*.bin" \
                -o "$out_dir" \
                -v 3 -s 3 -g 4 \
                -h 1 \
                -b 4 -t 32 \
                -d 512 \
                -r 0 \
                -z 1 \
                -c 0.1 \
                -l 0.0006 \
                -q 0.1 \
                -u 2 \
                -n 1 \
                -nk 1 \
                -nm 2 \
                -ge 1 \
                -sl 7.0 \
                -sg 7.0 \
                -y 1 \
                -x 3 \
                -e "d2"
# -nk 1 -nm 2: of the checkpoints 1, 2, 3 the newest stays, and 2 (a multiple of 2) too
kept=$(cd "$w/log_gpt3_125M" && ls DONE_* 2>/dev/null | tr '\n' ' ')
[ "$kept" = "DONE_00000002 DONE_00000003 " ] && ok "gpt3_125M: -nk 1 -nm 2 kept checkpoints 2 and 3" || bad "gpt3_125M: kept $kept"
finish
