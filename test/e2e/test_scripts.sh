#!/usr/bin/env bash
# CPU checks of the launch scripts in scripts/ (no GPU, no data, nothing trained):
#   syntax        bash -n on every script, scripts/slurm's job scripts too (and shellcheck
#                 when it is installed; test_slurm.sh runs the job scripts)
#   run_*.sh      with DRY_RUN=1, at NGPU=1 and NGPU=8, each prints its plan and its
#                 command; the command's flags, given to ./train_gpt2_zero3_cpu with
#                 --estimate 1:NGPU, must parse (args_parse reads and validates every flag,
#                 and trainer_model checks -e and -t, before --estimate prints and exits);
#                 the estimator's model count must be the one the plan assumes; its per-GPU
#                 model states for the chosen stage and offload must be under 80 GB, and
#                 with the trainer's activation estimate within the plan's fit_gib; the total
#                 batch must be a multiple of B*T*NGPU
#   overrides     the environment reaches the command (data, output, micro batch, extra
#                 flags, NVMe path); bad values stop with a message
#   GPU scripts   profile.sh, bench_gpu.sh and a real run stop with a message on a machine
#                 without a GPU; a run script stops at once only when its final checkpoint
#                 verifies (an empty marker is no finished run: on nvidia-smi's stand-in); dev/bench_torch_gpt2.py refuses to run without CUDA, runs
#                 a small model on the CPU, and counts FLOPs like the trainers' reports
#   benchmarks    bench_infinity.sh and bench_comm.sh run on d2 (bench_comm.sh on two
#                 network-namespace hosts: skipped by name where they cannot be made);
#                 every dev/*.c built by a Makefile target (the benchmarks' programs
#                 built here, dev/gpu_probe.cu where nvcc is), bench_nvme.sh,
#                 bench_cpu_adam.sh, bench_cpu_trainer.sh, bench_zero_cpu.sh and
#                 bench_offload.sh at tiny sizes, dev/report_figures.py on a report; every
#                 script run here or skipped by name
# Ends with "N passed, N failed".
# shellcheck source=test/e2e/lib.sh
source "$(dirname "$0")/lib.sh"   # cd to the repo root; $BIN, $PY, $tmp, ok/bad/finish

GB80_GIB=74.5   # 80e9 bytes in GiB: the estimator prints GiB
have_gpu=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then have_gpu=1; fi
if [ ! -x "$BIN" ]; then bad "$BIN is not built (make train_gpt2_zero3_cpu)"; finish; exit 1; fi

mapfile -t runs < <(ls scripts/run_gpt2_*.sh scripts/run_gpt3_*.sh)
if [ "${#runs[@]}" -ge 10 ]; then ok "found ${#runs[@]} run scripts"; else bad "found only ${#runs[@]} run scripts"; fi

