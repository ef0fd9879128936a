#!/usr/bin/env bash
# The trainer launched the way clusters launch it: a real SLURM (Debian's slurmctld and
# slurmd, scripts/install_deps.sh) started by this script from a slurm.conf of its own in
# $tmp (no systemd, no munge: auth/none; ports chosen free; the node declared with 64 CPUs
# and 8 GPUs, character devices standing in for them, so that 4 tasks fit on 2 cores and
# the job scripts' --gpus-per-task can be scheduled). Run from the repo root after `make
# train_gpt2_zero3_cpu checkpoint_tool data`, as root. d2 for a few steps, as the other
# suites.
#   cluster     the daemons come up and the node is idle; srun has the PMIx plugin
#   srun        `srun --mpi=pmix -n 2` and `-n 4` (-z 3) give the losses of `mpirun -np 2`
#               and `-np 4`, bit for bit
#   sbatch      `sbatch --wait` of a job script running srun: exit 0, the same losses
#   preemption  `scancel --signal=USR1` on a running job: every rank says it got the
#               signal, the checkpoint of the step it stopped at verifies with a state file
#               of each rank, the job ends COMPLETED with exit 0; the job resubmitted with
#               -y 1 resumes there, and the losses before and after equal one uninterrupted
#               run's, bit for bit
#   killed      a task killed (SIGKILL) under srun ends the step at once: srun non-zero,
#               naming the task that was killed; no rank left running
#   no PMIx     `srun --mpi=none -n 2` is refused by every task, saying to use srun
#               --mpi=pmix; nothing trained, no -o made
#   job scripts every scripts/slurm/*.sbatch: its directives (one task per GPU, a USR1
#               preemption notice, --requeue, the output file) and `sbatch --test-only`
#               accepted; its DRY_RUN command is srun --mpi=pmix of the run script's trainer
#               with -y 1; gpt2_124M.sbatch run for real, scaled down to the CPU trainer as
#               test_scripts.sh scales the run scripts (TRAINER, MAX_STEPS, EXTRA_ARGS, the
#               nvidia-smi stand-in): signalled after its first step it checkpoints,
#               requeues itself, resumes and completes, its losses after the resume those of
#               one uninterrupted mpirun of the same command
#   two nodes   the network-namespace hosts of test_multihost.sh as two slurmd nodes:
#               srun --mpi=pmix of 2 x 2 tasks gives the losses of 4 ranks on one host,
#               MPI sees two nodes, and the bytes that crossed the veths are within 10% of
#               the report's inter-node bytes
#   teardown    no daemon, step or task of these clusters left (every exit path: trap)
# Where SLURM cannot run here (not root, not installed, no PMIx plugin): "SKIP slurm:
# <reason>" and "0 passed, 0 failed", which run_all.sh names as a skipped suite.
# KEEP=DIR copies the temporary directory (slurm.conf, the daemons' logs, the jobs' output)
# to DIR at exit, for a look after a failure. Ends with "N passed, N failed".
source "$(dirname "$0")/lib.sh"   # cd to the repo root; $BIN, $PY, $tmp, ok/bad/finish, run, losses
source test/e2e/netns_hosts.sh    # hosts_up/down, hosts_addr, hosts_link_bytes (the two nodes)

# a SLURM job around this suite (make test under sbatch) must not leak into our cluster's
unset "${!SLURM_@}"

VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
SMALL=(-e d2 -i "$VAL" -j "$VAL" -t 32 -b 2 -v 0 -s 0 -l 1e-3 -k constant --seed 5)
ABS_BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")   # what a job script runs

# ---------------------------------------------------------------------------
# the cluster

