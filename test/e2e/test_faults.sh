#!/usr/bin/env bash
# Faults around a run of ./train_gpt2_zero3_cpu, run from the repo root after `make all
# data`: outputs that would replace a link, a FIFO or an input of the run; output paths
# checked at start-up; a full disk under main.log and the report; NVMe swap files
# (locked, removed, a stale one replaced, one zeroed or truncated under the job); SIGTERM/SIGUSR1 (a checkpoint, exit 0, resumed
# to the same losses); a rank that stops (--collective-timeout: before, inside or after a
# collective) or dies; a file that never finishes writing (a checkpoint's, the swap file).
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, run, losses, maxdiff, expect_error, wait_for

mnt=$tmp/mnt            # a small tmpfs for the full-disk cases, when this machine lets us mount one
stopped=()              # pids of ranks this script SIGSTOPped: continued and killed on every exit
cleanup() {
    for p in "${stopped[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
    rm -rf "$tmp"
}
trap cleanup EXIT

VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
SMALL="-e d2 -i $VAL -j $VAL -t 32 -b 2 -v 0 -s 0 -l 1e-3 --seed 5"

# expect_same NAME FILE CONTENT: FILE still holds CONTENT (nothing saved was lost)
expect_same() {
    if [ "$(cat "$2" 2>/dev/null)" = "$3" ]; then ok "$1"; else bad "$1 ($2 changed)"; fi
}

# ---------------------------------------------------------------------------
# outputs never replace a non-regular file or an input of the run

ln -s "$tmp/elsewhere" "$tmp/link.json"
mkfifo "$tmp/fifo.json"
expect_error "report over a symlink" "refusing to replace $tmp/link.json: it is a symlink" \
    $BIN $SMALL -x 1 --report "$tmp/link.json"
[ -L "$tmp/link.json" ] && [ ! -e "$tmp/elsewhere" ] && ok "the symlink is left alone" || bad "the symlink is left alone"
expect_error "report over a FIFO" "refusing to replace $tmp/fifo.json: it is a FIFO" \
    $BIN $SMALL -x 1 --report "$tmp/fifo.json"
cp $VAL "$tmp/val.bin"
ln "$tmp/val.bin" "$tmp/val_link.bin"   # the same file under another name
expect_error "report over a shard" "refusing to replace $tmp/val_link.bin: it is an input of this run (-i)" \
    $BIN $SMALL -i "$tmp/val.bin" -x 1 --report "$tmp/val_link.bin"
cmp -s $VAL "$tmp/val.bin" && ok "the shard is intact" || bad "the shard is intact"
echo '{"zero_optimization": {"stage": 1}}' > "$tmp/ds.json"
expect_error "report over --ds-config" "it is an input of this run (--ds-config)" \
    $BIN $SMALL -x 1 --ds-config "$tmp/ds.json" --report "$tmp/ds.json"
# a model file as -e, and a checkpoint that would write over it under another name
$BIN $SMALL -x 1 -n 1 -o "$tmp/m" > "$tmp/m.log" 2>&1 || bad "making a model file ($(tail -1 "$tmp/m.log"))"
ln "$tmp/m/model_00000001.bin" "$tmp/model.bin"
mkdir -p "$tmp/m2" && ln "$tmp/model.bin" "$tmp/m2/model_00000001.bin"
sum=$(md5sum < "$tmp/model.bin")
expect_error "checkpoint over -e" "refusing to replace $tmp/m2/model_00000001.bin: it is an input of this run (-e)" \
    $BIN $SMALL -e "$tmp/model.bin" -x 1 -n 1 -o "$tmp/m2"
[ "$(md5sum < "$tmp/model.bin")" = "$sum" ] && ok "the model file is intact" || bad "the model file is intact"
# the temporary of an output: a link there is refused, never written through
mkdir -p "$tmp/t" && ln -s "$tmp/target" "$tmp/t/r.json.tmp"
expect_error "temporary over a symlink" "refusing to replace $tmp/t/r.json.tmp: it is a symlink" \
    $BIN $SMALL -x 1 --report "$tmp/t/r.json"