# ---------------------------------------------------------------------------
# syntax
for s in scripts/*.sh scripts/slurm/*.sh scripts/slurm/*.sbatch test/e2e/test_scripts.sh; do
    if bash -n "$s" 2> "$tmp/err"; then ok "bash -n $s"; else bad "bash -n $s: $(head -1 "$tmp/err")"; fi
done
# every script the docs run as scripts/NAME.sh is executable (run_common.sh is sourced); a
# missing execute bit reads "Permission denied" to the user, while this file runs them with bash
for s in scripts/*.sh; do
    case $s in scripts/run_common.sh|scripts/gpu_steps.sh) continue ;; esac  # (sourced)
    if [ -x "$s" ] && git ls-files -s "$s" | grep -q '^100755'; then ok "executable: $s"; else bad "$s is not executable (chmod +x, and commit the mode)"; fi
done
for p in dev/bench_torch_gpt2.py dev/bench_torch_sdpa.py dev/report_figures.py dev/kernel_times.py scripts/plot_log.py test/e2e/zscore.py; do
    if "$PY" -m py_compile "$p" 2> "$tmp/err"; then ok "py_compile $p"; else bad "py_compile $p: $(tail -1 "$tmp/err")"; fi
done
if command -v shellcheck > /dev/null; then
    new=(scripts/run_common.sh "${runs[@]}" scripts/profile.sh scripts/bench_gpu.sh scripts/bench_infinity.sh scripts/gpu_bundle.sh scripts/bench_comm.sh
         scripts/bench_tokenize.sh
         scripts/gpu_first_contact.sh scripts/gpu_speed.sh scripts/gpu_steps.sh scripts/gpu_kernel_times.sh scripts/bench_attention.sh
         test/e2e/netns_hosts.sh
         test/e2e/test_scripts.sh test/gpu/bare_machine.sh test/gpu/test_gpu_bundle.sh test/gpu/standin/ncu
         scripts/slurm/job.sh scripts/slurm/*.sbatch test/e2e/test_slurm.sh
         test/gpu/standin/nvidia-smi test/gpu/standin/compute-sanitizer)
    if shellcheck -x -P scripts -e SC1091 "${new[@]}" > "$tmp/sc" 2>&1; then ok "shellcheck on the run, profile and bench scripts"
    else bad "shellcheck: $(grep -m1 -E '^In |SC[0-9]+' "$tmp/sc")"; fi
fi

# ---------------------------------------------------------------------------
# helpers: one dry run, parsed

# dry SCRIPT [ARGS]: runs it with DRY_RUN=1 (plus whatever the caller exported) and
# OUT_DIR=$w/out, leaves the plan line in $plan, the trainer's flags in the array args,
# the whole command in cmd; $w is the working directory ($tmp, or a job's own)
w=$tmp
dry() {
    plan=""; args=(); cmd=()
    DRY_RUN=1 OUT_DIR="$w/out" bash "$@" > "$w/dry" 2> "$w/dryerr" || return 1
    plan=$(grep '^# plan:' "$w/dry")
    local line
    line=$(grep -v '^#' "$w/dry")
    [ -n "$plan" ] && [ -n "$line" ] || return 1
    eval "cmd=($line)"
    local i
    for i in "${!cmd[@]}"; do
        if [ "${cmd[$i]}" = ./train_gpt2_zero3 ]; then args=("${cmd[@]:$((i + 1))}"); return 0; fi
    done
    return 1
}
# pv KEY: a field of the plan line
pv() { sed -E "s/.* $1=([^ ]+).*/\1/" <<< "$plan"; }
# flag NAME DEFAULT: the value of the last NAME in args (the one the parser keeps)
flag() {
    local v=$2 i
    for ((i = 0; i < ${#args[@]} - 1; i++)); do
        if [ "${args[$i]}" = "$1" ]; then v=${args[$((i + 1))]}; fi
    done
    echo "$v"
}
# a count as the estimator prints it (zero_estimate_count): 124475904 -> 124.48M
short() { awk -v v="$1" 'BEGIN { if (v >= 1e9) printf "%.2fB\n", v / 1e9; else if (v >= 1e6) printf "%.2fM\n", v / 1e6;
    else if (v >= 1e3) printf "%.2fK\n", v / 1e3; else printf "%.0f\n", v }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# ---------------------------------------------------------------------------
# every run script at NGPU=1 and NGPU=8, as parallel jobs (the trainer's MPI start-up is
# most of the time, and it waits rather than computes); each job prints "ok/bad<TAB>what"
# lines, replayed in order below

# check_run SCRIPT N: the checks of one script at NGPU=N
check_run() {
    local s=$1 n=$2 name tag model psi want B T D R Z opt param gpu act fit total
    ok() { printf 'ok\t%s\n' "$1"; }
    bad() { printf 'bad\t%s\n' "$1"; }
    name=$(basename "$s" .sh)
    tag="$name NGPU=$n"
    w="$tmp/job_${name}_$n"
    mkdir -p "$w"
    if ! NGPU=$n dry "$s"; then
        bad "$tag: dry run failed: $(head -2 "$w/dryerr" "$w/dry" | tr '\n' ' ')"
        return
    fi
    if [ "${cmd[0]}" = mpirun ] && [ "${cmd[1]}" = -np ] && [ "${cmd[2]}" = "$n" ]; then
        ok "$tag: mpirun -np $n ./train_gpt2_zero3"
    else
        bad "$tag: command is '${cmd[*]:0:4} ...'"
    fi
    if [ -e "$w/out" ]; then bad "$tag: the dry run created $w/out"; rm -rf "$w/out"; fi

    # (a) the CPU trainer's parser takes every flag (the estimate path exits before any
    # data, output directory or parameter memory is touched)
    if $BIN "${args[@]}" --estimate "1:$n" > "$w/est" 2> "$w/esterr"; then
        ok "$tag: the trainer accepts the flags"
    else
        bad "$tag: the trainer rejects the flags: $(head -1 "$w/esterr")"
        return
    fi
    if [ -e "$w/out" ]; then bad "$tag: --estimate created the output directory"; fi

    # the model the trainer builds is the one the plan (and the script's header) assumes
    model=$(flag -e none)
    psi=$(sed -nE 's/.*Psi = ([0-9.]+[KMB]?) params.*/\1/p' "$w/est")
    want=$(short "$(pv params)")
    if [ "$psi" = "$want" ]; then
        ok "$tag: -e $model has $(pv params) parameters ($(pv layers) layers, $(pv channels) channels)"
    else
        bad "$tag: -e $model builds $psi parameters, but the plan is $want = $(pv params) ($(pv layers) layers, $(pv heads) heads, $(pv channels) channels): llmc/gpt2.h's descriptor and scripts/run_common.sh's model_shape disagree"
        return
    fi

    # the plan describes the command
    B=$(flag -b 4) T=$(flag -t 1024) D=$(flag -d -1) R=$(flag -r 1) Z=$(flag -z 0)
    opt=$(flag --offload-optimizer none) param=$(flag --offload-param none)
    if [ "$B/$T/$R/$Z/$opt/$param/$n" = "$(pv B)/$(pv T)/$(pv recompute)/$(pv stage)/$(pv offload_optimizer)/$(pv offload_param)/$(pv ngpu)" ]; then
        ok "$tag: plan matches the command (B=$B T=$T -r $R -z $Z, offload $opt/$param)"
    else
        bad "$tag: plan ($plan) and command (B=$B T=$T -r $R -z $Z $opt/$param) differ"
    fi
    if [ "$D" -gt 0 ] && [ $((D % (B * T * n))) -eq 0 ]; then ok "$tag: -d $D = $((D / (B * T * n))) x B*T*NGPU"
    else bad "$tag: -d $D is not a multiple of B*T*NGPU = $((B * T * n))"; fi

    # (b) the estimator's per-GPU model states for this stage and offload
    gpu=$(awk -v z="$Z" -v o="$opt" -v p="$param" '$1 == z && $2 == o && $3 == p { print $4 }' "$w/est")
    if [ -z "$gpu" ]; then bad "$tag: no estimator row for stage $Z, offload $opt/$param"; return; fi
    if le "$gpu" "$GB80_GIB"; then ok "$tag: model states $gpu GiB per GPU < 80 GB"
    else bad "$tag: model states $gpu GiB per GPU exceed 80 GB"; fi
    act=$(pv act_gib) fit=$(pv fit_gib)
    # the plan's activations are the trainer's own estimate (llmc/activations.h, the GPU
    # trainer's allocation table), printed by --estimate with the same flags
    if [ "$act" = "$(sed -nE 's/^activations: ([0-9.]+) GiB.*/\1/p' "$w/est")" ] && [[ $act =~ ^[0-9.]+$ ]]; then
        ok "$tag: activations $act GiB, as the trainer's --estimate prints them"
    else
        bad "$tag: the plan's activations ($act) are not the trainer's estimate: $(grep '^activations' "$w/est")"
    fi
    total=$(awk -v a="$gpu" -v b="$act" 'BEGIN { printf "%.1f", a + b }')
    if le "$total" "$fit"; then ok "$tag: states $gpu + activations $act = $total GiB <= $fit GiB"
    else bad "$tag: states $gpu + activations $act = $total GiB > $fit GiB"; fi
}

jobs_out=()
for s in "${runs[@]}"; do
    for n in 1 8; do
        f="$tmp/result_$(basename "$s" .sh)_$n"
        (check_run "$s" "$n") > "$f" 2>&1 &
        jobs_out+=("$f")
    done
done
wait
for f in "${jobs_out[@]}"; do
    mapfile -t lines < "$f"
    for l in "${lines[@]}"; do
        case "$l" in
            ok$'\t'*) ok "${l#ok$'\t'}" ;;
            bad$'\t'*) bad "${l#bad$'\t'}" ;;
            *) bad "stray output from a job ($f): $l" ;;
        esac
    done