SLURM_UP=0 CONF=""
# slurm_up NAME NODELINES CTLD_ADDR: slurmctld (here) from $tmp/NAME/slurm.conf with the
# node lines given; the caller starts the slurmds (slurmd_start). 1 with $WHY on failure
slurm_up() {
    local name=$1 nodes=$2 addr=$3 d=$tmp/$1 ports
    mkdir -p "$d/ctld" "$d/spool"
    # two free ports (the daemons' defaults, 6817/6818, may be a real cluster's)
    ports=$($PY -c "
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(('', 0))
print(*(x.getsockname()[1] for x in s))") || { WHY="no free port"; return 1; }
    read -r ctld_port d_port <<< "$ports"
    CONF=$d/slurm.conf
    # auth/none, cred/none: no munge daemon; linuxproc and task/none: no cgroup set-up (this
    # machine's cgroups are v1, a container's may be read-only); config_overrides: the node
    # is what this file says (64 CPUs, 8 GPUs) whatever the hardware; OverSubscribe=FORCE:
    # jobs share the node, as the tests' runs share the 2 cores
    cat > "$CONF" <<EOF
ClusterName=ci
SlurmctldHost=$(hostname -s)($addr)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
GresTypes=gpu
MinJobAge=600
AuthInfo=cred_expire=5
TmpFS=$d/tmpfs/%n
StateSaveLocation=$d/ctld
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/ctld.pid
SlurmdPidFile=$d/d_%n.pid
SlurmctldLogFile=$d/ctld.log
SlurmdLogFile=$d/d_%n.log
SlurmdParameters=config_overrides
$nodes
PartitionName=ci Nodes=ALL Default=YES State=UP OverSubscribe=FORCE
EOF
    echo "CgroupPlugin=cgroup/v1" > "$d/cgroup.conf"
    : > "$d/gres.conf"
    export SLURM_CONF=$CONF
    SLURM_UP=1
    slurmctld -f "$CONF" > "$d/ctld.out" 2>&1 || { WHY="slurmctld did not start: $(tail -1 "$d/ctld.out") $(grep -m1 -E 'error|fatal' "$d/ctld.log" 2>/dev/null)"; return 1; }
}
# slurmd_start NODE [PREFIX...]: slurmd for NODE (PREFIX: how to run it, e.g. in a namespace),
# with 8 stand-in GPUs (gres.conf's File= must name character devices: /dev/null's)
slurmd_start() {
    local node=$1 d; shift
    d=$(dirname "$CONF")
    mkdir -p "$d/spool/$node" "$d/gpu_$node" "$d/tmpfs/$node"
    local i
    for i in 0 1 2 3 4 5 6 7; do [ -e "$d/gpu_$node/nvidia$i" ] || mknod "$d/gpu_$node/nvidia$i" c 1 3; done
    echo "NodeName=$node Name=gpu File=$d/gpu_$node/nvidia[0-7]" >> "$d/gres.conf"
    "$@" slurmd -f "$CONF" -N "$node" > "$d/d_$node.out" 2>&1 || { WHY="slurmd $node did not start: $(tail -1 "$d/d_$node.out")"; return 1; }
}
# slurm_idle N SECONDS: until N nodes are idle; 1 with $WHY when the time is up
slurm_idle() {
    local i s
    for ((i = 0; i < $2 * 5; i++)); do
        s=$(sinfo -h -N -o %T 2>/dev/null | grep -c '^idle')
        [ "$s" -ge "$1" ] && return 0
        sleep 0.2
    done
    WHY="$1 node(s) not idle after $2 s: $(sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ';') $(grep -h -m2 -E 'error|fatal' "$(dirname "$CONF")"/*.log 2>/dev/null | tr '\n' ' ')"
    return 1
}
# ours PIDS...: the processes of this cluster (daemons, slurmstepd, tasks: SLURM_CONF is ours)
ours() {
    local p
    for p in /proc/[0-9]*; do
        tr "\\0" "\\n" 2>/dev/null < "$p/environ" | grep -qxF "SLURM_CONF=$CONF" && echo "${p#/proc/}"
    done
}
# slurm_down: the jobs cancelled, the daemons shut down, whatever of ours is left killed
slurm_down() {
    [ "$SLURM_UP" = 1 ] || return 0
    local i j
    j=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -n "$j" ] && scancel $j 2>/dev/null
    for ((i = 0; i < 50; i++)); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
    scontrol shutdown > /dev/null 2>&1
    for ((i = 0; i < 50; i++)); do [ -z "$(ours)" ] && break; sleep 0.2; done
    # shellcheck disable=SC2046
    kill -KILL $(ours) 2>/dev/null
    SLURM_UP=0
    unset SLURM_CONF
    return 0
}
trap 'slurm_down; [ -n "${KEEP:-}" ] && cp -r "$tmp" "$KEEP"; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# job_state JOB: "STATE EXITCODE RESTARTS" from scontrol (no accounting: sacct has nothing)
job_state() {
    local f
    f=$(scontrol show job "$1" 2>/dev/null | tr ' ' '\n')
    [ -n "$f" ] || return 0
    echo "$(sed -n 's/^JobState=//p' <<< "$f") $(sed -n 's/^ExitCode=//p' <<< "$f") $(sed -n 's/^Restarts=//p' <<< "$f")"
}
# job_wait JOB SECONDS: until the job has ended (not pending, running, completing or
# requeued); its state in $state. 1 when the time is up
job_wait() {
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        state=$(job_state "$1")
        case $state in PENDING*|RUNNING*|COMPLETING*|REQUEUE*|CONFIGURING*|"") sleep 0.2 ;; *) return 0 ;; esac
    done
    return 1
}
# ranks_of DIR: the pids of the trainer's processes writing -o DIR
ranks_of() {
    local p
    for p in $(pgrep -f -- "-o $1( |\$)"); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = train_gpt2_zero ] && echo "$p"; done
}
# same_losses A.json B.json [FROM]: the losses are equal as printed with 17 digits (bit for
# bit), B's from its step FROM (0-based) on
same_losses() {
    losses "$1" > "$tmp/sl_a" 2>/dev/null && losses "$2" 2>/dev/null | tail -n +"$((${3:-0} + 1))" > "$tmp/sl_b" &&
        [ -s "$tmp/sl_a" ] && cmp -s "$tmp/sl_a" "$tmp/sl_b"
}
# step_lines LOG: how many step lines the log has
step_lines() { grep -c '^step ' "$1" 2>/dev/null; }

