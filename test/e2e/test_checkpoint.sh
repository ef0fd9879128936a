#!/usr/bin/env bash
# Checkpoints you can trust (llmc/checkpoint.h, zero3/crc32c.h), CPU trainer:
#   checksum      CRC32C gives the standard check value, in hardware and in software
#   manifest      DONE_S lists every file with its size and checksum, and checksums itself
#   damage        a flipped bit in a state or model file, a truncated file, a damaged
#                 manifest: the resume names the file and falls back to the newest
#                 checkpoint that passes, with losses equal to the last bit to a run
#                 straight through; when none passes, a clear error
#   unverified    a DONE_S that is empty or a directory is no complete checkpoint: the
#                 resume falls back past it; --allow-unverified 1 takes an empty one
#                 (earlier versions wrote those) unverified, with a warning
#   keep          --keep-checkpoints K leaves the K newest checkpoints that pass their
#                 checks: the one just saved stays, a damaged newer one is set aside
#   tool          ./checkpoint_tool verify: every file against the manifest; consolidate
#                 refuses a damaged or unverified checkpoint, and an output in the
#                 checkpoint's directory or over one of its files; inspect names junk
#   inputs        a run whose -e is a file of -o that a checkpoint would replace is refused
#   durability    every file is fsync'ed before the marker that makes it count (strace)
#   partitioned   the model file, every rank writing its part, is byte for byte the one
#                 checkpoint_tool writes offline and the one every other world size, stage
#                 or offload writes (fp32 and bf16); a save holds no more than one unit's
#                 shard beyond the engine's memory on any rank (test/e2e/save_memory.c)
# Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, expect_error

TRAIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
R="-e d2 -i $TRAIN -j $TRAIN -t 32 -b 2 -v 0 -s 0 -l 1e-3 --seed 5 -k constant -u 2 -c 0.1 --shuffle 1"

# ---------------------------------------------------------------------------
# the checksum itself: the standard check value (RFC 3720's CRC32C of "123456789"), the
# hardware and the table path agreeing on odd lengths and offsets, pieces = whole
cat > "$tmp/crc.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include "zero3/crc32c.h"
int main(void) {
    int bad = 0;
    if (crc32c_update(0, "123456789", 9) != 0xE3069283u) { printf("check value %08x\n", crc32c_update(0, "123456789", 9)); bad = 1; }
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) { buf[i] = (unsigned char)(i * 131 + 7); }
    for (int off = 0; off < 9; off++) {
        for (int n = 0; n < 300; n += 7) {
            uint32_t soft = ~crc32c_soft(~0u, buf + off, n), all = crc32c_update(0, buf + off, n);
            uint32_t parts = crc32c_update(crc32c_update(0, buf + off, n / 3), buf + off + n / 3, n - n / 3);
            if (soft != all || parts != all) { printf("offset %d length %d: %08x %08x %08x\n", off, n, soft, all, parts); bad = 1; }
        }
    }
    return bad;
}
EOF
if cc -O1 -I. "$tmp/crc.c" build/lib/opt/lib.a -o "$tmp/crc" && "$tmp/crc"; then ok "CRC32C: check value 0xE3069283, hardware = table, pieces = whole"
else bad "CRC32C is wrong"; fi

# ---------------------------------------------------------------------------
# 6 steps straight through, and 4 steps with checkpoints at 2 and 4, on 2 ranks
run full 2 $R -x 6 || bad "setup: the straight run failed"
losses "$tmp/full.json" > "$tmp/full.losses"
run save 2 $R -x 4 -o "$tmp/ck" -n 2 || bad "setup: the run with checkpoints failed"

