#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps' functions are called by name: "step_$STEP"
# The first run of the GPU trainer on a GPU, made to fit one command of at most 8 minutes
# on a lent machine (one H100, nothing installable, see scripts/gpu_bundle.sh):
#
#   scripts/gpu_first_contact.sh DIR        (with the bundle carried as .gpu, or BUNDLE=...)
#
# It sets up the bundle (when BUNDLE/bundle.tar.gz is there; else it runs what is built
# here), then runs these steps in order of value, each under its own time limit, never
# stopping at a failure, the later ones only with the time left (FC_BUDGET seconds in all,
# default 450, counted from the start, the set-up included):
#   a  the machine: GPU, driver, CUDA, the cuBLAS(Lt) and NCCL found and from where, any
#      library or Python module missing, the tools (compute-sanitizer, nsys, a C compiler)
#   b  the kernels' tests, fp32 and bf16 (build/test_kernels{,2}_gpu{,_fp32})
#   c  the fp32 GPU trainer against the CPU trainer and PyTorch, bf16 against fp32, the
#      device backend's stages 1-3 against stage 0 on one rank, ZeRO-Infinity's tiers on the
#      device backend against the optimizer's offload alone (test/gpu/test_gpu_trainer.sh,
#      SECTIONS="reference stages infinity")
#   d  2 ranks sharing the GPU through the host backend at stage 3 against 1 rank
#      (the same script, SECTIONS=host HOST_CASES=2:3; mpirun as root)
#   e  compute-sanitizer memcheck and racecheck on 2 steps of d2 at stage 3, device backend
#      (every unit gathered), without and with CPU optimizer offload, with the parameters
#      offloaded to the CPU, and (memcheck) both on NVMe
#   f  d12 at T=1024, the largest B that fits (the trainer's --estimate against the GPU's
#      memory): tokens/s and MFU at -z 0 and -z 3, and PyTorch's GPT-2 of the same shape
#      (dev/bench_torch_gpt2.py; torch.compile where a C compiler is there for Triton)
#   g  d48: no offload, the parameters and optimizer offloaded to the CPU (-z 3), CPU
#      optimizer offload (-z 2), with --dpu 1, and both on NVMe (-z 3, under DIR)
# Results: DIR/summary.json (rewritten after every step, so a run cut short still leaves
# one), DIR/log (every step's output), DIR/logs.tar.gz (each step's and run's log and
# report). The console gets a line per step and the summary's table at the end. Exit 0
# whatever the steps found (the summary says it); 2 on a usage error.
#
# Knobs (make test's rehearsal, test/gpu/test_gpu_bundle.sh, scales everything down with
# them): FC_BUDGET, FC_STEPS ("a b c d e f g"), FC_MAX_<step> and FC_MIN_<step> (a step's
# time limit, and the time it must have left to start), FC_C_SECTIONS, FC_KERNEL_TESTS,
# FC_KERNEL_TIMEOUT,
# FC_SANITIZER (the compute-sanitizer binary), FC_TRAINER (what the runs of (f) and (g) start,
# default ./train_gpt2_zero3: the rehearsal's stand-in lingers after its report), FC_E_RUNS ("memcheck:none memcheck:cpu
# racecheck:none racecheck:cpu memcheck:param racecheck:param memcheck:nvme": tool and offload), FC_E_RUN_MAX (60 s a run),
# FC_F_MODEL FC_F_T
# FC_F_BATCHES FC_F_STEPS FC_F_WARMUP FC_F_RECOMPUTE, FC_G_MODEL FC_G_T FC_G_BATCHES
# FC_G_STEPS FC_G_WARMUP FC_G_CONFIGS ("none par cpu dpu nvme"), FC_TORCH_DEVICE (cuda), FC_GPU_MIB (when neither the probe nor
# nvidia-smi says), FC_TEST_HANG (a step that hangs, to rehearse the time limits), PY.
set -u
cd "$(dirname "$0")/.." || exit 2

# ---------------------------------------------------------------------------
# one step's body (run as `gpu_first_contact.sh --step ID DIR` under the step's time limit);
# it says what it found with kv and check, and exits 1 when a check failed