# ---------------------------------------------------------------------------
# can SLURM run here?

why=""
[ "$(id -u)" = 0 ] || why="not root (slurmd runs jobs as their users: a one-machine cluster here needs root)"
for c in slurmctld slurmd srun sbatch scontrol sinfo squeue scancel mknod; do
    [ -n "$why" ] || command -v "$c" > /dev/null || why="no '$c' command (scripts/install_deps.sh installs SLURM)"
done
if [ -z "$why" ] && ! compgen -G "/usr/lib/*/slurm-wlm/mpi_pmix*.so" > /dev/null && ! compgen -G "/usr/lib*/slurm/mpi_pmix*.so" > /dev/null; then
    why="SLURM's PMIx plugin (mpi_pmix.so, package slurm-wlm-basic-plugins) is not installed"
fi
if [ -n "$why" ]; then echo "SKIP slurm: $why"; finish; exit 0; fi
if [ ! -x "$BIN" ] || [ ! -x ./checkpoint_tool ] || [ ! -f "$VAL" ]; then
    bad "$BIN, ./checkpoint_tool and $VAL are needed (make train_gpt2_zero3_cpu checkpoint_tool data)"; finish; exit 1
fi

host=$(hostname -s)
t0=$SECONDS
if slurm_up one "NodeName=$host NodeAddr=127.0.0.1 CPUs=64 Gres=gpu:8 State=UNKNOWN" 127.0.0.1 && slurmd_start "$host" && slurm_idle 1 30; then
    ok "cluster: slurmctld and slurmd up, node $host idle in $((SECONDS - t0)) s"
else
    bad "cluster: $WHY"; finish; exit 1
fi
if srun --mpi=list 2>&1 | grep -qw pmix; then ok "srun --mpi=list has pmix"
else bad "srun --mpi=list has no pmix: $(srun --mpi=list 2>&1 | tr '\n' ' ')"; fi

# ---------------------------------------------------------------------------
# srun against mpirun: the same ranks, the same losses

for n in 2 4; do
    run "mpirun$n" "$n" "${SMALL[@]}" -x 3 -z 3 || bad "mpirun -np $n"
    timeout 120 srun --mpi=pmix -n "$n" "$BIN" "${SMALL[@]}" -x 3 -z 3 --report "$tmp/srun$n.json" > "$tmp/srun$n.log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && same_losses "$tmp/srun$n.json" "$tmp/mpirun$n.json" && grep -q "^memory rank $((n - 1)) " "$tmp/srun$n.log"; then
        ok "srun --mpi=pmix -n $n: $n ranks, the losses of mpirun -np $n bit for bit ($(tr '\n' ' ' < "$tmp/sl_a"))"
    else
        bad "srun --mpi=pmix -n $n (exit $rc): $(grep -m2 -iE 'error' "$tmp/srun$n.log" | tr '\n' ' ') losses $(tr '\n' ' ' < "$tmp/sl_a" 2>/dev/null) vs $(losses "$tmp/mpirun$n.json" 2>/dev/null | tr '\n' ' ')"
    fi
done

# ---------------------------------------------------------------------------
# sbatch --wait of a job script that runs srun