# the manifest: its lines, sizes as on disk, its own checksum (computed here in Python,
# independently of the C code)
$PY - "$tmp/ck" <<'EOF' && ok "DONE_00000004 lists the model file and both state files with their sizes, and checksums itself" || bad "the manifest is not as documented"
import os, sys
d = sys.argv[1]
text = open(f"{d}/DONE_00000004", "rb").read().decode()
lines = text.split("\n")
assert lines[0] == "train_gpt2_zero3 checkpoint manifest 1" and lines[1] == "step 4" and lines[2] == "world 2", lines[:3]
files = [l.split() for l in lines[3:6]]
assert [f[1] for f in files] == ["model_00000004.bin", "state_00000004_00000.bin", "state_00000004_00001.bin"], files
for f in files:
    assert f[0] == "file" and int(f[2]) == os.path.getsize(f"{d}/{f[1]}"), f
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
body = "\n".join(lines[:6]) + "\n"
assert lines[6] == "crc32c %08x" % crc32c(body.encode()) and lines[7] == "", lines[6:]
EOF

# flip one bit of byte OFFSET (negative: from the end) of FILE
flip() { $PY -c "
import sys, os
p, off = sys.argv[1], int(sys.argv[2])
f = open(p, 'r+b'); size = os.path.getsize(p); off = off % size
f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x10])); f.close()" "$1" "$2"; }

# resume_from CASE: copies the checkpoints to $tmp/CASE (the caller then damages step 4),
# resumes to step 6 and checks that step 2 was used, with the losses of the straight run
fresh() { rm -rf "$tmp/$1"; cp -r "$tmp/ck" "$tmp/$1"; }
resume_check() {
    local name=$1 needle=$2
    run "$name" 2 $R -x 6 -o "$tmp/$name" -y 1
    local rc=$?
    losses "$tmp/$name.json" > "$tmp/$name.losses" 2> /dev/null
    if [ $rc -eq 0 ] && grep -qF -- "$needle" "$tmp/$name.log" && grep -q "resumed from .* at step 2" "$tmp/$name.log" \
        && tail -4 "$tmp/full.losses" | cmp -s - "$tmp/$name.losses"; then
        ok "$name: named ($needle), resumed from step 2, losses bit-identical to the straight run"
    else
        bad "$name: exit $rc, $(grep -m3 -E 'warning|error|resumed' "$tmp/$name.log" | tr '\n' ' ')"
    fi
}

fresh flip_state; flip "$tmp/flip_state/state_00000004_00001.bin" -4096
resume_check flip_state "state_00000004_00001.bin fails its checksum"
fresh flip_model; flip "$tmp/flip_model/model_00000004.bin" 2000
resume_check flip_model "model_00000004.bin fails its checksum"
fresh flip_header; flip "$tmp/flip_header/state_00000004_00000.bin" 8
resume_check flip_header "state_00000004_00000.bin fails its checksum"
fresh short; truncate -s -100 "$tmp/short/state_00000004_00000.bin"
resume_check short "state_00000004_00000.bin has"
fresh marker; sed -i 's/^step 4$/step 5/' "$tmp/marker/DONE_00000004"
resume_check marker "the marker is damaged"
fresh gone; rm "$tmp/gone/state_00000004_00001.bin"
resume_check gone "cannot read $tmp/gone/state_00000004_00001.bin"

# ./checkpoint_tool verify: every checkpoint of a directory, or one step; consolidate
# refuses a damaged checkpoint
if ./checkpoint_tool verify "$tmp/ck" > "$tmp/v.out" 2>&1 && [ "$(grep -c ' ok: 3 files' "$tmp/v.out")" = 2 ]; then
    ok "checkpoint_tool verify: both checkpoints pass"
else bad "checkpoint_tool verify on good checkpoints: $(tr '\n' ' ' < "$tmp/v.out")"; fi
expect_error "checkpoint_tool verify names the damaged file" "state_00000004_00001.bin fails its checksum" ./checkpoint_tool verify "$tmp/flip_state"
./checkpoint_tool verify "$tmp/flip_state" 2 > /dev/null 2>&1 && ok "checkpoint_tool verify DIR 2: the older checkpoint passes" || bad "verify of step 2 failed"
expect_error "checkpoint_tool consolidate refuses a damaged checkpoint" "model_00000004.bin fails its checksum" \
    ./checkpoint_tool consolidate "$tmp/flip_model" 4 "$tmp/cons.bin"