# jq_get JSON KEY: one value of a flat JSON object (no jq on the GPU machine)
jq_get() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
kv() { printf '%s=%s\n' "$1" "$2" >> "$WORK/steps/$STEP.kv"; }
check() { printf '%s %s\n' "$1" "$2" | tee -a "$WORK/steps/$STEP.checks"; }  # check PASS|FAIL|SKIP TEXT
left() { echo $(( STEP_DEADLINE - $(date +%s) )); }
# time_for MARGIN: the seconds a run may take, leaving MARGIN of the step's time (at least 1)
time_for() { local t=$(( $(left) - $1 )); echo $(( t > 0 ? t : 1 )); }
# figures NAME REPORT WARMUP: tokens/s, MFU, ms per step of a run, as kv NAME.*
figures() {
    local f
    f=$("$PY" dev/report_figures.py "$2" "$3" 2>&1) || { check FAIL "$1: no figures ($f)"; return 1; }
    "$PY" -c 'import json,sys; [print(k, v) for k, v in json.loads(sys.argv[1]).items()]' "$f" |
        while read -r k v; do kv "$1.$k" "$v"; done
}
# shape DESCRIPTOR: "layers heads channels" of a GPT-2 depth descriptor (llmc/gpt2.h's rule:
# llm.c's published sizes, else N heads of 64 channels)
shape() {
    case "$1" in
        d12) echo "12 12 768" ;; d24) echo "24 16 1024" ;; d36) echo "36 20 1280" ;; d48) echo "48 25 1600" ;;
        d*) local n=${1#d}; echo "$n $n $((64 * n))" ;;
    esac
}
gpu_mib() {  # the GPU's memory in MiB: the probe's, nvidia-smi's, or FC_GPU_MIB
    local m
    m=$(sed -n 's/^probe\.gpu0\.mem_total_mib=//p' "$WORK/steps/a.kv" 2>/dev/null | head -1)
    [ -n "$m" ] || m=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
    echo "${m:-${FC_GPU_MIB:-0}}"
}
# batch_that_fits MODEL T "B..." RECOMPUTE: the largest B whose model states (the larger of
# stage 0's and 3's) plus activations, per the trainer's --estimate, take at most 85% of the
# GPU's memory (the rest: CUDA's context, cuBLASLt's workspace, NCCL, the allocator)
batch_that_fits() {
    local model=$1 t=$2 bs=$3 r=$4 mib b est
    mib=$(gpu_mib)
    [ "$mib" -gt 0 ] || { echo "the GPU's memory is not known (no GPU found?)" >&2; return 1; }
    for b in $bs; do
        est=$(./train_gpt2_zero3 -e "$model" -b "$b" -t "$t" -r "$r" --estimate 1:1 2>&1)
        if awk -v mib="$mib" '
            $1 == "0" && $2 == "none" && $3 == "none" { s0 = $4 }
            $1 == "3" && $2 == "none" && $3 == "none" { s3 = $4 }
            /^activations:/ { a = $2 }
            END { need = (s0 > s3 ? s0 : s3) + a; exit !(a > 0 && need * 1024 <= 0.85 * mib) }' <<< "$est"; then
            echo "$b"; return 0
        fi
    done
    return 1
}
# ours NAME TIMEOUT FLAGS...: ./train_gpt2_zero3 FLAGS, report in $WORK/reports/NAME.json
# ours NAME SECONDS FLAGS...: a run of ./train_gpt2_zero3 under its time limit. A run stopped
# by the limit after it wrote the report of all its -x steps (a d48 run spends a minute
# starting and some seconds ending) counts, with a line saying so; `why NAME` says why one failed.
ours() {
    local name=$1 t=$2 rc; shift 2
    echo "--- $name: ./train_gpt2_zero3 $*"
    timeout -k 5 "$t" "${FC_TRAINER:-./train_gpt2_zero3}" "$@" --report "$WORK/reports/$name.json" > "$WORK/logs/$name.log" 2>&1
    rc=$?
    tail -4 "$WORK/logs/$name.log"
    local done_steps want
    done_steps=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$WORK/reports/$name.json" 2>/dev/null || echo 0)
    want=$(printf '%s\n' "$@" | grep -A1 -x -- -x | tail -1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        if [ -n "$want" ] && [ "$done_steps" = "$want" ]; then
            echo "--- $name: stopped by its ${t} s limit after its last step and its report: counted"
            return 0
        fi
        echo "timed out after ${t} s, ${done_steps} of ${want:-?} steps done" > "$WORK/logs/$name.why"
    elif [ "$rc" -ne 0 ]; then
        echo "exit $rc: $(grep -m1 -i -E 'error|out of memory' "$WORK/logs/$name.log")" > "$WORK/logs/$name.why"
    fi
    [ "$rc" -eq 0 ] || echo "--- $name: $(cat "$WORK/logs/$name.why")"
    return "$rc"
}
why() { cat "$WORK/logs/$1.why" 2>/dev/null; }

step_a() {  # the machine
    kv host.cpus "$(nproc)"
    kv host.mem_gib "$(awk '/MemTotal/ {printf "%.0f", $2 / 2^20}' /proc/meminfo)"
    kv host.cpu "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
    kv host.kernel "$(uname -r)"
    if command -v nvidia-smi > /dev/null; then
        kv smi "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
    else
        kv smi "nvidia-smi not found"
    fi
    ./build/gpu_probe > "$WORK/probe.txt" 2>&1
    local rc=$? l m
    cat "$WORK/probe.txt"
    grep '=' "$WORK/probe.txt" | while IFS= read -r l; do kv "probe.${l%%=*}" "${l#*=}"; done
    if [ "$rc" -eq 0 ]; then check PASS "a GPU: $(sed -n 's/^gpu0.name=//p' "$WORK/probe.txt")"
    else check FAIL "build/gpu_probe (exit $rc): $(tail -1 "$WORK/probe.txt")"; fi
    if [ -n "${FC_SETUP:-}" ] && [ -f "$FC_SETUP" ]; then
        cat "$FC_SETUP"
        grep '^gpu_bundle: missing:' "$FC_SETUP" | while IFS= read -r l; do check FAIL "${l#gpu_bundle: }"; done
        grep -q '^gpu_bundle: missing:' "$FC_SETUP" || check PASS "every library the carried programs load was found"
    fi
    ldd ./train_gpt2_zero3 ./train_gpt2_zero3_cpu build/gpu_probe 2>&1 | awk '/not found/ {print $1}' | sort -u |
        while read -r l; do check FAIL "library not found: $l"; done
    for m in numpy torch; do
        if "$PY" -c "import $m" > /dev/null 2>&1; then kv "python.$m" "$("$PY" -c "import $m; print($m.__version__)" 2>&1)"
        else check FAIL "python module missing: $m ($PY: $("$PY" -c "import $m" 2>&1 | tail -1))"; fi
    done
    kv python.torch_cuda "$("$PY" -c 'import torch; print(torch.cuda.is_available(), torch.version.cuda)' 2>&1 | tail -1)"
    for m in compute-sanitizer nsys cc; do kv "tool.$m" "$(command -v "$m" || echo 'not found')"; done
    kv tool.compute-sanitizer-used "${SANITIZER:-not found}"
    kv bundle.info "$(head -2 "$BUNDLE/x/info.txt" 2>/dev/null | tr '\n' ' ')"
}

step_b() {  # the kernels' tests
    local t out rc
    for t in ${FC_KERNEL_TESTS:-build/test_kernels_gpu_fp32 build/test_kernels_gpu build/test_kernels2_gpu_fp32 build/test_kernels2_gpu}; do
        out=$WORK/logs/b_${t##*/}.log
        echo "--- $t"
        timeout -k 5 "${FC_KERNEL_TIMEOUT:-90}" "./$t" > "$out" 2>&1; rc=$?
        grep -E '^(FAIL|[0-9]+ passed)' "$out" | head -20
        kv "${t##*/}" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)"
        if [ "$rc" -eq 0 ]; then check PASS "$t: $(tail -1 "$out")"
        elif [ "$rc" -eq 124 ]; then check FAIL "$t: timed out after ${FC_KERNEL_TIMEOUT:-90} s"
        else check FAIL "$t (exit $rc): $(grep -m3 '^FAIL' "$out" | tr '\n' ' ')$(tail -1 "$out")"; fi
    done
}

# trainer_suite SECTIONS [ENV...]: test/gpu/test_gpu_trainer.sh's sections, its PASS, FAIL
# and SKIP lines taken as this step's checks
trainer_suite() {
    local sections=$1 l; shift
    env SECTIONS="$sections" "$@" bash test/gpu/test_gpu_trainer.sh > "$WORK/logs/${STEP}_trainer.log" 2>&1
    grep -E '^(PASS|FAIL|SKIP) ' "$WORK/logs/${STEP}_trainer.log" | while IFS= read -r l; do check "${l%% *}" "${l#* }"; done
    grep -qE '^[0-9]+ passed' "$WORK/logs/${STEP}_trainer.log" \
        || { check FAIL "test/gpu/test_gpu_trainer.sh ended early: $(tail -2 "$WORK/logs/${STEP}_trainer.log" | tr '\n' ' ')"; }
    kv result "$(grep -E '^[0-9]+ passed' "$WORK/logs/${STEP}_trainer.log" | tail -1)"
}
step_c() { trainer_suite "${FC_C_SECTIONS:-reference stages infinity}"; }

# the offload flags of a run of (e) or (g), by name: the optimizer on the CPU, the parameters
# too, both on NVMe (a swap file under DIR: d48's is about 28 GB)
offload_args() {
    case $1 in
        cpu) echo "--offload-optimizer cpu" ;;
        param) echo "--offload-optimizer cpu --offload-param cpu" ;;
        nvme) mkdir -p "$WORK/swap"; echo "--offload-optimizer nvme --offload-param nvme --max-in-cpu 0 --nvme-path $WORK/swap" ;;
    esac
}
step_d() { trainer_suite host HOST_CASES=2:3; }

