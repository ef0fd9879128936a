#!/usr/bin/env bash
# One job per directory, no blocking opens, signals that end a stuck run (llmc/job.h,
# common/file.h), run from the repo root after `make all data`: a second job on the same
# -o refused naming the first, whose files stay as they were; a launcher that started
# several processes MPI sees as singletons refused; FIFOs as inputs, in -o and as a swap
# file refused by name, never waited on (every run under `timeout`: a hang fails); SIGINT
# stopping at a step boundary; a process stuck in a blocking read (ZERO3_TEST_HANG) ended
# by a second SIGTERM on every rank, or by --stop-grace after the first.
source "$(dirname "$0")/lib.sh"   # $tmp, ok/bad/finish, expect_error, wait_for

stopped=()   # pids this script SIGSTOPped or left running: killed on every exit
cleanup() {
    for p in "${stopped[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
SMALL="-e d2 -i $VAL -j $VAL -t 32 -b 2 -v 0 -s 0 -l 1e-3 --seed 5"
LIMIT="timeout -k 3 20"   # a run that blocks is ended (exit 124 or 137) and fails its check

# ---------------------------------------------------------------------------
# one job per directory

o=$tmp/one
$BIN $SMALL -x 1000 -o "$o" > "$tmp/a.log" 2>&1 &
apid=$!
stopped+=("$apid")
if wait_for "$tmp/a.log" "step    2/" 60; then
    kill -STOP "$apid"   # its files hold still while the second job tries
    sums() { (cd "$o" && find . -type f | sort | xargs md5sum); }
    before=$(sums)
    expect_error "a second job on the same -o" \
        "flag -o: $o is in use by another job: pid $apid on host $(hostname), started " $LIMIT $BIN $SMALL -x 3 -n 1 -o "$o"
    [ "$(sums)" = "$before" ] && ok "the first job's files are untouched" || bad "the first job's files are untouched"
    kill -0 "$apid" 2>/dev/null && ok "the first job runs on" || bad "the first job runs on"
else
    bad "the first job started ($(tail -1 "$tmp/a.log"))"
fi
kill -KILL "$apid"; wait "$apid" 2>/dev/null
# (its checkpoints of steps 2 and 4 are the FIFO cases' below)
if $LIMIT $BIN $SMALL -x 4 -n 2 -o "$o" > "$tmp/out" 2>&1; then
    ok "the lock of a killed job holds nothing: the next job runs"; else bad "the next job runs ($(tail -1 "$tmp/out"))"; fi

# ---------------------------------------------------------------------------
# the launcher started several processes, MPI sees each alone

launch="this process is one of 2 processes its launcher started"
expect_error "mpirun's world of 2, MPI's of 1" "$launch (OMPI_COMM_WORLD_SIZE=2), but MPI sees a world of 1" \
    env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 $LIMIT $BIN $SMALL -x 1
# what srun sets in each task of `srun -n 2` (Slurm's env.c), without an MPI plugin: refused
# before MPI_Init (Open MPI's would abort under a real srun; test_slurm.sh runs that one)
expect_error "srun -n 2 without PMIx" "$launch (SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0), but srun gave it no MPI plugin (no PMIX_RANK or PMI_RANK: srun --mpi=none, or MpiDefault=none in slurm.conf): Open MPI cannot start its ranks that way, and each process would train alone, writing the same files. Start the ranks through MPI: srun --mpi=pmix" \
    env SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2 SLURM_NPROCS=2 SLURM_PROCID=0 $LIMIT $BIN $SMALL -x 1
# a batch script runs once: the allocation's SLURM_NTASKS there is no launch of several
if env SLURM_NTASKS=4 SLURM_NPROCS=4 SLURM_PROCID=0 $LIMIT $BIN $SMALL -x 0 > "$tmp/out" 2>&1; then
    ok "a batch script's SLURM_NTASKS alone is no launch of several"; else bad "a batch script's SLURM_NTASKS ($(tail -1 "$tmp/out"))"; fi

# ---------------------------------------------------------------------------
# FIFOs: refused by name, never opened

fifo=$tmp/fifo && mkfifo "$fifo"
what="$fifo: it is a FIFO, not a regular file"
expect_error "-e a FIFO" "cannot open model file $what" $LIMIT $BIN $SMALL -x 1 -e "$fifo"
expect_error "-i matching a FIFO" "cannot open shard $what" $LIMIT $BIN $SMALL -x 1 -i "$tmp/fi*"
expect_error "--tokenizer a FIFO" "$fifo: cannot open: it is a FIFO" $LIMIT $BIN $SMALL -x 1 -s 1 --tokenizer "$fifo"
expect_error "--ds-config a FIFO" "--ds-config $fifo: cannot open: it is a FIFO" $LIMIT $BIN $SMALL -x 1 --ds-config "$fifo"
nv=$tmp/nvme && mkdir -p "$nv" && mkfifo "$nv/zero3_rank00000.swp"
expect_error "a FIFO named like a swap file" "cannot create swap file $nv/zero3_rank00000.swp: it is a FIFO, not a regular file" \
    $LIMIT $BIN $SMALL -x 1 -z 3 --offload-optimizer nvme --nvme-path "$nv"
[ -p "$nv/zero3_rank00000.swp" ] && ok "the FIFO is left where it was" || bad "the FIFO is left where it was"
# in -o: a newer marker and the newest checkpoint's state file FIFOs; the resume passes
# over both, naming them, and continues from the checkpoint before
ck=$o
mkfifo "$ck/DONE_00000006" && rm -f "$ck/state_00000004_00000.bin" && mkfifo "$ck/state_00000004_00000.bin"
$LIMIT $BIN $SMALL -x 3 -o "$ck" -y 1 > "$tmp/res.log" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -qF "checkpoint marker $ck/DONE_00000006 is a FIFO, not a manifest" "$tmp/res.log" &&
   grep -qF "cannot read $ck/state_00000004_00000.bin: it is a FIFO, not a regular file" "$tmp/res.log" &&
   grep -qF "resumed from $ck at step 2" "$tmp/res.log"; then
    ok "FIFOs named like checkpoint files: named and passed over, resumed from step 2"
else bad "FIFOs named like checkpoint files (exit $rc: $(grep -m2 -E 'error|warning' "$tmp/res.log" | tr '\n' ' '))"; fi

# ---------------------------------------------------------------------------
# signals

# reap PID SECONDS: PID's exit status once it ends; killed (137) when it has not by then
reap() { timeout "$2" tail -s 0.1 --pid="$1" -f /dev/null; kill -KILL "$1" 2>/dev/null; wait "$1"; }

# SIGINT (a Ctrl-C) stops at the step boundary with a checkpoint, as SIGTERM does;
# env --default-signal: a script's background process starts with SIGINT ignored
env --default-signal=INT $BIN $SMALL -x 1000 -o "$tmp/int" > "$tmp/int.log" 2>&1 &
pid=$!
stopped+=("$pid")
wait_for "$tmp/int.log" "step    2/" 60 && kill -INT "$pid"
reap "$pid" 30; rc=$?
if [ $rc -eq 0 ] && grep -q "received SIGINT: saved checkpoint at step [0-9]* in $tmp/int, exiting" "$tmp/int.log"; then
    ok "SIGINT: a checkpoint and exit 0"; else bad "SIGINT: a checkpoint and exit 0 (exit $rc: $(tail -1 "$tmp/int.log"))"; fi

# hung NAME RANKS ARGS...: RANKS ranks in the background (job: mpirun's pid, or the one
# rank's; pids: the ranks') that block in the test hook once they start saving the
# checkpoint of step 2 (after the one of step 1); returns once every rank says it blocks
hung() {
    local name=$1 n=$2 r; shift 2
    local hang="saving the checkpoint of step 2"
    if [ "$n" -eq 1 ]; then
        ZERO3_TEST_HANG="$hang" $BIN "$@" -n 1 -o "$tmp/$name" > "$tmp/$name.log" 2>&1 &
    else
        $MPIRUN -x ZERO3_TEST_HANG="$hang" -np "$n" $BIN "$@" -n 1 -o "$tmp/$name" > "$tmp/$name.log" 2>&1 &
    fi
    job=$!
    stopped+=("$job")
    for ((r = 0; r < n; r++)); do wait_for "$tmp/$name.log" "ZERO3_TEST_HANG: rank $r blocks" 60; done
    pids=$(pgrep -f -- "^$BIN .*-o $tmp/$name\$")
    stopped+=($pids)
}
# a second SIGTERM ends a rank stuck where the first does not reach: on every rank, with
# what it was doing, 143; the swap files go, the checkpoint of step 1 stays whole
nv2=$tmp/nvme2 && mkdir -p "$nv2"
hung stuck 2 $SMALL -x 1000 -z 3 --offload-optimizer nvme --nvme-path "$nv2"
kill -TERM $pids
wait_for "$tmp/stuck.log" "rank 0: received SIGTERM" 30 && wait_for "$tmp/stuck.log" "rank 1: received SIGTERM" 30
kill -TERM $pids 2>/dev/null   # mpirun may end the other rank first: with a SIGTERM, its second too
reap "$job" 30; rc=$?
n=0
for r in 0 1; do
    grep -qF "error: rank $r: SIGTERM again while saving the checkpoint of step 2 in $tmp/stuck: ending the process now (exit 143)" \
        "$tmp/stuck.log" && n=$((n + 1))
done
if [ $rc -ne 0 ] && [ $n -eq 2 ]; then ok "a second SIGTERM ends both stuck ranks, saying what they were doing"
else bad "a second SIGTERM ends both stuck ranks (exit $rc, $n of 2 ranks said so: $(grep -m2 error "$tmp/stuck.log" | tr '\n' ' '))"; fi
[ -z "$(ls "$nv2")" ] && ok "no swap file left" || bad "no swap file left ($(ls "$nv2"))"
./checkpoint_tool verify "$tmp/stuck" > "$tmp/out" 2>&1 && [ ! -e "$tmp/stuck/DONE_00000002" ] &&
    ok "the checkpoint of step 1 stays whole, none of step 2" || bad "the checkpoints after the end ($(tail -1 "$tmp/out"))"

# one SIGTERM the step loop does not take up within --stop-grace ends the process
hung grace 1 $SMALL -x 1000 --stop-grace 1
kill -TERM $pids
reap "$job" 30; rc=$?
if [ $rc -ne 0 ] && grep -qF "error: rank 0: SIGTERM received 1 s ago still not acted on (--stop-grace) while saving the checkpoint of step 2 in $tmp/grace: ending the process now (exit 143)" "$tmp/grace.log"; then
    ok "--stop-grace 1: a stuck process ends, saying what it was doing"
else bad "--stop-grace 1: a stuck process ends (exit $rc: $(grep -m2 -E 'error|unknown' "$tmp/grace.log" | tr '\n' ' '))"; fi

finish