[ ! -e "$tmp/cons.bin" ] && ok "nothing written from the damaged checkpoint" || bad "consolidate wrote from a damaged checkpoint"
fresh tool_empty; : > "$tmp/tool_empty/DONE_00000004"
expect_error "checkpoint_tool consolidate refuses an empty marker" "DONE_00000004 is empty" \
    ./checkpoint_tool consolidate "$tmp/tool_empty" 4 "$tmp/cons.bin"
./checkpoint_tool consolidate "$tmp/tool_empty" 4 "$tmp/cons.bin" --allow-unverified > /dev/null 2> "$tmp/err" && cmp -s "$tmp/cons.bin" "$tmp/ck/model_00000004.bin" \
    && grep -q "has no checksums" "$tmp/err" && ok "--allow-unverified: consolidate takes it, with a warning" || bad "consolidate --allow-unverified: $(cat "$tmp/err")"

# no output of the tool replaces a file of the checkpoint it reads: none inside its
# directory, none over one of its files under another name (a hard link); nothing changes
(cd "$tmp/ck" && md5sum * > "$tmp/ck.md5")
expect_error "extract-optimizer into the checkpoint's directory" \
    "refusing to write $tmp/ck/model_00000004.bin: it is in the checkpoint directory $tmp/ck being read" \
    ./checkpoint_tool extract-optimizer "$tmp/ck" 4 "$tmp/ck/model_00000004.bin"
expect_error "consolidate into the checkpoint's directory, another spelling" "it is in the checkpoint directory $tmp/ck being read" \
    ./checkpoint_tool consolidate "$tmp/ck" 4 "$tmp/ck/../ck/new.bin"
ln "$tmp/ck/state_00000004_00000.bin" "$tmp/state_link.bin"
expect_error "extract-optimizer over a hard link of a state file" \
    "refusing to replace $tmp/state_link.bin: it is an input of this run (the checkpoint read), the same file as $tmp/ck/state_00000004_00000.bin" \
    ./checkpoint_tool extract-optimizer "$tmp/ck" 4 "$tmp/state_link.bin"
(cd "$tmp/ck" && md5sum -c --quiet "$tmp/ck.md5" > /dev/null 2>&1) && [ "$(ls "$tmp/ck" | grep -v -x -e job.lock -e main.jsonl | wc -l)" = 9 ] \
    && ok "the checkpoint read is as it was, nothing added" || bad "the tool changed $tmp/ck: $(ls "$tmp/ck" | tr '\n' ' ')"
# inspect on junk: names that only look like a checkpoint's are none (no "step -1")
mkdir -p "$tmp/junk"; for f in DONE_-1 DONE_-0000001 state_-0000001_00000.bin model_12.bin DONE_000000012 notes.txt; do echo junk > "$tmp/junk/$f"; done
expect_error "inspect on a directory of junk" "no checkpoint in $tmp/junk: no file named DONE_SSSSSSSS" ./checkpoint_tool inspect "$tmp/junk"
grep -q "step .*-" "$tmp/out" && bad "inspect listed a negative step: $(head -2 "$tmp/out" | tr '\n' ' ')" || ok "inspect lists no step of a junk name"
echo junk > "$tmp/junk/DONE_00000003"
expect_error "inspect: a junk marker is no complete checkpoint" "DONE_00000003: no checksum line at its end" ./checkpoint_tool inspect "$tmp/junk"
grep -q "step        3  bad marker" "$tmp/out" && ok "inspect says the marker of step 3 is bad" || bad "inspect of a junk marker: $(head -3 "$tmp/out" | tr '\n' ' ')"