[ ! -e "$tmp/target" ] && ok "nothing written through the link" || bad "nothing written through the link"
# a regular leftover temporary (an earlier crash) is replaced
echo stale > "$tmp/t/s.json.tmp"
if $BIN $SMALL -x 1 --report "$tmp/t/s.json" > "$tmp/out" 2>&1 && [ -s "$tmp/t/s.json" ] && [ ! -e "$tmp/t/s.json.tmp" ]; then
    ok "a stale temporary is replaced"; else bad "a stale temporary is replaced ($(tail -1 "$tmp/out"))"; fi
mkfifo "$tmp/m2/main.log.fifo" && rm -f "$tmp/m2/main.log" && ln -s "$tmp/m2/main.log.fifo" "$tmp/m2/main.log"
expect_error "main.log a symlink" "refusing to replace $tmp/m2/main.log: it is a symlink" $BIN $SMALL -x 1 -o "$tmp/m2"

# ---------------------------------------------------------------------------
# output paths checked at start-up, before any training

touch "$tmp/plain"
expect_error "-o a file" "flag -o: $tmp/plain is not a directory" $BIN $SMALL -x 1 -o "$tmp/plain"
expect_error "-o under a file" "flag -o: cannot create output directory $tmp/plain/out: Not a directory" \
    $BIN $SMALL -x 1 -o "$tmp/plain/out"
expect_error "--report in a missing directory" "flag --report: cannot write the report $tmp/nodir/r.json: $tmp/nodir: No such file or directory" \
    $BIN $SMALL -x 1 --report "$tmp/nodir/r.json"
expect_error "--nvme-path a file" "flag --nvme-path: $tmp/plain is not a directory" \
    $BIN $SMALL -x 1 -z 3 --offload-optimizer nvme --nvme-path "$tmp/plain"
if $BIN $SMALL -x 1 -o "$tmp/newdir" > "$tmp/out" 2>&1 && [ -d "$tmp/newdir" ]; then
    ok "-o created when missing"; else bad "-o created when missing ($(tail -1 "$tmp/out"))"; fi

# ---------------------------------------------------------------------------
# a full disk: main.log and the report fail with the file's name, nothing saved is lost

mkdir -p "$mnt"
if mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null; then
    mkdir "$mnt/out"
    echo "old report" > "$mnt/r.json"
    dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null   # until the disk is full
    expect_error "main.log on a full disk" "cannot write $mnt/out/main.log: No space left on device" \
        $BIN $SMALL -x 2 -o "$mnt/out"
    expect_error "report on a full disk" "cannot write $mnt/r.json: No space left on device" \
        $BIN $SMALL -x 1 --report "$mnt/r.json"
    expect_same "the old report is kept" "$mnt/r.json" "old report"
    [ ! -e "$mnt/r.json.tmp" ] && ok "no temporary left on the full disk" || bad "no temporary left on the full disk"
    umount "$mnt"
else
    # (a file-size limit is no substitute: Open MPI's start-up fails under `ulimit -f`)
    echo "SKIP full disk on a tmpfs (cannot mount one here)"
fi
# ---------------------------------------------------------------------------
# NVMe swap files: locked against a second job, removed on failure, a stale one replaced

nv=$tmp/nvme && mkdir -p "$nv"
NVME="-z 3 --offload-optimizer nvme --nvme-path $nv"
swp=$nv/zero3_rank00000.swp
$BIN $SMALL $NVME -x 1000 > "$tmp/a.log" 2>&1 &
apid=$!
stopped+=("$apid")
if wait_for "$tmp/a.log" "step    1/" 60; then
    expect_error "a second job on the same --nvme-path" "swap file $swp is in use by another job (process $apid" \
        $BIN $SMALL $NVME -x 2
    [ -e "$swp" ] && kill -0 $apid 2>/dev/null && ok "the first job's swap file stays" || bad "the first job's swap file stays"