step_e() {  # compute-sanitizer
    [ -n "${SANITIZER:-}" ] || { check SKIP "compute-sanitizer not found (PATH, /usr/local/cuda*/bin, FC_SANITIZER)"; return; }
    local run tool off rc out errs extra t tri ours lib
    local args=(-e d2 -b 2 -t 64 -x 2 -v 0 -s 0 -n 0 -z 3 --zero-backend device --param-persistence-threshold 0)
    for run in ${FC_E_RUNS:-memcheck:none memcheck:cpu racecheck:none racecheck:cpu memcheck:param racecheck:param memcheck:nvme}; do
        tool=${run%%:*} off=${run#*:}
        [ "$(left)" -gt 20 ] || { check SKIP "$tool, offload $off: no time left"; continue; }
        out=$WORK/logs/e_${tool}_$off.log
        echo "--- $tool, offload $off"
        read -r -a extra <<< "$(offload_args "$off")"
        t=$(time_for 5); [ "$t" -le "${FC_E_RUN_MAX:-60}" ] || t=${FC_E_RUN_MAX:-60}
        timeout -k 5 "$t" "$SANITIZER" --tool "$tool" --error-exitcode 97 --print-limit 20 \
            ./train_gpt2_zero3 "${args[@]}" "${extra[@]}" > "$out" 2>&1; rc=$?
        errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$out" | tail -1 | awk '{print $3}')
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^step' "$out" | tail -4
        # the libraries' own reports (NCCL's API probes, races racecheck sees in cuBLAS's
        # Hopper kernels) set apart from ours: dev/sanitizer_triage.py says why
        tri=$("$PY" dev/sanitizer_triage.py "$out") || tri='{"ours": -1, "library": 0, "first_ours": "triage failed"}'
        ours=$(jq_get "$tri" ours) lib=$(jq_get "$tri" library)
        kv "$tool.$off" "exit $rc, errors ${errs:-?}, ours $ours, the libraries' $lib"
        [ "$lib" = 0 ] || kv "$tool.$off.library_first" "$(jq_get "$tri" first_library)"
        if [ "$rc" -eq 124 ]; then check FAIL "$tool, offload $off: timed out after $t s"
        elif [ "$ours" = 0 ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 97 ]; } && grep -q '^step' "$out"; then
            check PASS "$tool, offload $off: no errors of ours$([ "$lib" = 0 ] || echo " ($lib of the libraries' own set apart)")"
        elif [ "$ours" = 0 ]; then check FAIL "$tool, offload $off: exit $rc: $(grep -v '^=' "$out" | tail -1)"
        else check FAIL "$tool, offload $off (exit $rc, $ours errors of ours): $(jq_get "$tri" first_ours)"; fi
    done
}

step_f() {  # throughput at d12, and PyTorch
    local model=${FC_F_MODEL:-d12} t=${FC_F_T:-1024} n=${FC_F_STEPS:-20} w=${FC_F_WARMUP:-5} r=${FC_F_RECOMPUTE:-1}
    local b z compile=1 shp
    b=$(batch_that_fits "$model" "$t" "${FC_F_BATCHES:-128 96 64 48 32 16 8}" "$r" 2> "$WORK/fit.err") \
        || { check FAIL "no batch size of ${FC_F_BATCHES:-128 96 64 48 32 16 8} fits $(gpu_mib) MiB $(cat "$WORK/fit.err")"; return; }
    kv B "$b"; kv T "$t"; kv model "$model"; kv recompute "$r"
    for z in 0 3; do
        if ours "f_z$z" "$(time_for 10)" -e "$model" -b "$b" -t "$t" -r "$r" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 -z "$z"; then
            figures "z$z" "$WORK/reports/f_z$z.json" "$w" && check PASS "-z $z at B=$b: $(sed -n "s/^z$z.tokens_per_s=//p" "$WORK/steps/f.kv") tokens/s"
        else
            check FAIL "-z $z at B=$b: $(why "f_z$z")"
        fi
    done
    # PyTorch: compiled when there is a C compiler for Triton's launchers and the time for it
    { command -v cc || command -v gcc; } > /dev/null || compile=0
    [ "$(left)" -gt 150 ] || compile=0
    kv torch.compile "$compile"
    local eager=(); [ "$compile" = 1 ] || eager=(--no-compile)
    read -r -a shp <<< "$(shape "$model")"
    echo "--- PyTorch: dev/bench_torch_gpt2.py -L ${shp[0]} -H ${shp[1]} -C ${shp[2]} -b $b -t $t"
    if timeout -k 5 "$(time_for 5)" "$PY" dev/bench_torch_gpt2.py -L "${shp[0]}" -H "${shp[1]}" -C "${shp[2]}" -b "$b" -t "$t" \
        --steps "$n" --warmup 0 --device "${FC_TORCH_DEVICE:-cuda}" "${eager[@]}" \
        --report "$WORK/reports/f_torch.json" > "$WORK/logs/f_torch.log" 2>&1; then
        tail -2 "$WORK/logs/f_torch.log"
        figures torch "$WORK/reports/f_torch.json" "$w" && check PASS "PyTorch at B=$b: $(sed -n 's/^torch.tokens_per_s=//p' "$WORK/steps/f.kv") tokens/s"
    else
        check FAIL "PyTorch: $(tail -1 "$WORK/logs/f_torch.log")"
    fi
}

step_g() {  # d48, with and without the offloads
    local model=${FC_G_MODEL:-d48} t=${FC_G_T:-1024} n=${FC_G_STEPS:-6} w=${FC_G_WARMUP:-2} b cfg name
    b=$(batch_that_fits "$model" "$t" "${FC_G_BATCHES:-16 8 4}" 1 2> "$WORK/fit.err") \
        || { check FAIL "no batch size of ${FC_G_BATCHES:-16 8 4} fits $(gpu_mib) MiB $(cat "$WORK/fit.err")"; return; }
    kv B "$b"; kv T "$t"; kv model "$model"
    for cfg in "none:-z 0" "par:-z 3 $(offload_args param)" "cpu:-z 2 $(offload_args cpu)" "dpu:-z 2 $(offload_args cpu) --dpu 1" \
               "nvme:-z 3 $(offload_args nvme)"; do
        name=${cfg%%:*}
        [[ " ${FC_G_CONFIGS:-none par cpu dpu nvme} " == *" $name "* ]] || continue
        [ "$(left)" -gt 40 ] || { check SKIP "$name: no time left"; continue; }
        # shellcheck disable=SC2086
        if ours "g_$name" "$(time_for 5)" -e "$model" -b "$b" -t "$t" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 ${cfg#*:}; then
            figures "$name" "$WORK/reports/g_$name.json" "$w" && check PASS "$name (${cfg#*:}) at B=$b: $(sed -n "s/^$name.tokens_per_s=//p" "$WORK/steps/g.kv") tokens/s"
        else
            check FAIL "$name (${cfg#*:}): $(why "g_$name")"
        fi
    done
}

if [ "${1:-}" = --step ]; then
    STEP=$2
    : > "$WORK/steps/$STEP.kv"; : > "$WORK/steps/$STEP.checks"
    if [ "${FC_TEST_HANG:-}" = "$STEP" ]; then echo "FC_TEST_HANG: step $STEP hangs"; sleep 100000; fi
    "step_$STEP"
    ! grep -q '^FAIL' "$WORK/steps/$STEP.checks"
    exit $?
fi

# ---------------------------------------------------------------------------
# the driver

if [ $# -ne 1 ] || [ -z "$1" ]; then echo "usage: scripts/gpu_first_contact.sh DIR" >&2; exit 2; fi
DIR=$1
mkdir -p "$DIR" || { echo "gpu_first_contact: cannot make $DIR" >&2; exit 2; }
DIR=$(cd "$DIR" && pwd)
BUNDLE=${BUNDLE:-.gpu}
[ ! -d "$BUNDLE" ] || BUNDLE=$(cd "$BUNDLE" && pwd)
export BUNDLE
if [ -z "${FC_INNER:-}" ]; then
    export FC_START=${FC_START:-$(date +%s)}
    rm -f "$DIR/summary.json"
    if [ -f "$BUNDLE/bundle.tar.gz" ]; then
        echo "gpu_first_contact: setting up $BUNDLE"
        FC_INNER=1 FC_SETUP="$BUNDLE/x/setup.txt" scripts/gpu_bundle.sh exec "$BUNDLE" bash "$0" "$DIR"
        [ -f "$DIR/summary.json" ] && exit 0
        echo "gpu_first_contact: the bundle's set-up failed (above); going on with what is here"
        FC_SETUP_FAILED=1 FC_INNER=1 exec bash "$0" "$DIR"
    fi
    echo "gpu_first_contact: no $BUNDLE/bundle.tar.gz: running what is built here"
    FC_INNER=1 exec bash "$0" "$DIR"
fi

export PY=${PY:-python3} START=${FC_START:-$(date +%s)} BUDGET=${FC_BUDGET:-450}
RESERVE=15
WORK=$(mktemp -d) || exit 1
export WORK
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/steps" "$WORK/logs" "$WORK/reports"
SANITIZER=${FC_SANITIZER:-$(command -v compute-sanitizer)}
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    [ -n "$SANITIZER" ] || { [ -x "$c" ] && SANITIZER=$c; }
done
export SANITIZER
: > "$DIR/log"

# summarize: DIR/summary.json from the steps so far (written aside, then renamed)
summarize() {
    "$PY" - "$WORK" "$DIR" "$START" "$BUDGET" "${FC_SETUP:-}" "${FC_SETUP_FAILED:-0}" "$BUNDLE" <<'EOF'
import json, os, sys, time
work, out, start, budget, setup, setup_failed, bundle = sys.argv[1:8]
NUMERIC = ("tokens_per_s", "mfu", "ms_per_step", "steps", "B", "T", "recompute", "compile", "cpus", "mem_gib",
           "gpus", "sms", "mem_total_mib", "mem_free_mib", "l2_mib")
def number(k, v):  # figures as numbers; versions, names and the rest as the strings they are
    if v in ("None", "null"):
        return None
    if k.rsplit(".", 1)[-1] in NUMERIC:
        try:
            return float(v) if any(c in v for c in ".e") else int(v)
        except ValueError:
            pass
    return v
steps = []
for line in open(os.path.join(work, "steps", "order")):
    sid, title = line.rstrip("\n").split(" ", 1)
    st = {"id": sid, "title": title}
    path = os.path.join(work, "steps", sid)
    if os.path.exists(path + ".status"):
        status, seconds, limit = open(path + ".status").read().split(" ", 2)
        st.update(status=status, seconds=int(seconds), limit_s=int(limit))
    else:
        st.update(status="not run")
    if os.path.exists(path + ".kv"):
        res = {}
        for l in open(path + ".kv"):
            if "=" in l:
                k, v = l.rstrip("\n").split("=", 1)
                res[k] = number(k, v)
        st["results"] = res
    if os.path.exists(path + ".checks"):
        st["checks"] = [{"result": l[:4], "what": l[5:].rstrip("\n")} for l in open(path + ".checks") if l[:4] in ("PASS", "FAIL", "SKIP")]
    steps.append(st)
info = open(os.path.join(bundle, "x", "info.txt")).read().splitlines() if os.path.exists(os.path.join(bundle, "x", "info.txt")) else []
summary = {
    "script": "scripts/gpu_first_contact.sh", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(start))),
    "elapsed_s": int(time.time()) - int(start), "budget_s": int(budget),
    "bundle": {"info": info, "setup": open(setup).read().splitlines() if setup and os.path.exists(setup) else [],
               "setup_failed": setup_failed == "1"},
    "steps": steps,
    "counts": {s: sum(1 for x in steps if x["status"] == s) for s in ("ok", "failed", "timeout", "skipped", "not run")},
}
tmp = os.path.join(out, ".summary.json.tmp")
with open(tmp, "w") as f:
    json.dump(summary, f, indent=1)
os.replace(tmp, os.path.join(out, "summary.json"))
EOF
    tar -C "$WORK" -czf "$DIR/logs.tar.gz" logs reports steps 2> /dev/null
}

# run_step ID MAX_S MIN_S TITLE: the step under min(MAX_S, the time left); status ok,
# failed, timeout or skipped (less than MIN_S left)
run_step() {
    local id=$1 max=$2 min=$3 title=$4 left limit rc status t0
    max=$(eval echo "\${FC_MAX_$id:-$max}") min=$(eval echo "\${FC_MIN_$id:-$min}")
    left=$(( BUDGET - ($(date +%s) - START) - RESERVE ))
    echo "$id $title" >> "$WORK/steps/order"
    if [ "$left" -lt "$min" ]; then
        echo "skipped 0 $min" > "$WORK/steps/$id.status"
        printf '[%s] %-52s skipped: %d s left, it needs %d\n' "$id" "$title" "$left" "$min" | tee -a "$DIR/log"
        summarize; return
    fi
    limit=$(( max < left ? max : left ))
    t0=$(date +%s)
    printf '\n=== [%s] %s (limit %d s)\n' "$id" "$title" "$limit" >> "$DIR/log"
    STEP_DEADLINE=$(( t0 + limit )) timeout -k 5 "$limit" bash "$0" --step "$id" "$DIR" > "$WORK/logs/$id.log" 2>&1
    rc=$?
    case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
    # a step that could check nothing here (every check a SKIP) was skipped
    if [ "$status" = ok ] && grep -q '^SKIP' "$WORK/steps/$id.checks" 2> /dev/null \
        && ! grep -qE '^(PASS|FAIL)' "$WORK/steps/$id.checks"; then status=skipped; fi
    echo "$status $(( $(date +%s) - t0 )) $limit" > "$WORK/steps/$id.status"
    cat "$WORK/logs/$id.log" >> "$DIR/log"
    printf '[%s] %-52s %s (%d s)%s\n' "$id" "$title" "$status" "$(( $(date +%s) - t0 ))" \
        "$(grep -m1 '^FAIL' "$WORK/steps/$id.checks" 2>/dev/null | cut -c1-100 | sed 's/^/: /')" | tee -a "$DIR/log"
    summarize
}

echo "gpu_first_contact: budget $BUDGET s, $(( $(date +%s) - START )) s used by the set-up; results in $DIR"
for id in ${FC_STEPS:-a b c d e f g}; do
    case $id in
        a) run_step a 30 5 "the machine, its libraries and tools" ;;
        b) run_step b 120 20 "kernel tests, fp32 and bf16" ;;
        c) run_step c 150 40 "trainer vs CPU and PyTorch, stages 0-3" ;;
        d) run_step d 60 20 "2 ranks on one GPU (host backend, stage 3)" ;;
        e) run_step e 160 30 "compute-sanitizer memcheck and racecheck" ;;
        f) run_step f 150 60 "d12 T=1024: tokens/s and MFU, -z 0/3, PyTorch" ;;
        g) run_step g 240 60 "d48: no offload, offload cpu/params/--dpu/NVMe" ;;
        *) echo "gpu_first_contact: no step '$id' (a-g)" | tee -a "$DIR/log" ;;
    esac
done
"$PY" - "$DIR/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"\nsummary ({s['elapsed_s']} s of {s['budget_s']}): " + ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v))
for st in s["steps"]:
    r = st.get("results", {})
    figs = " ".join(f"{k}={v}" for k, v in r.items() if k.endswith(("tokens_per_s", "mfu")) or k in ("B", "probe.gpu0.name"))
    fails = [c["what"] for c in st.get("checks", []) if c["result"] == "FAIL"]
    print(f"  [{st['id']}] {st['status']:<8} {st['title']}" + (f"  {figs}" if figs else ""))
    for f in fails[:4]:
        print(f"        FAIL {f[:150]}")
EOF
exit 0