# nothing passes: a clear error, and nothing removed or rewritten
fresh none; flip "$tmp/none/state_00000004_00000.bin" -10; flip "$tmp/none/state_00000002_00001.bin" -10
ls -l --time-style=+%s.%N "$tmp/none" > "$tmp/none.before"
expect_error "every checkpoint damaged" "no checkpoint in $tmp/none passes its checks" $MPIRUN -np 2 $BIN $R -x 6 -o "$tmp/none" -y 1
ls -l --time-style=+%s.%N "$tmp/none" | grep -v -e main.log -e main.jsonl -e job.lock > "$tmp/none.after"
grep -v -e main.log -e main.jsonl -e job.lock "$tmp/none.before" | cmp -s - "$tmp/none.after" && ok "the damaged checkpoints are left as they were" \
    || bad "the failed resume changed the directory: $(diff "$tmp/none.before" "$tmp/none.after" | tr '\n' ' ')"

# a marker with nothing to verify against is no complete checkpoint: an empty one (an
# earlier version's, or one cut short) and a directory of that name are passed over
fresh empty; : > "$tmp/empty/DONE_00000004"
resume_check empty "DONE_00000004 is empty: it has no checksums"
fresh dirmark; rm "$tmp/dirmark/DONE_00000004"; mkdir "$tmp/dirmark/DONE_00000004"
resume_check dirmark "DONE_00000004 is a directory, not a manifest"
# --allow-unverified 1: an earlier version's empty marker resumed, with a warning, from step 4
fresh old; : > "$tmp/old/DONE_00000004"
run old 2 $R -x 6 -o "$tmp/old" -y 1 --allow-unverified 1 && grep -q "has no checksums" "$tmp/old.log" && grep -q "resumed from .* at step 4" "$tmp/old.log" \
    && ok "--allow-unverified 1: an empty DONE marker of an earlier version resumes, with a warning" || bad "old marker: $(grep -m2 -E 'warning|error|resumed' "$tmp/old.log" | tr '\n' ' ')"

# ---------------------------------------------------------------------------
# --keep-checkpoints 2: after steps 1..5, only 4 and 5 remain, whole; nothing else left
run keep 1 $R -x 5 -o "$tmp/keep" -n 1 --keep-checkpoints 2 || bad "setup: the --keep-checkpoints run failed"
want="DONE_00000004 DONE_00000005 job.lock main.jsonl main.log model_00000004.bin model_00000005.bin state_00000004_00000.bin state_00000005_00000.bin"
got=$(ls "$tmp/keep" | tr '\n' ' ' | sed 's/ $//')
[ "$got" = "$want" ] && ok "--keep-checkpoints 2 leaves the two newest checkpoints and nothing of the older ones" || bad "--keep-checkpoints 2 left: $got"
expect_error "--keep-checkpoints takes a count" "--keep-checkpoints" $BIN $R -x 1 --keep-checkpoints -1
# the newest checkpoint (4) damaged: the resume goes back to 2 and saves 3. Only checkpoints
# that pass count: K = 2 keeps 3 and 2 and sets 4 aside, named; K = 1 keeps the one just
# saved. (Counting markers, 4 stayed and the good ones went: at K = 1, even the new 3.)
keep_damaged() {  # keep_damaged K WANT: resumes the damaged copy with --keep-checkpoints K
    local k=$1 want=$2 name=keepd$1
    fresh "$name"; flip "$tmp/$name/state_00000004_00001.bin" -4096
    run "$name" 2 $R -x 3 -n 3 -o "$tmp/$name" -y 1 --keep-checkpoints "$k" > /dev/null
    local got; got=$(cd "$tmp/$name" && ls | grep -v -x -e main.log -e main.jsonl -e job.lock | tr '\n' ' ' | sed 's/ $//')
    if [ "$got" = "$want" ] && grep -q "resumed from .* at step 2" "$tmp/$name.log" \
        && ./checkpoint_tool verify "$tmp/$name" > /dev/null 2>&1; then
        ok "--keep-checkpoints $k with the newest damaged: left $got, every one verifies"
    else
        bad "--keep-checkpoints $k with the newest damaged: left $got; $(grep -m2 -E 'warning: --keep|error' "$tmp/$name.log" | tr '\n' ' ')"
    fi
}
keep_damaged 2 "DONE_00000002 DONE_00000003 damaged_00000004 model_00000002.bin model_00000003.bin state_00000002_00000.bin state_00000002_00001.bin state_00000003_00000.bin state_00000003_00001.bin"
grep -qF "warning: --keep-checkpoints: the checkpoint at step 4 in $tmp/keepd2 fails its checks (see above): moved to $tmp/keepd2/damaged_00000004" "$tmp/keepd2.log" \
    && [ "$(ls "$tmp/keepd2/damaged_00000004" | tr '\n' ' ')" = "DONE_00000004 model_00000004.bin state_00000004_00000.bin state_00000004_00001.bin " ] \
    && ok "the damaged checkpoint is named and set aside whole into damaged_00000004" || bad "the damaged checkpoint set aside: $(ls "$tmp/keepd2/damaged_00000004" 2>&1 | tr '\n' ' ')"