else
    bad "the first NVMe job started ($(tail -1 "$tmp/a.log"))"
fi
kill -KILL $apid; wait $apid 2>/dev/null
[ -e "$swp" ] && ok "a killed job leaves its swap file" || bad "a killed job leaves its swap file"
if $BIN $SMALL $NVME -x 2 > "$tmp/out" 2>&1 && grep -qF "replacing stale swap file $swp left by an earlier run" "$tmp/out"; then
    ok "a stale swap file is replaced"; else bad "a stale swap file is replaced ($(tail -1 "$tmp/out"))"; fi
[ ! -e "$swp" ] && ok "the swap file is removed at the end" || bad "the swap file is removed at the end"
mkdir -p "$tmp/nf" && ln -s "$tmp/elsewhere" "$tmp/nf/model_00000001.bin"
expect_error "a failure after the engine started" "refusing to replace $tmp/nf/model_00000001.bin" \
    $BIN $SMALL $NVME -x 2 -n 1 -o "$tmp/nf"
[ ! -e "$swp" ] && ok "the swap file is removed on the failure path" || bad "the swap file is removed on the failure path"

# a swap file changed under a running job (another process zeroing part of it, or
# truncating it): the job stops at its next read of a changed block, exit 1, naming the
# file, the block and its byte offset (zero3/nvme.h's checksums: it trained on whatever
# came back), and its swap file is removed. The change is made again every 0.2 s while
# the job lives: one made between the step's read of a block and its write of it is
# written over, unseen, and this is a test of the check, not of that timing.
changed_swap() {  # NAME COMMAND NEEDLE
    local name=$1 change=$2 needle=$3 pid i
    $BIN $SMALL $NVME -x 1000000 > "$tmp/$name.log" 2>&1 &
    pid=$!
    stopped+=("$pid")
    if ! wait_for "$tmp/$name.log" "step    1/" 60; then bad "$name: the job started ($(tail -1 "$tmp/$name.log"))"; return; fi
    for ((i = 0; i < 300; i++)); do
        kill -0 $pid 2>/dev/null || break
        eval "$change" 2>/dev/null
        sleep 0.2
    done
    kill -KILL $pid 2>/dev/null && bad "$name: the job trained on for 60 s over a changed swap file"
    wait $pid; local rc=$?
    if [ $rc -eq 1 ] && grep -qE -- "$needle" "$tmp/$name.log"; then ok "$name: the job stops, naming the file, the block and its offset"
    else bad "$name: exit $rc: $(grep -m1 error "$tmp/$name.log")"; fi
    [ ! -e "$swp" ] && ok "$name: the swap file is removed" || bad "$name: the swap file is left"
}
# (nocreat, -c: a change after the job removed its file must not make a new one)
changed_swap "swap file zeroed under the job" "dd if=/dev/zero of=$swp bs=64k count=16 conv=notrunc,nocreat status=none" \
    "error: nvme_read: $swp: block [0-9]+ \(byte offset [0-9]+, 4096 bytes\) fails its checksum: .* \(it reads as zeros\): the swap file was changed under this job"
changed_swap "swap file truncated under the job" "truncate -c -s 0 $swp" \
    "error: nvme_read: $swp: block [0-9]+ \(byte offset [0-9]+(, 4096 bytes\) fails its checksum|\): unexpected end of file: the swap file was truncated)"

# ---------------------------------------------------------------------------
# SIGTERM / SIGUSR1 to one rank: every rank stops at the next step, with a checkpoint