# job_script FILE TASKS ARGS...: a batch job of TASKS tasks running the trainer under srun
job_script() {
    local f=$1 n=$2; shift 2
    printf '#!/bin/bash\n#SBATCH --ntasks=%s\n#SBATCH --output=%s\nsrun --mpi=pmix %s %s\n' "$n" "${f%.sh}.out" "$ABS_BIN" "$*" > "$f"
}
job_script "$tmp/batch.sh" 2 "${SMALL[@]}" -x 3 -z 3 --report "$tmp/batch.json"
timeout 120 sbatch --wait --chdir="$PWD" "$tmp/batch.sh" > "$tmp/batch.sbatch" 2>&1; rc=$?
if [ $rc -eq 0 ] && same_losses "$tmp/batch.json" "$tmp/mpirun2.json"; then
    ok "sbatch --wait of a job script running srun: exit 0, the losses of mpirun -np 2"
else
    bad "sbatch --wait (exit $rc): $(cat "$tmp/batch.sbatch") $(grep -m2 -iE 'error' "$tmp/batch.out" 2>/dev/null | tr '\n' ' ')"
fi

# ---------------------------------------------------------------------------
# preemption: a running job signalled (what #SBATCH --signal=USR1@T sends T seconds before
# the job's end) checkpoints on every rank and exits 0; resubmitted, it resumes

o=$tmp/sig
job_script "$tmp/sig.sh" 2 "${SMALL[@]}" -z 3 -x 1000 -o "$o" --report "$tmp/sig.json"
j=$(sbatch --parsable --chdir="$PWD" "$tmp/sig.sh" 2> "$tmp/err")
if [ -n "$j" ] && wait_for "$tmp/sig.out" "step    2/" 60; then
    scancel --signal=USR1 "$j"
    job_wait "$j" 60; state=$(job_state "$j")
    s=$(sed -nE "s/^received SIGUSR1: saved checkpoint at step ([0-9]+) in .*, exiting$/\1/p" "$tmp/sig.out")
    said=$(grep -cE "^rank [01]: received SIGUSR1 while " "$tmp/sig.out")
    if [ "${state% *}" = "COMPLETED 0:0" ] && [ -n "$s" ] && [ "$said" = 2 ] &&
       ./checkpoint_tool verify "$o" "$s" > "$tmp/verify" 2>&1 && [ -f "$o/state_$(printf %08d "$s")_00000.bin" ] && [ -f "$o/state_$(printf %08d "$s")_00001.bin" ]; then
        ok "scancel --signal=USR1: both ranks stop, the checkpoint of step $s verifies with each rank's state, the job COMPLETED, exit 0"
    else
        bad "scancel --signal=USR1 (job $state, step '${s}', $said of 2 ranks said so): $(tail -2 "$tmp/sig.out" | tr '\n' ' ') $(tail -1 "$tmp/verify" 2>/dev/null)"
    fi
    # resubmitted with -y 1, two steps more: the losses of one run of s + 2 steps
    if [ -n "$s" ]; then
        job_script "$tmp/res.sh" 2 "${SMALL[@]}" -z 3 -x $((s + 2)) -o "$o" -y 1 --report "$tmp/res.json"
        # (polled here: sbatch --wait, checked above, polls at up to 10 s intervals)
        state=""; j=$(sbatch --parsable --chdir="$PWD" "$tmp/res.sh" 2> "$tmp/err")
        rc=1; [ -n "$j" ] && job_wait "$j" 120 && [ "${state% *}" = "COMPLETED 0:0" ] && rc=0
        run full 2 "${SMALL[@]}" -z 3 -x $((s + 2)) || bad "the uninterrupted mpirun -np 2 of $((s + 2)) steps"
        if [ $rc -eq 0 ] && grep -q "resumed from $o at step $s " "$tmp/res.out" && same_losses "$tmp/res.json" "$tmp/full.json" "$s" &&
           losses "$tmp/sig.json" > "$tmp/sig.l" && losses "$tmp/full.json" | head -n "$s" | cmp -s - "$tmp/sig.l"; then
            ok "resubmitted with -y 1: resumed at step $s; steps 1-$s and $((s + 1))-$((s + 2)) equal one uninterrupted run's, bit for bit"
        else
            bad "resubmitted with -y 1 (job ${state:-not submitted: $(cat "$tmp/err")}): $(grep -m1 -E 'resumed|error' "$tmp/res.out" 2>/dev/null) losses $(losses "$tmp/res.json" 2>/dev/null | tr '\n' ' ') vs $(losses "$tmp/full.json" 2>/dev/null | tr '\n' ' ')"
        fi
    fi