keep_damaged 1 "DONE_00000003 model_00000003.bin state_00000003_00000.bin state_00000003_00001.bin"

# a model file of -o as -e: the checkpoint of its step would replace it, --keep-checkpoints
# remove it; refused before anything is written, however -e names it
fresh in_out; ln -s "$tmp/in_out/model_00000002.bin" "$tmp/in_out_link.bin"
(cd "$tmp/in_out" && ls | grep -v -x -e job.lock -e main.jsonl | xargs md5sum > "$tmp/in_out.md5")  # job.lock: the refused run's own
expect_error "-e a checkpoint file of -o" \
    "refusing to replace $tmp/in_out/model_00000002.bin: it is an input of this run (-e), the same file as $tmp/in_out_link.bin: a checkpoint would replace it" \
    $MPIRUN -np 2 $BIN $R -e "$tmp/in_out_link.bin" -x 4 -n 1 -o "$tmp/in_out" --keep-checkpoints 1
(cd "$tmp/in_out" && md5sum -c --quiet "$tmp/in_out.md5" > /dev/null 2>&1) && [ "$(ls "$tmp/in_out" | grep -v -x -e job.lock -e main.jsonl | wc -l)" = 9 ] \
    && ok "nothing in -o written or removed" || bad "-o changed: $(ls "$tmp/in_out" | tr '\n' ' ')"

