#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps' functions are called by name: "step_$STEP"
# The first run of the GPU trainer on a GPU, made to fit one command of at most 8 minutes
# on a lent machine (one H100, nothing installable, see scripts/gpu_bundle.sh):
#
#   scripts/gpu_first_contact.sh DIR        (with the bundle carried as .gpu, or BUNDLE=...)
#
# scripts/gpu_steps.sh is the driver (the bundle's set-up, each step under its own time limit,
# never stopping at a failure, the later ones only with the time left: FC_BUDGET seconds in
# all, default 450, counted from the start, the set-up included; DIR/summary.json, DIR/log,
# DIR/logs.tar.gz). The steps, in order of value:
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
# Its speed-first sibling is scripts/gpu_speed.sh.
#
# Knobs (make test's rehearsal, test/gpu/test_gpu_bundle.sh, scales everything down with
# them): the driver's (scripts/gpu_steps.sh: FC_BUDGET, FC_STEPS "a b c d e f g", FC_MAX_<step>,
# FC_MIN_<step>, FC_TRAINER, FC_GPU_MIB, FC_TEST_HANG, PY); FC_C_SECTIONS, FC_KERNEL_TESTS,
# FC_KERNEL_TIMEOUT, FC_SANITIZER (the compute-sanitizer binary), FC_E_RUNS ("memcheck:none
# memcheck:cpu racecheck:none racecheck:cpu memcheck:param racecheck:param memcheck:nvme":
# tool and offload), FC_E_RUN_MAX (60 s a run), FC_F_MODEL FC_F_T FC_F_BATCHES FC_F_STEPS
# FC_F_WARMUP FC_F_RECOMPUTE, FC_G_MODEL FC_G_T FC_G_BATCHES FC_G_STEPS FC_G_WARMUP
# FC_G_CONFIGS ("none par cpu dpu nvme"), FC_TORCH_DEVICE (cuda).
set -u
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu_steps.sh   # the driver and the steps' helpers: kv, check, ours, figures, ...

GS_NAME=gpu_first_contact GS_STEPS="a b c d e f g" GS_BUDGET=450
step_table() {
    case $1 in
        a) echo "a 30 5 the machine, its libraries and tools" ;;
        b) echo "b 120 20 kernel tests, fp32 and bf16" ;;
        c) echo "c 150 40 trainer vs CPU and PyTorch, stages 0-3" ;;
        d) echo "d 60 20 2 ranks on one GPU (host backend, stage 3)" ;;
        e) echo "e 160 30 compute-sanitizer memcheck and racecheck" ;;
        f) echo "f 150 60 d12 T=1024: tokens/s and MFU, -z 0/3, PyTorch" ;;
        g) echo "g 240 60 d48: no offload, offload cpu/params/--dpu/NVMe" ;;
    esac
}
SANITIZER=${FC_SANITIZER:-$(command -v compute-sanitizer)}
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    [ -n "$SANITIZER" ] || { [ -x "$c" ] && SANITIZER=$c; }
done
export SANITIZER

# ---------------------------------------------------------------------------
# the steps' bodies (each run as `gpu_first_contact.sh --step ID DIR` under the step's time
# limit); each says what it found with kv and check, and fails when a check failed

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
    local t
    for t in ${FC_KERNEL_TESTS:-build/test_kernels_gpu_fp32 build/test_kernels_gpu build/test_kernels2_gpu_fp32 build/test_kernels2_gpu}; do
        kernel_test "$t" "${FC_KERNEL_TIMEOUT:-90}"
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

gpu_steps_main "$@"