else
    bad "the job to signal did not start training ($(cat "$tmp/err"; tail -2 "$tmp/sig.out" 2>/dev/null | tr '\n' ' '))"
    [ -n "$j" ] && scancel "$j"
fi

# ---------------------------------------------------------------------------
# a task killed under srun: the step ends at once, srun saying which task

o=$tmp/kill
timeout 60 srun --mpi=pmix -n 2 "$BIN" "${SMALL[@]}" -z 3 -x 1000 -o "$o" > "$tmp/kill.log" 2>&1 &
spid=$!
victim=""
if wait_for "$tmp/kill.log" "step    2/" 60; then
    for p in $(ranks_of "$o"); do tr '\0' '\n' < "/proc/$p/environ" | grep -qx SLURM_PROCID=1 && victim=$p; done
    [ -n "$victim" ] && kill -KILL "$victim"
fi
start=$SECONDS
wait $spid; rc=$?
left=$(ranks_of "$o" | tr '\n' ' ')
if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE "^srun: error: $host: task 1: Killed" "$tmp/kill.log" && [ -z "$left" ]; then
    ok "task 1 killed under srun: the step ends in $((SECONDS - start)) s, srun exit $rc, 'srun: error: $host: task 1: Killed'; no rank left"
else
    bad "task killed under srun (victim '${victim}', exit $rc, left: '$left'): $(grep -E '^srun' "$tmp/kill.log" | tr '\n' ' ')"
fi
# shellcheck disable=SC2046
kill -KILL $(ranks_of "$o") 2>/dev/null

# ---------------------------------------------------------------------------
# srun without an MPI plugin: refused by every task, nothing trained

timeout 60 srun --mpi=none -n 2 "$BIN" "${SMALL[@]}" -x 3 -o "$tmp/none" > "$tmp/none.log" 2>&1; rc=$?
said=$(grep -cF "but srun gave it no MPI plugin (no PMIX_RANK or PMI_RANK: srun --mpi=none, or MpiDefault=none in slurm.conf): Open MPI cannot start its ranks that way, and each process would train alone, writing the same files. Start the ranks through MPI: srun --mpi=pmix" "$tmp/none.log")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$said" = 2 ] && [ "$(step_lines "$tmp/none.log")" = 0 ] && [ ! -e "$tmp/none" ]; then
    ok "srun --mpi=none -n 2: both tasks refuse, saying to use srun --mpi=pmix; no step, no -o"
else
    bad "srun --mpi=none -n 2 (exit $rc, $said of 2 tasks refused, $(step_lines "$tmp/none.log") steps): $(grep -m2 -iE 'error' "$tmp/none.log" | tr '\n' ' ')"
fi

# ---------------------------------------------------------------------------
# the job scripts: their directives, what SLURM makes of them, the command they run