done

# ---------------------------------------------------------------------------
# the method: --estimate does parse and validate every flag before it exits
dry scripts/run_gpt2_124M.sh
expect_error "--estimate still rejects an unknown flag" "--bogus" "$BIN" "${args[@]}" --bogus 1 --estimate 1:1
expect_error "--estimate still rejects a bad value" "-b" "$BIN" "${args[@]}" -b 4x --estimate 1:1
expect_error "--estimate still validates offload" "offload" "$BIN" "${args[@]}" -z 2 --offload-param cpu --estimate 1:1
expect_error "--estimate still checks -t" "-t" "$BIN" "${args[@]}" -t 4096 --estimate 1:1

# the environment reaches the command
if NGPU=2 MICRO_BATCH=16 RECOMPUTE=2 TRAIN_DATA="/d/tr_*.bin" VAL_DATA=/d/va.bin EXTRA_ARGS="-x 7 --seed 3" \
   MPI_ARGS="--bind-to none" dry scripts/run_gpt2_124M.sh -v 0 \
   && [ "$(flag -i "")" = "/d/tr_*.bin" ] && [ "$(flag -j "")" = /d/va.bin ] && [ "$(flag -o "")" = "$tmp/out" ] \
   && [ "$(flag -b "")" = 16 ] && [ "$(flag -r "")" = 2 ] && [ "$(flag -x "")" = 7 ] && [ "$(flag --seed "")" = 3 ] \
   && [ "$(flag -v "")" = 0 ] && [ "$(flag -z "")" = 1 ] && [ "${args[-1]}" = 0 ] && [ "${cmd[2]}" = 2 ] \
   && printf '%s\n' "${cmd[@]}" | grep -qx -- --bind-to; then
    ok "overrides: NGPU, MICRO_BATCH, RECOMPUTE, TRAIN_DATA, VAL_DATA, OUT_DIR, EXTRA_ARGS, MPI_ARGS, script arguments"