# signal_run NAME SIGNAL ARGS...: 2 ranks in the background, SIGNAL to one rank once step 2
# is printed; the exit status of the job
signal_run() {
    local name=$1 sig=$2; shift 2
    $MPIRUN -np 2 $BIN "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1 &
    local job=$! pid=""
    if wait_for "$tmp/$name.log" "step    2/" 60; then
        pid=$(pgrep -f -- "^$BIN .*--report $tmp/$name.json" | tail -1)
        stopped+=("$pid")
        kill -"$sig" "$pid"
    fi
    wait $job
}
run sigref 2 $SMALL -x 20 || bad "the uninterrupted run"
signal_run sig TERM $SMALL -x 20 -o "$tmp/sig"; rc=$?
line=$(grep -m1 "received SIGTERM: saved checkpoint at step" "$tmp/sig.log")
if [ $rc -eq 0 ] && [ -n "$line" ] && [[ "$line" == *"in $tmp/sig, exiting" ]]; then
    ok "SIGTERM to one rank: a checkpoint and exit 0"; else bad "SIGTERM to one rank: a checkpoint and exit 0 (exit $rc: $(tail -2 "$tmp/sig.log"))"; fi
s=$(sed -E 's/.*at step ([0-9]+).*/\1/' <<< "$line")
if [ -n "$s" ] && [ "$s" -lt 20 ] && run sigres 2 $SMALL -x 20 -o "$tmp/sig" -y 1 && grep -q "resumed from $tmp/sig at step $s" "$tmp/sigres.log" &&
   $PY -c "
import json, sys
ref = {s['step']: s['loss'] for s in json.load(open(sys.argv[1]))['steps']}
res = json.load(open(sys.argv[2]))['steps']
sys.exit(0 if res and res[-1]['step'] == 19 and all(ref[s['step']] == s['loss'] for s in res) else 1)" "$tmp/sigref.json" "$tmp/sigres.json"; then
    ok "resumed after SIGTERM at step $s: the same losses as the uninterrupted run"
else bad "resumed after SIGTERM at step ${s:-?}: the same losses as the uninterrupted run"; fi
# SIGUSR1 without -o: stops cleanly, and NVMe swap files go with the run
signal_run usr USR1 $SMALL $NVME -x 50; rc=$?
if [ $rc -eq 0 ] && grep -q "received SIGUSR1 at step [0-9]*: no checkpoint without -o, exiting" "$tmp/usr.log"; then
    ok "SIGUSR1 without -o: exit 0 with a message"; else bad "SIGUSR1 without -o: exit 0 with a message (exit $rc: $(tail -2 "$tmp/usr.log"))"; fi
[ -z "$(ls "$nv")" ] && ok "no swap file left after SIGUSR1" || bad "no swap file left after SIGUSR1 ($(ls "$nv"))"

# ---------------------------------------------------------------------------
# a rank that stops (SIGSTOP): --collective-timeout ends the job, naming the collective,
# the step and the rank; one that dies (SIGKILL) ends it within seconds already

expect_error "--collective-timeout negative" "flag --collective-timeout" $BIN $SMALL -x 1 --collective-timeout -1
# hang_run NAME SIGNAL ARGS...: 2 ranks in the background, SIGNAL to rank 1's process once
# step 2 is printed; sets rc (the job's exit status) and secs (from the signal to the end)
hang_run() {
    local name=$1 sig=$2; shift 2
    # (timeout: a watchdog that never fires fails the case instead of hanging the suite)
    timeout -k 5 120 $MPIRUN -np 2 $BIN "$@" --report "$tmp/$name.json" > "$tmp/$name.log" 2>&1 &
    local job=$! pid="" t0
    rc=-1; secs=-1
    wait_for "$tmp/$name.log" "step    2/" 60 || { kill -TERM $job; wait $job; return; }
    pid=$(pgrep -f -- "^$BIN .*--report $tmp/$name.json" | tail -1)
    stopped+=("$pid")
    t0=$(date +%s)
    kill -"$sig" "$pid"
    wait $job; rc=$?
    secs=$(( $(date +%s) - t0 ))
}
hang_run stop STOP $SMALL -z 3 -x 1000 --collective-timeout 3
msg=$(grep -m1 "collective timeout" "$tmp/stop.log")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [[ "$msg" == "error: rank 0: collective timeout: the "*" at step "*" has not completed after 3 s; ranks that have not arrived: 1 (stopped)" ]]; then
    ok "a stopped rank: the job ends in ${secs} s, naming the collective and the rank"