# ---------------------------------------------------------------------------
# the partitioned model file: every rank writes its own ranges of each unit. A small model
# (written here by numpy, not by the trainer) trained 2 steps on 2 ranks; its checkpoint's
# model file must be what checkpoint_tool consolidate builds offline from the state files.
# That file, loaded with -e and saved after a step at -l 0 (AdamW moves nothing), must come
# back byte for byte (fp32; bf16: consolidate --bf16's) at 1, 2 and 4 ranks, stages 0, 1
# and 3, and with stage 3's parameters and optimizer on NVMe: each world size cuts the
# units elsewhere.
$PY - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
maxT, V, Vp, L, NH, C = 32, 61, 64, 2, 2, 24   # units of 2304, 7128 (x2) and 48 parameters: odd shards at 4 ranks
h = np.zeros(256, dtype=np.int32); h[:8] = [20240326, 3, maxT, V, L, NH, C, Vp]
n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
open(f"{d}/tiny.bin", "wb").write(h.tobytes() + (np.random.RandomState(3).randn(n) * 0.05).astype(np.float32).tobytes())
t = np.zeros(256, dtype=np.int32); t[:3] = [20240520, 1, 4000]
open(f"{d}/tiny_train.bin", "wb").write(t.tobytes() + np.random.RandomState(4).randint(0, V, 4000).astype(np.uint16).tobytes())
EOF
P="-i $tmp/tiny_train.bin -j $tmp/tiny_train.bin -t 16 -b 4 -v 0 -s 0 --seed 5"
if run part 2 -e "$tmp/tiny.bin" $P -l 1e-2 -x 2 -n 2 -o "$tmp/part" && ./checkpoint_tool consolidate "$tmp/part" 2 "$tmp/ref.bin" > /dev/null \
    && ./checkpoint_tool consolidate "$tmp/part" 2 "$tmp/ref_bf16.bin" --bf16 > /dev/null; then
    cmp -s "$tmp/part/model_00000002.bin" "$tmp/ref.bin" && ! cmp -s "$tmp/tiny.bin" "$tmp/ref.bin" \
        && ok "partitioned model file at N=2 = checkpoint_tool consolidate's, byte for byte (after 2 steps that moved it)" \
        || bad "the partitioned model file at N=2 differs from consolidate's (or training moved nothing)"
    mkdir -p "$tmp/part_nvme"
    i=0
    for cfg in "1 -z 0" "2 -z 3" "4 -z 0" "4 -z 1" "4 -z 3" \
               "4 -z 3 --offload-param nvme --max-in-cpu 0 --offload-optimizer nvme --nvme-path $tmp/part_nvme"; do
        read -r n zflags <<< "$cfg"
        i=$((i + 1))
        for v in 3 5; do
            want="$tmp/ref.bin"; bf=""
            [ $v = 5 ] && { want="$tmp/ref_bf16.bin"; bf="--save-bf16 1"; }
            if run "part$i$v" "$n" -e "$tmp/ref.bin" $P -l 0 -x 1 -n 1 $zflags $bf -o "$tmp/part$i$v" \
                && cmp -s "$tmp/part$i$v/model_00000001.bin" "$want"; then
                ok "model file version $v written by $n ranks ($zflags) = the reference, byte for byte"
            else
                bad "model file version $v written by $n ranks ($zflags) differs from the reference: $(cmp "$tmp/part$i$v/model_00000001.bin" "$want" 2>&1)"
            fi
        done
    done
else
    bad "setup of the partitioned model file tests ($(tail -1 "$tmp/part.log"))"
fi

# a disk that fills during the partitioned write, on a 1 MiB tmpfs (when this machine lets
# us mount one): after a complete checkpoint of step 1, the disk is filled but for 8 KiB,
# the header's page; the save of step 2 fails on every rank with one message naming the
# rank, the file and the reason, leaves no temporary and no marker, and step 1 is intact
full=$tmp/full
mkdir -p "$full"
trap 'mountpoint -q "$full" 2>/dev/null && umount "$full"; rm -rf "$tmp"' EXIT
if mount -t tmpfs -o size=1m tmpfs "$full" 2>/dev/null; then
    if run fill1 2 -e "$tmp/tiny.bin" $P -l 1e-2 -x 1 -n 1 -z 3 -o "$full/out"; then
        cp -r "$full/out" "$tmp/full_before"
        dd if=/dev/zero of="$full/slack" bs=4k count=2 2>/dev/null
        dd if=/dev/zero of="$full/fill" bs=4k 2>/dev/null   # until the disk is full
        rm "$full/slack"
        expect_error "a full disk during the partitioned model file" \
            "checkpoint at step 2: rank " $MPIRUN -np 2 $BIN -e "$tmp/tiny.bin" $P -l 1e-2 -x 2 -n 1 -z 3 -o "$full/out" -y 1
        grep -qF "model_00000002.bin.tmp: No space left on device" "$tmp/err" "$tmp/out" \
            && ok "the message names the model file's temporary and the full disk" || bad "full disk: $(grep -m1 error "$tmp/err")"
        left=$(cd "$full/out" && ls | grep -v -x -e main.log -e main.jsonl -e job.lock -e DONE_00000001 -e model_00000001.bin -e 'state_00000001_0000[01].bin')
        [ -z "$left" ] && ok "no marker, temporary or file of step 2 left on the full disk" || bad "left on the full disk: $left"
        diff -r -x main.log -x main.jsonl -x job.lock "$tmp/full_before" "$full/out" > /dev/null && ./checkpoint_tool verify "$full/out" 1 > /dev/null 2>&1 \
            && ok "the complete checkpoint of step 1 is untouched and verifies" || bad "the checkpoint of step 1 changed on the full disk"
    else
        bad "setup of the full-disk checkpoint ($(tail -1 "$tmp/fill1.log"))"
    fi
    umount "$full"