else
    bad "overrides did not reach the command: ${cmd[*]}"
fi
if OFFLOAD_OPTIMIZER=nvme OFFLOAD_PARAM=nvme NVME_PATH="$tmp/nvme" dry scripts/run_gpt3_13B.sh \
   && [ "$(flag --nvme-path "")" = "$tmp/nvme" ] && $BIN "${args[@]}" --estimate 1:1 > "$tmp/est" 2>&1 \
   && gpu=$(awk '$1 == 3 && $2 == "nvme" && $3 == "nvme" { print $4 }' "$tmp/est") && le "$gpu" "$GB80_GIB"; then
    ok "NVMe offload: --nvme-path passed, the trainer accepts it, $gpu GiB per GPU"
else
    bad "NVMe offload override: ${args[*]}"
fi
expect_error "NVMe offload without NVME_PATH" "NVME_PATH" env DRY_RUN=1 OFFLOAD_OPTIMIZER=nvme bash scripts/run_gpt3_13B.sh
expect_error "batch that does not divide" "MICRO_BATCH" env DRY_RUN=1 MICRO_BATCH=48 bash scripts/run_gpt2_124M.sh
expect_error "NGPU not a number" "NGPU" env DRY_RUN=1 NGPU=two bash scripts/run_gpt2_124M.sh