else bad "a stopped rank: the job ends (exit $rc after $secs s: ${msg:-$(tail -1 "$tmp/stop.log")})"; fi
hang_run kill KILL $SMALL -z 3 -x 1000
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok "a killed rank: the job ends in ${secs} s" || bad "a killed rank: the job ends (exit $rc after $secs s)"
# progress, not presence: rank 1 of 3 stops itself (the test hook ZERO3_TEST_STOP) at step 3,
# just before it says it waits in a unit's collective, just after (it is in the collective
# the others wait in, as when SIGSTOP comes at that moment), and just after its wait: each
# time both other ranks name it as stopped, each in its own line
for where in before inside after; do
    ZERO3_TEST_STOP=1:3:$where timeout -k 5 60 $MPIRUN -np 3 -x ZERO3_TEST_STOP $BIN $SMALL -z 3 -x 50 --collective-timeout 2 \
        > "$tmp/stop_$where.log" 2>&1
    rc=$?
    n=$(grep -cE "^error: rank [02]: collective timeout: the [a-z-]+ of unit [0-9]+ at step 3 has not completed after 2 s; ranks that have not arrived: 1 \(stopped\)$" "$tmp/stop_$where.log")
    if [ $rc -ne 0 ] && [ "$n" = 2 ]; then ok "rank 1 stopped $where a collective: ranks 0 and 2 name it"
    else bad "rank 1 stopped $where a collective: ranks 0 and 2 name it (exit $rc: $(grep -m2 error "$tmp/stop_$where.log" | tr '\n' ' '))"; fi
done

# ---------------------------------------------------------------------------
# a file that never finishes (the test hook ZERO3_TEST_STALL_IO: its wait never ends, as on a
# stuck disk): the watchdog ends the job naming the file; the checkpoint before is kept, and
# no swap file is left

ZERO3_TEST_STALL_IO=model_00000004 timeout -k 5 60 $MPIRUN -np 2 -x ZERO3_TEST_STALL_IO $BIN $SMALL -z 1 -x 6 -n 2 -o "$tmp/st" \
    --collective-timeout 2 > "$tmp/st.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qx "error: rank 0: file I/O timeout: the write of $tmp/st/model_00000004.bin.tmp at step 5 has not completed after 2 s" "$tmp/st.log" &&
   [ -e "$tmp/st/DONE_00000002" ] && [ ! -e "$tmp/st/DONE_00000004" ]; then
    ok "a checkpoint's write that never ends: the file named, the checkpoint before kept"
else bad "a checkpoint's write that never ends (exit $rc: $(grep -m2 error "$tmp/st.log" | tr '\n' ' '))"; fi
ZERO3_TEST_STALL_IO=zero3_rank00001 timeout -k 5 60 $MPIRUN -np 2 -x ZERO3_TEST_STALL_IO $BIN $SMALL $NVME -x 6 \
    --collective-timeout 2 > "$tmp/stnv.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -qx "error: rank 1: file I/O timeout: the read or write of $nv/zero3_rank00001.swp during start-up has not completed after 2 s" "$tmp/stnv.log" &&
   grep -q "^error: rank 0: collective timeout: .*; ranks that have not arrived: 1 (in file I/O)$" "$tmp/stnv.log"; then
    ok "a swap file's I/O that never ends: rank 1 names the file, rank 0 names rank 1"
else bad "a swap file's I/O that never ends (exit $rc: $(grep -m2 error "$tmp/stnv.log" | tr '\n' ' '))"; fi
[ -z "$(ls "$nv")" ] && ok "no swap file left after the watchdog's exit" || bad "no swap file left after the watchdog's exit ($(ls "$nv"))"

finish