mapfile -t jobs < <(ls scripts/slurm/*.sbatch)
if [ "${#jobs[@]}" -ge 11 ]; then ok "found ${#jobs[@]} job scripts in scripts/slurm"; else bad "found only ${#jobs[@]} job scripts in scripts/slurm"; fi
for f in "${jobs[@]}"; do
    name=$(basename "$f" .sbatch)
    miss=""
    for want in "--gpus-per-task=1" "--ntasks-per-node=8" "--signal=USR1@" "--requeue" "--open-mode=append" "--output=slurm_%x_%j.out" "--job-name=$name"; do
        grep -qE -- "^#SBATCH $want" "$f" || miss+=" $want"
    done
    # shellcheck disable=SC2016  # the job script's own text, $root and "$@" as written
    run_script=$(sed -nE 's|^exec bash "\$root/scripts/slurm/job.sh" (run_[^ ]+\.sh) "\$@"$|\1|p' "$f")
    sbatch --test-only --chdir="$PWD" "$f" > "$tmp/testonly" 2>&1; rc=$?
    # the command the job runs (DRY_RUN: printed, not run), as the batch job would see it
    SLURM_SUBMIT_DIR=$PWD SLURM_NTASKS=8 DRY_RUN=1 OUT_DIR="$tmp/dry" bash "$f" > "$tmp/dry.out" 2> "$tmp/dry.err"; drc=$?
    line=$(grep -v '^#' "$tmp/dry.out")
    if [ -z "$miss" ] && [ -n "$run_script" ] && [ -f "scripts/$run_script" ] && [ $rc -eq 0 ] && grep -qE "to start at .* using [0-9]+ processors on nodes" "$tmp/testonly" &&
       [ $drc -eq 0 ] && [[ $line == "srun --mpi=pmix --ntasks=8 --kill-on-bad-exit=1 ./train_gpt2_zero3 "* ]] &&
       [[ $line == *" -y 1 "* ]] && [[ $line == *" --stop-grace "* ]]; then
        ok "$name.sbatch: one task per GPU, USR1 notice, --requeue, appended output; sbatch --test-only: $(grep -oE 'using [0-9]+ processors on nodes [^ ]+' "$tmp/testonly"); runs scripts/$run_script under srun --mpi=pmix with -y 1"
    else
        bad "$name.sbatch: missing${miss:- nothing}; run script '${run_script}'; sbatch --test-only (exit $rc): $(head -1 "$tmp/testonly"); dry run (exit $drc): $(head -c 200 <<< "$line") $(head -1 "$tmp/dry.err")"
    fi
done
expect_error "job.sh outside a SLURM job" "not inside a SLURM job: submit the job script" bash scripts/slurm/job.sh run_gpt2_124M.sh

# gpt2_124M.sbatch for real, scaled down to the CPU trainer on 2 tasks (the overrides
# test_scripts.sh uses: TRAINER, MAX_STEPS, data and EXTRA_ARGS, later flags winning; the
# nvidia-smi stand-in for the run script's GPU check); MICRO_BATCH=1 so that the recipe's
# batch of 524288 tokens divides 1 x 1024 x 2 before EXTRA_ARGS shrink it. Signalled after
# its first step, it checkpoints, requeues itself (held back by SLURM's requeue delay, 2
# minutes: released at once here), resumes and completes.
o=$tmp/real
rm -f slurm_gpt2_124M_*.out.test 2>/dev/null
j=$(env PATH="$PWD/test/gpu/standin:$PATH" TRAINER="$BIN" MAX_STEPS=8 OUT_DIR="$o" TRAIN_DATA="$VAL" VAL_DATA="$VAL" MICRO_BATCH=1 \
    EXTRA_ARGS="-e d2 -t 32 -b 2 -d 128 -v 0 -s 0 -u 2 --report $tmp/real.json" \
    sbatch --parsable --chdir="$PWD" --ntasks-per-node=2 --output="$tmp/real.out" --time=10 scripts/slurm/gpt2_124M.sbatch 2> "$tmp/err")
if [ -n "$j" ] && wait_for "$tmp/real.out" "step    1/8" 90; then
    scancel --signal=USR1 "$j"
    for ((i = 0; i < 300; i++)); do
        state=$(job_state "$j")
        case $state in PENDING*|RUNNING*|COMPLETING*|REQUEUE*|CONFIGURING*|"") sleep 0.2 ;; *) break ;; esac
    done
    s=$(sed -nE "s/^received SIGUSR1: saved checkpoint at step ([0-9]+) in .*, exiting$/\1/p" "$tmp/real.out" | head -1)
    cmdline=$(grep -m1 '^+ srun --mpi=pmix --ntasks=2 --kill-on-bad-exit=1 ' "$tmp/real.out")
    args=${cmdline#*"$BIN" }
    # the same command, uninterrupted, under mpirun (a fresh -o, no resume)
    # shellcheck disable=SC2086
    run realref 2 ${args/-o $o/-o $tmp/realref} -y 0
    if [ "$state" = "COMPLETED 0:0 1" ] && [ -n "$s" ] && [ "$s" -lt 8 ] && grep -q "requeueing job $j to resume" "$tmp/real.out" &&
       grep -q "resumed from $o at step $s " "$tmp/real.out" && ./checkpoint_tool verify "$o" 8 > /dev/null 2>&1 &&
       same_losses "$tmp/real.json" "$tmp/realref.json" "$s"; then
        ok "gpt2_124M.sbatch scaled down: srun --mpi=pmix of 2 tasks, stopped at step $s by USR1, requeued itself, resumed, completed (restarts 1); steps $((s + 1))-8 equal one uninterrupted mpirun's, bit for bit"
    else
        bad "gpt2_124M.sbatch scaled down (job $state, stopped at '${s}'): $(grep -E '^job |error|requeue|resumed' "$tmp/real.out" | tail -6 | tr '\n' ' ') slurmctld: $(grep -E "JobId=$j " "$tmp/one/ctld.log" | tail -4 | cut -c1-160 | tr '\n' ' ') losses $(losses "$tmp/real.json" 2>/dev/null | tr '\n' ' ') vs $(losses "$tmp/realref.json" 2>/dev/null | tr '\n' ' ')"
    fi
else
    bad "gpt2_124M.sbatch scaled down did not start training: $(cat "$tmp/err") $(tail -3 "$tmp/real.out" 2>/dev/null | tr '\n' ' ')"
    [ -n "$j" ] && scancel "$j"
fi

# ---------------------------------------------------------------------------
# scripts/profile.sh at NGPU=2 names each rank's report by its rank under either launcher
# (an nsys stand-in that writes the report it is asked for, naming the rank variables it
# saw, and runs nothing; nvidia-smi's stand-in for the GPU check)
cat > "$tmp/nsys" <<'EOF'
#!/bin/sh
# nsys stand-in: `profile ... --output=OUT APP...` writes OUT.nsys-rep (OUT's %q{PROFILE_RANK}
# expanded as nsys does) with the rank variables of its environment; `stats` prints a line
case $1 in
    profile) for a; do case $a in --output=*) out=${a#--output=} ;; esac; done
             out=$(printf '%s' "$out" | sed "s/%q{PROFILE_RANK}/${PROFILE_RANK:-}/")
             echo "OMPI_COMM_WORLD_RANK=${OMPI_COMM_WORLD_RANK:-} SLURM_PROCID=${SLURM_PROCID:-}" > "$out.nsys-rep" ;;
    stats) echo "stats of the stand-in" ;;
esac
EOF
chmod +x "$tmp/nsys"
for launcher in mpirun srun; do
    p=$tmp/prof_$launcher
    # srun's LAUNCHER needs an allocation: salloc runs the script in one
    pre=(); [ $launcher = srun ] && pre=(timeout 120 salloc --quiet -n 2)
    "${pre[@]}" env PATH="$PWD/test/gpu/standin:$PATH" NSYS="$tmp/nsys" TRAINER="$BIN" NGPU=2 LAUNCHER=$launcher OUT_DIR="$p" \
        bash scripts/profile.sh > "$tmp/prof.log" 2>&1; rc=$?
    var=OMPI_COMM_WORLD_RANK; [ $launcher = srun ] && var=SLURM_PROCID
    reps=$(cd "$p" 2>/dev/null && printf '%s ' *.nsys-rep)
    if [ $rc -eq 0 ] && [ "$reps" = "d12_rank0.nsys-rep d12_rank1.nsys-rep " ] &&
       grep -qw "$var=0" "$p/d12_rank0.nsys-rep" && grep -qw "$var=1" "$p/d12_rank1.nsys-rep"; then
        ok "profile.sh NGPU=2 LAUNCHER=$launcher: reports d12_rank0 and d12_rank1, the rank from $var"
    else
        bad "profile.sh NGPU=2 LAUNCHER=$launcher (exit $rc): reports '$reps' $(cat "$p"/*.nsys-rep 2>/dev/null | tr '\n' ' ') $(grep -m2 -E 'error' "$tmp/prof.log" | tr '\n' ' ')"
    fi
done

# ---------------------------------------------------------------------------
# teardown of the one-node cluster: nothing of it left

slurm_down
# shellcheck disable=SC2009
left=$(ps -eo pid,args | grep -E 'slurmctld|slurmd|slurmstepd' | grep -v grep | grep -F "$tmp" | head -3)
if [ -z "$(CONF=$tmp/one/slurm.conf ours)" ] && [ -z "$left" ]; then ok "teardown: no daemon, step or task of the cluster left"
else bad "teardown: left over: $(CONF=$tmp/one/slurm.conf ours | tr '\n' ' ') $left"; fi

# ---------------------------------------------------------------------------
# two nodes: the network-namespace hosts of test_multihost.sh, each a slurmd of its own
# (slurmd -N NAME, run in its namespace under `unshare --uts` with the namespace's name as
# its hostname, as netns_hosts.sh's launcher agent does for Open MPI: the two share /dev/shm,
# and Open MPI names its shared-memory segments by hostname); slurmctld here, reached on the
# bridge; srun run on host A, as on a login node. Open MPI's traffic kept on the subnet as
# hosts_mpirun keeps it (OMPI_MCA_* in the environment, which srun passes to the tasks).

# in_host NS COMMAND...: COMMAND in host NS's namespace, with NS as its hostname
# shellcheck disable=SC2016  # $0 and $@ are the inner shell's
in_host() { local ns=$1; shift; ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"; }

if ! hosts_up 2> /dev/null; then
    skip "two slurmd nodes: the network-namespace hosts cannot be made here: $HOSTS_REASON"
else
    A=$HOSTS_NS_A B=$HOSTS_NS_B
    nodes="NodeName=$A NodeAddr=$(hosts_addr "$A") CPUs=64 Gres=gpu:8 State=UNKNOWN
NodeName=$B NodeAddr=$(hosts_addr "$B") CPUs=64 Gres=gpu:8 State=UNKNOWN"
    t0=$SECONDS
    if slurm_up two "$nodes" "$HOSTS_PREFIX.1" && slurmd_start "$A" in_host "$A" && slurmd_start "$B" in_host "$B" && slurm_idle 2 30; then
        ok "two nodes: slurmd $A and $B, each in its namespace, idle in $((SECONDS - t0)) s"
        # A task died of SIGSEGV inside Open MPI's start-up (a call through NULL, no
        # backtrace past libc), before any rank printed a line, in 2 of about 50 such
        # launches, both in whole runs of this suite under load (none in 37 launches
        # repeated in a loop after the two-node cluster alone, under the same kinds of
        # load; none in the one-node launches); the cause is not known. Such a
        # start is tried once more, and said so. A run that fails otherwise, or twice,
        # fails the check.
        for try in 1 2; do
            before=$(hosts_link_bytes)
            in_host "$A" env OMPI_MCA_btl_tcp_if_include="$HOSTS_SUBNET" OMPI_MCA_oob_tcp_if_include="$HOSTS_SUBNET" OMPI_MCA_btl=tcp,self,vader \
                timeout 120 srun --mpi=pmix -N 2 -n 4 --ntasks-per-node=2 "$ABS_BIN" "${SMALL[@]}" -x 3 -z 3 --report "$tmp/two.json" \
                > "$tmp/two.log" 2>&1; rc=$?
            after=$(hosts_link_bytes)
            v=$((after - before))
            if [ "$try" = 1 ] && [ $rc -gt 128 ] && [ $rc -ne 137 ] && ! grep -qE '^(\||step )' "$tmp/two.log"; then
                echo "  (two nodes: a task died in start-up, exit $rc: $(grep -m1 -E 'srun: error: .*task' "$tmp/two.log"); trying once more)"
                continue
            fi
            break
        done
        if [ $rc -eq 0 ] && $PY - "$tmp/two.json" "$tmp/mpirun4.json" "$v" > "$tmp/two.check" 2>&1 <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1])); ref = json.load(open(sys.argv[2])); v = int(sys.argv[3])
a = [s["loss"] for s in r["steps"]]; b = [s["loss"] for s in ref["steps"]]
# as test_multihost.sh: 1e-5 relative (only the order of fp32 sums across ranks may differ)
d = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) and a else None
assert d is not None and d <= 1e-5, f"losses {a} vs one host's {b}"
net = r["comm"]["network"]
assert net["nodes"] == 2 and net["ranks_per_node"] == 2, f"nodes {net.get('nodes')} x {net.get('ranks_per_node')}"
inter = net["job_bytes"]["inter"]
assert inter > 0 and abs(v - inter) <= 0.10 * inter, f"veths {v} bytes, report inter-node {inter:.0f}"
print(f"max rel diff {d:.2g} against 4 ranks on one host; 2 nodes x 2 ranks; veths {v} bytes, report inter-node {inter:.0f} (ratio {v / inter:.4f})")
PYEOF
        then
            ok "two nodes: srun --mpi=pmix -N 2 -n 4 from host A: $(cat "$tmp/two.check")"
        else
            bad "two nodes: srun --mpi=pmix -N 2 -n 4 (exit $rc): $(tail -1 "$tmp/two.check" 2>/dev/null) $(grep -m3 -iE 'error' "$tmp/two.log" | tr '\n' ' ')"
        fi
    else
        bad "two nodes: $WHY"
    fi
    slurm_down
    if [ -z "$(CONF=$tmp/two/slurm.conf ours)" ]; then ok "teardown: nothing of the two-node cluster left"
    else bad "teardown of the two-node cluster: left over: $(CONF=$tmp/two/slurm.conf ours | tr '\n' ' ')"; fi
    hosts_down
fi

finish