# ---------------------------------------------------------------------------
# without a GPU, the GPU scripts stop at once with a message (and build nothing)
if [ "$have_gpu" = 0 ]; then
    expect_error "run script without a GPU" "no NVIDIA GPU" env OUT_DIR="$tmp/o" bash scripts/run_gpt2_124M.sh
    expect_error "bench_gpu.sh without a GPU" "no NVIDIA GPU" env OUT="$tmp/b" bash scripts/bench_gpu.sh
    expect_error "profile.sh without a GPU" "no NVIDIA GPU" env NSYS=/bin/true OUT_DIR="$tmp/p" bash scripts/profile.sh
    expect_error "profile.sh without nsys" "nsys" env NSYS="$tmp/no-nsys" bash scripts/profile.sh
    expect_error "gpu_kernel_times.sh without a GPU" "no NVIDIA GPU" env NCU=/bin/true bash scripts/gpu_kernel_times.sh "$tmp/kt"
    expect_error "gpu_kernel_times.sh without ncu" "ncu (Nsight Compute) not found" env NCU="$tmp/no-ncu" bash scripts/gpu_kernel_times.sh "$tmp/kt"
    expect_error "bench_torch_gpt2.py without CUDA" "no CUDA device" "$PY" dev/bench_torch_gpt2.py --steps 2 --warmup 0
    expect_error "bench_attention.sh without a GPU" "no NVIDIA GPU" bash scripts/bench_attention.sh
    expect_error "bench_torch_sdpa.py without CUDA" "no CUDA device" "$PY" dev/bench_torch_sdpa.py
fi
expect_error "bench_attention.sh with a shape that is not B:NH:T:HS" "is not B:NH:T:HS" bash scripts/bench_attention.sh 64:12:1024

# a finished run is one whose final checkpoint verifies: then the script stops at once;
# an empty (or damaged) final marker is no finished run, and the trainer is started to
# resume (here /bin/false, on nvidia-smi's stand-in: it fails, as the script then says)
TS=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
if $BIN -e d2 -i $TS -j $TS -t 32 -b 2 -v 0 -s 0 -x 1 -n 1 -o "$tmp/fin" > "$tmp/fin.log" 2>&1; then
    fin() { env PATH="$PWD/test/gpu/standin:$PATH" TRAINER=/bin/false MAX_STEPS=1 OUT_DIR="$tmp/fin" TRAIN_DATA=$TS VAL_DATA=$TS \
        bash scripts/run_gpt2_124M.sh; }
    if fin > "$tmp/out" 2>&1 && grep -q "DONE_00000001 verifies: this run is complete" "$tmp/out"; then
        ok "run script: a final checkpoint that verifies is a finished run"
    else
        bad "run script on a finished run: $(tail -1 "$tmp/out")"
    fi
    : > "$tmp/fin/DONE_00000001"
    expect_error "run script: an empty final marker is no finished run" "DONE_00000001 is there but does not verify" fin
else
    bad "a checkpoint for the run script's finished run: $(tail -1 "$tmp/fin.log")"
fi

# the PyTorch baseline: runs on the CPU (eager, fp32) and learns nothing from random tokens:
# the loss stays near ln(50257) = 10.82
if "$PY" dev/bench_torch_gpt2.py --device cpu -L 2 -H 2 -C 64 -b 2 -t 32 --steps 3 --warmup 1 \
        --report "$tmp/torch.json" > "$tmp/torch.log" 2>&1 \
   && "$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
s = r['steps']
assert len(s) == 3 and all(10.0 < x['loss'] < 11.7 and x['ms'] > 0 and x['tokens_per_s'] > 0 for x in s), s
assert r['summary']['num_parameters'] == 50304 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64
" "$tmp/torch.json" 2> "$tmp/err"; then
    ok "bench_torch_gpt2.py: 3 steps on the CPU, loss near ln(V), the trainer's parameter count"
else
    bad "bench_torch_gpt2.py on the CPU: $(tail -1 "$tmp/torch.log") $(tail -1 "$tmp/err")"
fi
# the same FLOPs per token as the trainers (their report's config.flops_per_token, from
# llmc/gpt2.h's gpt2_flops_per_token: 6 (12 L C^2 + Vp C) + 12 L T C), asked of the binary
# on a small model
if $BIN -e d2 -b 1 -t 64 -x 0 -v 0 -s 0 --report "$tmp/flops.json" > "$tmp/flops.log" 2>&1; then
    trainer_flops=$("$PY" -c "import json,sys; print('%.0f' % json.load(open(sys.argv[1]))['config']['flops_per_token'])" "$tmp/flops.json")
    torch_flops=$("$PY" dev/bench_torch_gpt2.py --print-flops -L 2 -H 2 -C 128 -t 64)
    hand=$(awk 'BEGIN { L = 2; C = 128; T = 64; printf "%.0f", 6 * (12 * L * C * C + 50304 * C) + 12 * L * T * C }')
    if [ "$torch_flops" = "flops_per_token=$trainer_flops" ] && [ "$trainer_flops" = "$hand" ]; then
        ok "bench_torch_gpt2.py counts FLOPs per token like the trainers ($trainer_flops for d2 at T=64)"
    else
        bad "FLOPs per token: trainer $trainer_flops, bench_torch_gpt2.py $torch_flops, by hand $hand"
    fi