else
    echo "SKIP a full disk during the partitioned model file (cannot mount a tmpfs here)"
fi

# the memory of a save and of the finiteness check before it: no rank holds more than one
# unit's shard of the master (and a constant) beyond the engine's own, fp32 and bf16, at 2
# and 4 ranks (the save that gathered the model on rank 0 took 54 MB there at 4 ranks,
# against a bound of 12 MB); then the check names the first non-finite parameter put in
if mpicc -O1 -fopenmp -std=gnu11 -I. -D_GNU_SOURCE $(pkg-config --cflags libcjson libpcre2-8 liburing) test/e2e/save_memory.c \
        build/lib/opt/lib.a -o "$tmp/save_memory" $(pkg-config --libs libcjson libpcre2-8 liburing) -lm; then
    for n in 2 4; do
        for v in 3 5; do
            mkdir -p "$tmp/mem$n$v"
            $MPIRUN -np $n "$tmp/save_memory" "$tmp/mem$n$v" $v > "$tmp/mem.out" 2>&1
            if [ "$(grep -c '^PASS' "$tmp/mem.out")" = $((2 * n)) ] && grep -q "^$n passed, 0 failed" "$tmp/mem.out" && [ -f "$tmp/mem$n$v/DONE_00000001" ]; then
                ok "a save at $n ranks (version $v) holds at most one unit's shard + 5 MiB beyond the engine's memory on every rank; a non-finite parameter is named"
            else
                bad "the memory of a save at $n ranks (version $v): $(grep -E 'FAIL|error' "$tmp/mem.out" | head -2 | tr '\n' ' ')"
            fi
        done
    done
else
    bad "test/e2e/save_memory.c does not build"
fi

# ---------------------------------------------------------------------------
# durability: the model and state files are fsync'ed (and their directory) before the
# marker's rename, and the marker's directory after it
if command -v strace > /dev/null; then
    strace -f -e trace=fsync,rename -o "$tmp/strace" $BIN $R -x 2 -o "$tmp/sync" -n 2 > /dev/null 2>&1
    $PY - "$tmp/strace" <<'EOF' && ok "model and state files and their directory are fsync'ed before DONE is renamed into place, and DONE after" \
        || bad "fsync order: $(grep -E 'fsync|rename' "$tmp/strace" | head -12 | tr '\n' ' ')"
import re, sys
ev = []
for line in open(sys.argv[1]):
    m = re.search(r'(fsync|rename)\((.*)\)\s+= (-?\d+)', line)
    if m: ev.append((m.group(1), m.group(2), int(m.group(3))))
ren = [i for i, e in enumerate(ev) if e[0] == "rename" and e[2] == 0]
name = lambda i: ev[i][1]
done = [i for i in ren if "DONE_00000002.tmp" in name(i)]
model = [i for i in ren if "model_00000002.bin.tmp" in name(i)]
state = [i for i in ren if "state_00000002_00000.bin.tmp" in name(i)]
assert done and model and state, ev
fs = lambda a, b: sum(1 for i in range(a, b) if ev[i][0] == "fsync" and ev[i][2] == 0)
# each file: fsync before its rename, the directory after it
assert fs(0, model[0]) >= 1 and fs(model[0], state[0]) >= 2 and fs(state[0], done[0]) >= 2 and fs(done[0], len(ev)) >= 1, ev
EOF
else
    bad "strace is not installed (scripts/install_deps.sh installs it)"
fi

finish