else
    bad "a 0-step run for the FLOP count failed: $(tail -1 "$tmp/flops.log")"
fi

# ---------------------------------------------------------------------------
# bench_infinity.sh on a small model (its 2.7B run is a benchmark, docs/RESULTS.md): it runs,
# prints each rank's kernel peak, the NVMe bytes, the step's split, --estimate's ratio and
# the goal's ratio against fio's rates (a small fio file here), and leaves no swap file nor
# fio's; a directory too small for the swap files is refused first
mkdir -p "$tmp/inf"
if BENCH_MODEL=d2 BENCH_FIO_MIB=64 BENCH_ARGS="--sub-group-size 1e5 --max-in-cpu 0" bash scripts/bench_infinity.sh "$tmp/inf" > "$tmp/inf.log" 2>&1 \
    && grep -qE '^ +1 +[0-9.]+ GB +[0-9.]+ GB' "$tmp/inf.log" && grep -q '^NVMe per step' "$tmp/inf.log" \
    && grep -qE '^infinity: peak_rss_ratio=[0-9.]+ estimate_ratio=[0-9.]+ step_s=[0-9.]+ nvme_s=[0-9.]+ busy_s=-?[0-9.]+ goal_ratio=[0-9.]+ later_ratio=[0-9.]+$' "$tmp/inf.log" && [ -z "$(ls -A "$tmp/inf")" ]; then
    ok "bench_infinity.sh on d2: per-rank peaks, NVMe bytes, the estimate's and the goal's ratios; swap and fio files removed"
else
    bad "bench_infinity.sh on d2: $(tail -3 "$tmp/inf.log" | tr '\n' ' ')"
fi
expect_error "bench_infinity.sh: swap files larger than the free space" "the swap files of gpt3:c12288 at 2 ranks need" \
    env BENCH_MODEL=gpt3:c12288 bash scripts/bench_infinity.sh "$tmp/inf"

# ---------------------------------------------------------------------------
# bench_comm.sh on d2 for 1 and 2 steps (its d12 run is a benchmark, docs/USAGE.md): on the
# two namespace hosts, every configuration measured on the veths, next to the report's own
# inter-node bytes per step (within 10%: the rest is Open MPI's headers and control
# traffic) and the ratio to ZeRO-3; skipped by name where the namespaces cannot be made
BENCH_MODEL=d2 BENCH_T=32 BENCH_STEPS="1 2" bash scripts/bench_comm.sh > "$tmp/comm.log" 2> "$tmp/comm.err"; rc=$?
if [ $rc -eq 2 ] && grep -q "cannot make the two hosts" "$tmp/comm.err"; then
    echo "SKIP bench_comm.sh on d2 ($(sed -n 's/^error: //p' "$tmp/comm.err" | head -1))"
elif [ $rc -eq 0 ] && "$PY" - "$tmp/comm.log" > "$tmp/comm.check" 2>&1 <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
line = re.search(r"^bench_comm: (.*)$", text, re.M).group(1)
f = dict(kv.split("=") for kv in line.split())
labels = {"zero3": "ZeRO-3", "mics": "MiCS, shard groups of 2", "hpz": "hpZ, secondary groups of 2",
          "zpp": "qwZ + hpZ + qgZ (ZeRO++)"}
for c, label in labels.items():
    veth, rep = float(f[f"{c}_bytes_per_step"]), float(f[f"{c}_report"])
    assert veth > 0 and abs(veth - rep) <= 0.10 * rep, (c, veth, rep)
    assert re.search(r"^%s +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$" % re.escape(label), text, re.M), c
assert float(f["zero3_vs_zero3"]) == 1.0
print(line)
EOF
then
    ok "bench_comm.sh on d2: 4 configurations, veth bytes per step within 10% of the report's ($(cut -c1-70 "$tmp/comm.check")...)"
else
    bad "bench_comm.sh on d2 (exit $rc): $(grep -E 'failed|n/a' "$tmp/comm.log" | head -3 | tr '\n' ' ')$(tail -1 "$tmp/comm.check" 2>/dev/null)"
fi

# ---------------------------------------------------------------------------
# every benchmark builds and runs at a tiny size (their real sizes are benchmarks,
# docs/RESULTS.md), so that one that no longer compiles or runs fails here: the dev/
# programs through their Makefile targets (what the scripts build them with), each
# script's summary line for scripts. bench_zero_cpu.sh and bench_offload.sh (2 ranks,
# mpirun's start-up most of their time) run side by side.
for d in dev/*.c; do
    if grep -qE "^[^#]*: *$d( |$)" Makefile; then ok "$d is built by a Makefile target"
    else bad "$d is built by no Makefile target: make test would not notice it broken"; fi
done
# the dev/ programs make test never builds otherwise; the CUDA one needs nvcc
if make -s build/bench_sgemm build/bench_cpu_adam build/bench_nvme > "$tmp/bmake" 2>&1; then
    ok "dev/bench_sgemm.c, bench_cpu_adam.c, bench_nvme.c build"
else
    bad "a benchmark program does not build: $(grep -m1 -E 'error|Error' "$tmp/bmake")"
fi
if command -v "${NVCC:-nvcc}" > /dev/null; then
    if make -s build/gpu_probe > "$tmp/gmake" 2>&1; then ok "dev/gpu_probe.cu builds"; else bad "dev/gpu_probe.cu: $(grep -m1 error "$tmp/gmake")"; fi
else
    skip "dev/gpu_probe.cu: nvcc not found (a CUDA program)"
fi
# bench_script NAME REGEX COMMAND...: the command exits 0 and prints a line matching REGEX
bench_script() {
    local name=$1 re=$2; shift 2
    "$@" > "$tmp/$name.out" 2>&1; local rc=$?
    if [ $rc -eq 0 ] && grep -qE "$re" "$tmp/$name.out"; then ok "$name on a tiny size: $(grep -m1 -oE "$re" "$tmp/$name.out" | cut -c1-60)..."
    else bad "$name on a tiny size (exit $rc): $(tail -2 "$tmp/$name.out" | tr '\n' ' ')"; fi
}
G='[0-9.]+'
mkdir -p "$tmp/bench_nv"
BENCH_MODEL=d2 bash scripts/bench_zero_cpu.sh 2 1 16 > "$tmp/zero_cpu.bg" 2>&1 & zpid=$!
BENCH_MODEL=d2 bash scripts/bench_offload.sh "$tmp/bench_nv" 2 1 16 > "$tmp/offload.bg" 2>&1 & opid=$!
mkdir -p "$tmp/nvme_bench"
bench_script bench_nvme.sh "^nvme: read_gbps=$G write_gbps=$G fio_read_gbps=$G fio_write_gbps=$G read_ratio=$G write_ratio=$G runs=1" \
    env SIZE_MIB=8 BS_MIB=1 QD=2 RUNS=1 bash scripts/bench_nvme.sh "$tmp/nvme_bench"
if [ -z "$(ls -A "$tmp/nvme_bench")" ]; then ok "bench_nvme.sh leaves no file behind"; else bad "bench_nvme.sh left $(ls "$tmp/nvme_bench")"; fi
bench_script bench_cpu_adam.sh "^cpu_adam: mparam_per_s=$G gbps=$G triad_gbps=$G pct_of_triad=$G torch_mparam_per_s=$G x_torch=$G" \
    bash scripts/bench_cpu_adam.sh 100000 2 1
bench_script bench_cpu_trainer.sh "^d2: tokens_per_s=$G step_ms=$G achieved_gflops=$G sgemm_gflops=$G ratio=$G" \
    env BENCH_DEPTHS=2 BENCH_B=1 BENCH_T=16 bash scripts/bench_cpu_trainer.sh 2
if "$PY" dev/report_figures.py "$tmp/torch.json" 1 > "$tmp/figs" 2>&1 \
   && "$PY" -c "import json,sys; f=json.load(open(sys.argv[1])); sys.exit(0 if f['steps'] == 2 and f['tokens_per_s'] > 0 else 1)" "$tmp/figs"; then
    ok "dev/report_figures.py on bench_torch_gpt2.py's report: 2 steps after 1 of warm-up"
else
    bad "report_figures.py: $(tail -1 "$tmp/figs")"
fi
# dev/kernel_times.py on Nsight Compute's raw CSV (every 8th kernel of an H200 run): its
# kernels' time a step and the idle share against the same sums taken here by awk
kt_ms=$(awk -F'","' 'NR > 2 {gsub(/"/, "", $NF); t += $NF} END {printf "%.2f", t / 2}' test/e2e/data/ncu_raw_h200.csv)
if "$PY" dev/kernel_times.py test/e2e/data/ncu_raw_h200.csv 2 40 5 > "$tmp/kt.txt" 2>&1 \
   && grep -q "^83 kernels over 2 steps: $kt_ms ms of kernels a step" "$tmp/kt.txt" \
   && grep -q "^step 40.00 ms unprofiled: kernels $kt_ms ms .* no kernel running $(awk -v k="$kt_ms" 'BEGIN {printf "%.2f", 40 - k}') ms" "$tmp/kt.txt" \
   && [ "$(grep -c '^class ' "$tmp/kt.txt")" = 2 ]; then
    ok "dev/kernel_times.py: $kt_ms ms of kernels a step, the idle rest, two classes"
else
    bad "dev/kernel_times.py: $(head -1 "$tmp/kt.txt") (awk: $kt_ms)"
fi
printf '"ID","Kernel Name"\n"0","k"\n' > "$tmp/nodur.csv"
expect_error "kernel_times.py on a CSV without durations" "gpu__time_duration.sum" "$PY" dev/kernel_times.py "$tmp/nodur.csv" 1
wait $zpid; rc=$?
bench_script bench_zero_cpu.sh "^zero_cpu: stage3_vs_stage0=$G stage3_noprefetch_vs_stage0=$G stage3_noreuse_vs_stage0=$G" \
    bash -c "cat '$tmp/zero_cpu.bg'; exit $rc"
wait $opid; rc=$?
bench_script bench_offload.sh "^offload: cpu_vs_none=$G cpu_hidden=[-0-9.na]+ nvme_vs_none=$G" bash -c "cat '$tmp/offload.bg'; exit $rc"
if [ -z "$(ls -A "$tmp/bench_nv")" ]; then ok "bench_offload.sh leaves no swap file behind"; else bad "bench_offload.sh left $(ls "$tmp/bench_nv")"; fi
# every script is run above or skipped here by name: a new one cannot go untried
for sc in scripts/*.sh; do
    b=$(basename "$sc")
    case $b in
        run_common.sh|run_gpt2_*|run_gpt3_*) continue ;;             # the run scripts' dry runs above
        install_deps.sh) continue ;;                                 # make test runs it (make deps)
        gpu_first_contact.sh|gpu_speed.sh|gpu_steps.sh) continue ;;  # rehearsed by test/gpu/test_gpu_bundle.sh
        bench_gpu.sh|profile.sh|gpu_kernel_times.sh|bench_attention.sh) [ "$have_gpu" = 0 ] && continue ;;  # need a GPU: their refusal is checked above
    esac
    grep -qF "scripts/$b" "$0" && continue
    bad "scripts/$b is neither run by $0 nor skipped by name"
done

# ---------------------------------------------------------------------------
# gpu_bundle.sh: refuses what it cannot do, with a message (its pack and set-up are
# rehearsed in test/gpu/test_gpu_bundle.sh)
bash scripts/gpu_bundle.sh > "$tmp/gb" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q usage "$tmp/gb"; then ok "gpu_bundle.sh without a mode: usage, exit 2"; else bad "gpu_bundle.sh without a mode: exit $rc"; fi
bash scripts/gpu_bundle.sh run "$tmp/none" > "$tmp/gb" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "bundle.tar.gz not found" "$tmp/gb"; then ok "gpu_bundle.sh run without a bundle: says so, exit 1"
else bad "gpu_bundle.sh run without a bundle: exit $rc: $(head -1 "$tmp/gb")"; fi

finish
