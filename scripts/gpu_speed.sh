#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps' functions are called by name: "step_$STEP"
# How fast, on a lent GPU: the figures that steer the speed work, in one command of at most
# 8 minutes (the correctness checks are scripts/gpu_first_contact.sh's):
#
#   scripts/gpu_bundle.sh pack              # here: build and pack (.gpu, carried)
#   scripts/gpu_speed.sh DIR                # there: DIR/summary.json, DIR/log, DIR/logs.tar.gz
#
# scripts/gpu_steps.sh is the driver (the bundle's set-up, each step under its own time limit,
# never stopping at a failure, the later ones only with the time left: FC_BUDGET seconds in
# all, default 480, the set-up included). The steps, in order of value:
#   a  the machine in 20-40 s: GPU, clocks, PCIe generation and width (current and most),
#      the copy rates (pinned H2D and D2H, pageable, device to device) and how fast pinned
#      memory is made (cudaMallocHost, or mmap + cudaHostRegister: build/gpu_probe --rates),
#      the host's STREAM triad and the CPU Adam at all cores and at all but two
#      (build/bench_cpu_adam), and where nsys, ncu, libcupti and libcudnn are
#   b  the kernel tests, bf16 and fp32, in at most 60 s: first the programs that test the
#      GPU code changed since the last GPU run (the bundle's info.txt, scripts/gpu_runs.txt)
#   c  d12, B=64, T=1024, bf16: -z 0 and -z 3 for each --attention path the trainer has, 12
#      steps each, the per-op timer on (--profile-ops, where the build has it: its table,
#      trace and rows kept); ms a step, tokens/s, MFU, start-up seconds, stage 3 / stage 0
#   d  the attention alone at d12's shape and GPT-3 2.7B's: our flash and cuBLAS paths and
#      PyTorch's F.scaled_dot_product_attention, each backend, forward and backward TFLOP/s
#      and our flash against PyTorch's best (scripts/bench_attention.sh); then PyTorch's GPT-2
#      at d12's shape, eager, then compiled where there is a C compiler for Triton and the
#      time (dev/bench_torch_gpt2.py)
#   e  d48, B=16 (8 where 16 does not fit), T=1024: no offload, CPU optimizer offload with and
#      without --dpu, the parameters on the CPU too, both on NVMe; each report's update, copy
#      and wait figures and its start-up seconds kept, each against no offload; one more step
#      under --profile-ops, whose timeline gives each ZeRO mover's busy ms (e_*.mover.*_ms)
#   f  with the time left, Nsight Compute on d12, one launch of each launch configuration
#      after two (--filter-mode per-launch-config --launch-skip 2 --launch-count 1,
#      --cache-control none: caches as a step leaves them): time, DRAM bytes, achieved rates
#      (dev/kernel_times.py --configs)
# The summary ends with the ratios the goals are stated in (docs/RESULTS.md's predictions sit
# beside them). Every figure is measured, none asserted: a step fails only when a run fails.
#
# Knobs (make test's rehearsal, test/gpu/test_gpu_bundle.sh, scales everything down with
# them): the driver's (FC_BUDGET, FC_STEPS "a b c d e f", FC_MAX_<step>, FC_MIN_<step>,
# FC_TRAINER, FC_GPU_MIB, FC_TEST_HANG, PY); SP_ADAM_N (50000000: bench_cpu_adam's
# parameters), SP_RATES ("1024 4096": MiB copied, MiB pinned), SP_KERNEL_TESTS (the four
# programs), SP_CHANGED (the changed files, in place of the bundle's list), SP_C_MODEL
# SP_C_B SP_C_T SP_C_STEPS SP_C_WARMUP SP_C_PROFILE (d12 64 1024 12 2 2: the last
# SP_C_PROFILE steps under the per-op timer), SP_TORCH_DEVICE (cuda), SP_TORCH_STEPS (12),
# SP_BA_SHAPES (the attention's shapes, B:NH:T:HS),
# SP_E_MODEL SP_E_BATCHES SP_E_T SP_E_STEPS SP_E_WARMUP SP_E_CONFIGS
# (d48 "16 8" 1024 6 2 "none cpu dpu par nvme"), SP_NCU (the ncu binary), SP_F_STEPS (3).
set -u
cd "$(dirname "$0")/.." || exit 2
source scripts/gpu_steps.sh   # the driver and the steps' helpers: kv, check, ours, figures, ...

GS_NAME=gpu_speed GS_STEPS="a b c d e f" GS_BUDGET=480
step_table() {
    case $1 in
        a) echo "a 40 5 the machine: clocks, PCIe, copy rates, host memory, tools" ;;
        b) echo "b 60 15 kernel tests, the changed kernels first" ;;
        c) echo "c 150 40 d12 B=64 T=1024: -z 0/3, each attention path" ;;
        d) echo "d 180 30 PyTorch: SDPA alone, GPT-2 eager and compiled" ;;
        e) echo "e 210 60 d48: no offload, CPU offload, --dpu, params, NVMe" ;;
        f) echo "f 150 60 Nsight Compute, one launch per configuration" ;;
    esac
}
TRAINER=${FC_TRAINER:-./train_gpt2_zero3}

# ---------------------------------------------------------------------------
# the steps' bodies (each run as `gpu_speed.sh --step ID DIR` under the step's time limit);
# each says what it found with kv and check, and fails when a check failed

# found NAME PATH...: the paths that exist (globs expanded by the caller), or "not found"
found() {
    local name=$1 hits; shift
    hits=$(for p in "$@"; do [ -e "$p" ] && echo "$p"; done | sort -u | paste -sd ' ')
    kv "tool.$name" "${hits:-not found}"
}

step_a() {  # the machine
    local l m n sites cores
    cores=$(env -u OMP_NUM_THREADS nproc)  # (nproc takes OMP_NUM_THREADS for the count)
    kv host.cpus "$cores"
    kv host.mem_gib "$(awk '/MemTotal/ {printf "%.0f", $2 / 2^20}' /proc/meminfo)"
    kv host.cpu "$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
    if command -v nvidia-smi > /dev/null; then
        local q=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,power.limit
        kv smi "$(nvidia-smi --query-gpu="$q" --format=csv,noheader 2>&1 | head -1)"
        kv smi.fields "$q"
    else
        kv smi "nvidia-smi not found"
    fi
    # the probe (GPU, libraries), then the rates on the GPU (its own time limit: pinning GBs)
    ./build/gpu_probe > "$WORK/probe.txt" 2>&1
    local rc=$?
    grep '=' "$WORK/probe.txt" | while IFS= read -r l; do kv "probe.${l%%=*}" "${l#*=}"; done
    if [ "$rc" -eq 0 ]; then
        check PASS "a GPU: $(sed -n 's/^gpu0.name=//p' "$WORK/probe.txt")"
        # shellcheck disable=SC2086  # MIB PIN_MIB
        timeout -k 2 "$(time_for 12)" ./build/gpu_probe --rates ${SP_RATES:-1024 4096} > "$WORK/rates.txt" 2>&1
        rc=$?
        grep '^rates' "$WORK/rates.txt" | while IFS= read -r l; do kv "${l%%=*}" "${l#*=}"; done
        if [ "$rc" -eq 0 ]; then check PASS "copy and pinning rates: H2D $(sed -n 's/^rates.h2d_pinned_gbps=//p' "$WORK/rates.txt") GB/s"
        else check FAIL "build/gpu_probe --rates (exit $rc): $(tail -1 "$WORK/rates.txt")"; fi
    else
        check FAIL "build/gpu_probe (exit $rc): $(tail -1 "$WORK/probe.txt")"
    fi
    # the host's memory rate and the CPU Adam, at all cores and at all but two (the GPU's
    # driving thread, MPI's progress): what an offloaded step's update can reach
    for n in "$cores" "$(( cores > 2 ? cores - 2 : 1 ))"; do
        m=$(OMP_NUM_THREADS=$n timeout -k 2 "$(time_for 4)" ./build/bench_cpu_adam "${SP_ADAM_N:-50000000}" 3 2>&1)
        kv "host.threads_$n.triad_gbps" "$(sed -n 's/.* triad_gbps=\([0-9.]*\).*/\1/p' <<< "$m")"
        kv "host.threads_$n.cpu_adam_gbps" "$(sed -n 's/^cpu_adam:.* gbps=\([0-9.]*\).*/\1/p' <<< "$m")"
        kv "host.threads_$n.cpu_adam_isa" "$(sed -n 's/^cpu_adam: isa=\([^ ]*\).*/\1/p' <<< "$m")"
        grep -q '^triad:' <<< "$m" || check FAIL "build/bench_cpu_adam at $n threads: $(tail -1 <<< "$m")"
    done
    # where the profilers and the libraries they (and cuDNN attention) need are
    sites=$("$PY" -c 'import site, sys; print(" ".join(site.getsitepackages() + sys.path))' 2>/dev/null)
    local libdirs=(/usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda*/extras/CUPTI/lib64 /usr/lib/x86_64-linux-gnu)
    for l in $sites; do libdirs+=("$l"/nvidia/*/lib); done
    # shellcheck disable=SC2046  # the globs are the candidates
    found nsys $(command -v nsys) /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys /opt/nvidia/nsight-compute/*/host/*/nsys
    # shellcheck disable=SC2046
    found ncu $(command -v ncu) /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu
    # shellcheck disable=SC2046
    found libcupti $(for d in "${libdirs[@]}"; do echo "$d"/libcupti.so*; done)
    # shellcheck disable=SC2046
    found libcudnn $(for d in "${libdirs[@]}"; do echo "$d"/libcudnn.so*; done)
    kv tool.cc "$(command -v cc || command -v gcc || echo 'not found')"
    kv bundle.info "$(head -1 "$BUNDLE/x/info.txt" 2>/dev/null)"
}

step_b() {  # the kernel tests, those of the GPU code changed since the last GPU run first
    local changed first=() rest=() t src f hit
    changed=${SP_CHANGED:-$(sed -n 's/^changed since the last GPU run[^:]*: //p' "$BUNDLE/x/info.txt" 2>/dev/null)}
    kv changed "${changed:-unknown (no bundle info)}"
    for t in ${SP_KERNEL_TESTS:-build/test_kernels_gpu build/test_kernels2_gpu build/test_kernels_gpu_fp32 build/test_kernels2_gpu_fp32}; do
        src=test/gpu/$(basename "${t%_fp32}").cu
        # a program comes first when it, or a header it includes, changed (or nothing is known)
        hit=$([ -z "$changed" ] && echo 1)
        for f in "$src" $(sed -n 's/^#include "\([a-z0-9_/]*\.cuh\)".*/\1/p' "$src" 2>/dev/null); do
            [[ " $changed " == *" $f "* ]] && hit=1
        done
        if [ -n "$hit" ]; then first+=("$t"); else rest+=("$t"); fi
    done
    kv order "${first[*]} ${rest[*]}"
    for t in "${first[@]}" "${rest[@]}"; do
        [ "$(left)" -gt 3 ] || { check SKIP "$t: no time left"; continue; }
        kernel_test "$t" "$(time_for 1)"
    done
}

# run_figures NAME WARMUP: a run's figures and start-up seconds as kv NAME.*
run_figures() {
    figures "$1" "$WORK/reports/$1.json" "$2" || return 1
    kv "$1.startup_s" "$("$PY" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["startup"]["seconds"], 1))' \
        "$WORK/reports/$1.json" 2>/dev/null || echo None)"
}
# ratio NAME A B: kv NAME = A / B of two kv figures of this step, when both are there
ratio() {
    local a b
    a=$(sed -n "s/^$2=//p" "$WORK/steps/$STEP.kv" | tail -1) b=$(sed -n "s/^$3=//p" "$WORK/steps/$STEP.kv" | tail -1)
    [ -n "$a" ] && [ -n "$b" ] && [ "$a" != None ] && [ "$b" != None ] && kv "$1" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}')"
}

step_c() {  # d12 at each stage and attention path
    local model=${SP_C_MODEL:-d12} b=${SP_C_B:-64} t=${SP_C_T:-1024} n=${SP_C_STEPS:-12} w=${SP_C_WARMUP:-2}
    local paths z a name prof=()
    paths=$("$TRAINER" --help 2>&1 | sed -n 's/^ *--attention \([a-z|]*\).*/\1/p' | head -1 | tr '|' ' ')
    kv model "$model"; kv B "$b"; kv T "$t"; kv attention_paths "${paths:-cublas}"
    if "$TRAINER" --help 2>&1 | grep -q -- '--profile-ops'; then
        prof=(--profile-ops "${SP_C_PROFILE:-2}")
        kv per_op_timer "on: the last ${SP_C_PROFILE:-2} steps of each run, left out of its figures"
    else
        kv per_op_timer "not in this build"
    fi
    for z in 0 3; do
        for a in ${paths:-cublas}; do
            name=z${z}_$a
            [ "$(left)" -gt 15 ] || { check SKIP "-z $z --attention $a: no time left"; continue; }
            if ours "$name" "$(time_for 5)" -e "$model" -b "$b" -t "$t" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 -z "$z" \
                --attention "$a" -o "$WORK/files/c_$name" "${prof[@]}"; then
                run_figures "$name" "$w" && check PASS "-z $z --attention $a: $(sed -n "s/^$name.ms_per_step=//p" "$WORK/steps/c.kv") ms a step"
                # the per-op timer's rows (its table is in the run's log, its timeline under files/)
                "$PY" - "$WORK/reports/$name.json" <<'EOF' | while read -r k v; do kv "$name.op.$k" "$v"; done
import json, sys
for r in json.load(open(sys.argv[1])).get("ops", []):
    x = r["ms_per_step"] / r["calls_per_step"] / r["floor_ms_per_call"] if r["calls_per_step"] and r["floor_ms_per_call"] else None
    print(r["name"], f"ms={r['ms_per_step']:.3f} share={r['share']:.3f}" + (f" x_floor={x:.2f}" if x else ""))
EOF
            else
                check FAIL "-z $z --attention $a: $(why "$name")"
            fi
        done
    done
    for a in ${paths:-cublas}; do ratio "$a.stage3_vs_stage0_x" "z0_$a.ms_per_step" "z3_$a.ms_per_step"; done
    # --matmul-tune (where the build has it): -z 0 on the last path again, its first step
    # (a warm-up one) timing up to 8 of cuBLASLt's candidates a shape; against the untuned run
    a=${paths:-cublas}; a=${a##* }; name=tuned_z0_$a
    if "$TRAINER" --help 2>&1 | grep -q -- '--matmul-tune' && [ "$(left)" -gt 30 ]; then
        if ours "$name" "$(time_for 5)" -e "$model" -b "$b" -t "$t" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 -z 0 \
            --attention "$a" --matmul-tune 8 -o "$WORK/files/c_$name" "${prof[@]}"; then
            run_figures "$name" "$w" && check PASS "-z 0 --attention $a --matmul-tune 8: $(sed -n "s/^$name.ms_per_step=//p" "$WORK/steps/c.kv") ms a step"
            kv "$name.tuning" "$(grep -m1 '^matmul tuning: ' "$WORK/logs/$name.log")"
            ratio "matmul_tune.untuned_vs_tuned_x" "z0_$a.ms_per_step" "$name.ms_per_step"
        else
            check FAIL "-z 0 --attention $a --matmul-tune 8: $(why "$name")"
        fi
    else
        check SKIP "--matmul-tune: not in this build, or no time left"
    fi
    # -ge 2 (where the build takes it): the GELU's backward in the DGELU epilogue, against -ge 1
    name=ge2_z0_$a
    if "$TRAINER" --help 2>&1 | grep -q -- 'DGELU' && [ "$(left)" -gt 30 ]; then
        if ours "$name" "$(time_for 5)" -e "$model" -b "$b" -t "$t" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 -z 0 \
            --attention "$a" -ge 2 -o "$WORK/files/c_$name" "${prof[@]}"; then
            run_figures "$name" "$w" && check PASS "-z 0 --attention $a -ge 2: $(sed -n "s/^$name.ms_per_step=//p" "$WORK/steps/c.kv") ms a step"
            ratio "gelu_fusion.ge1_vs_ge2_x" "z0_$a.ms_per_step" "$name.ms_per_step"
        else
            check FAIL "-z 0 --attention $a -ge 2: $(why "$name")"
        fi
    else
        check SKIP "-ge 2: not in this build, or no time left"
    fi
}

step_d() {  # the attention alone, ours and PyTorch's; then PyTorch's GPT-2 eager and compiled
    local shp l b=${SP_C_B:-64} t=${SP_C_T:-1024} n=${SP_TORCH_STEPS:-12} dev=${SP_TORCH_DEVICE:-cuda} mode shapes
    read -r -a shp <<< "$(shape "${SP_C_MODEL:-d12}")"
    # d12's attention and GPT-3 2.7B's (heads of 80), our flash and cuBLAS paths beside SDPA
    read -r -a shapes <<< "${SP_BA_SHAPES:-$b:${shp[1]}:$t:$(( shp[2] / shp[1] )) 8:32:2048:80}"
    echo "--- scripts/bench_attention.sh ${shapes[*]}"
    if BA_DEVICE=$dev timeout -k 5 "$(time_for 5)" scripts/bench_attention.sh "${shapes[@]}" > "$WORK/logs/d_attention.log" 2>&1; then
        cat "$WORK/logs/d_attention.log"
        grep -E '^(attention|sdpa) ' "$WORK/logs/d_attention.log" | grep -v unavailable > "$WORK/files/d_attention.txt"
        sed -n 's/^attention B=\([0-9]*\) NH=\([0-9]*\) T=\([0-9]*\) hs=\([0-9]*\) path=\([a-z]*\) /\1:\2:\3:\4.\5 /p' \
            "$WORK/logs/d_attention.log" | while read -r l rest; do kv "attention.$l" "$rest"; done
        for l in $(sed -n 's/^bench_attention: //p' "$WORK/logs/d_attention.log" | grep -o '[0-9:]* flash_vs_sdpa=[0-9.]*' | tr ' ' '='); do
            kv "attention.${l%%=*}.flash_vs_sdpa_x" "${l##*=}"
        done
        check PASS "attention alone: $(tail -1 "$WORK/logs/d_attention.log" | cut -c1-200)"
    else
        check FAIL "scripts/bench_attention.sh: $(tail -1 "$WORK/logs/d_attention.log")"
    fi
    for mode in eager compiled; do
        if [ "$mode" = compiled ]; then
            { command -v cc || command -v gcc; } > /dev/null || { check SKIP "PyTorch compiled: no C compiler for Triton's launchers"; continue; }
            [ "$dev" = cuda ] || { check SKIP "PyTorch compiled: not on $dev"; continue; }
            [ "$(left)" -gt 100 ] || { check SKIP "PyTorch compiled: $(left) s left, compiling takes about a minute"; continue; }
        fi
        [ "$(left)" -gt 20 ] || { check SKIP "PyTorch $mode: no time left"; continue; }
        echo "--- PyTorch $mode: dev/bench_torch_gpt2.py -L ${shp[0]} -H ${shp[1]} -C ${shp[2]} -b $b -t $t"
        # shellcheck disable=SC2046  # --no-compile or nothing
        if timeout -k 5 "$(time_for 3)" "$PY" dev/bench_torch_gpt2.py -L "${shp[0]}" -H "${shp[1]}" -C "${shp[2]}" -b "$b" -t "$t" \
            --steps "$n" --warmup 0 --device "$dev" $([ "$mode" = eager ] && echo --no-compile) \
            --report "$WORK/reports/torch_$mode.json" > "$WORK/logs/d_torch_$mode.log" 2>&1; then
            tail -2 "$WORK/logs/d_torch_$mode.log"
            # compiling is in the first steps: left out as the trainer's warm-up is
            figures "torch_$mode" "$WORK/reports/torch_$mode.json" "$([ "$mode" = eager ] && echo 2 || echo 4)" \
                && check PASS "PyTorch $mode: $(sed -n "s/^torch_$mode.ms_per_step=//p" "$WORK/steps/d.kv") ms a step"
        else
            check FAIL "PyTorch $mode: $(tail -1 "$WORK/logs/d_torch_$mode.log")"
        fi
    done
}

step_e() {  # d48 with and without the offloads
    local model=${SP_E_MODEL:-d48} t=${SP_E_T:-1024} n=${SP_E_STEPS:-6} w=${SP_E_WARMUP:-2} b cfg name prof=()
    b=$(batch_that_fits "$model" "$t" "${SP_E_BATCHES:-16 8}" 1 2> "$WORK/fit.err") \
        || { check FAIL "no batch size of ${SP_E_BATCHES:-16 8} fits $(gpu_mib) MiB $(cat "$WORK/fit.err")"; return; }
    kv model "$model"; kv B "$b"; kv T "$t"
    # one step more, under the per-op timer (left out of the figures), where the build has it:
    # the engine's movers in that step (ms on each, from its timeline) show the overlap
    if "$TRAINER" --help 2>&1 | grep -q -- '--profile-ops'; then prof=(--profile-ops 1); n=$((n + 1)); fi
    for cfg in "none:-z 0" "cpu:-z 2 $(offload_args cpu)" "dpu:-z 2 $(offload_args cpu) --dpu 1" \
               "par:-z 3 $(offload_args param)" "nvme:-z 3 $(offload_args nvme)"; do
        name=${cfg%%:*}
        [[ " ${SP_E_CONFIGS:-none cpu dpu par nvme} " == *" $name "* ]] || continue
        [ "$(left)" -gt 30 ] || { check SKIP "$name: no time left"; continue; }
        # shellcheck disable=SC2086
        if ours "e_$name" "$(time_for 5)" -e "$model" -b "$b" -t "$t" -x "$n" -l 6e-4 -c 0.1 -v 0 -s 0 -n 0 ${cfg#*:} \
            -o "$WORK/files/e_$name" "${prof[@]}"; then
            run_figures "e_$name" "$w" && check PASS "$name (${cfg#*:}): $(sed -n "s/^e_$name.ms_per_step=//p" "$WORK/steps/e.kv") ms a step"
            # the update, the copies and the waits, per step
            "$PY" - "$WORK/reports/e_$name.json" <<'EOF' | while read -r k v; do kv "e_$name.$k" "$v"; done
import json, sys
r = json.load(open(sys.argv[1]))
t = r.get("transfers_per_step", {})
for k in ("update_ms", "nvme_wait_ms", "device_to_host", "host_to_device", "nvme_read", "nvme_write"):
    if k in t:
        print(k if k.endswith("_ms") else k + "_gib", round(t[k], 2) if k.endswith("_ms") else round(t[k] / 2**30, 3))
print("comm_wait_ms", round(r.get("comm", {}).get("wait_ms_per_step", 0.0), 2))
EOF
            # the profiled step's movers (ZeRO's tracks of ops_trace.json): ms busy on each, by name
            "$PY" - "$WORK/files/e_$name/ops_trace.json" <<'EOF' 2> /dev/null | while read -r k v; do kv "e_$name.mover.$k" "$v"; done
import json, sys
busy = {}
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    if e["ph"] == "X" and e["tid"] >= 2:
        k = e["name"].replace(" ", "_")
        busy[k] = busy.get(k, 0.0) + e["dur"] / 1e3
for k, v in sorted(busy.items()):
    print(k + "_ms", round(v, 2))
EOF
            [ "$name" = none ] || ratio "$name.vs_none_x" "e_none.ms_per_step" "e_$name.ms_per_step"
        else
            check FAIL "$name (${cfg#*:}): $(why "e_$name")"
        fi
    done
}

step_f() {  # Nsight Compute, one launch of each launch configuration
    local ncu=${SP_NCU:-} c rc
    for c in $(command -v ncu) /usr/local/cuda/bin/ncu /usr/local/cuda-*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        [ -n "$ncu" ] || { [ -x "$c" ] && ncu=$c; }
    done
    [ -n "$ncu" ] || { check SKIP "ncu not found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute, SP_NCU)"; return; }
    kv ncu "$ncu"
    local metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
    local args=(-e "${SP_C_MODEL:-d12}" -b "${SP_C_B:-64}" -t "${SP_C_T:-1024}" -x "${SP_F_STEPS:-3}" -v 0 -s 0 -n 0 -z 0)
    echo "--- $ncu --filter-mode per-launch-config --launch-skip 2 --launch-count 1 ... $TRAINER ${args[*]}"
    timeout -k 5 "$(time_for 15)" "$ncu" --filter-mode per-launch-config --launch-skip 2 --launch-count 1 --cache-control none \
        --clock-control none --metrics "$metrics" --force-overwrite -o "$WORK/files/f_kernels" "$TRAINER" "${args[@]}" \
        > "$WORK/logs/f_ncu.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || kv partial "exit $rc: the profiled run was stopped or failed; the launches it reached are below"
    [ -s "$WORK/files/f_kernels.ncu-rep" ] || { check FAIL "ncu wrote no report (exit $rc): $(tail -2 "$WORK/logs/f_ncu.log" | tr '\n' ' ')"; return; }
    "$ncu" --import "$WORK/files/f_kernels.ncu-rep" --csv --page raw --metrics "$metrics" > "$WORK/files/f_kernels.csv" 2> "$WORK/logs/f_import.log" \
        || { check FAIL "ncu --import failed: $(tail -1 "$WORK/logs/f_import.log")"; return; }
    if "$PY" dev/kernel_times.py --configs "$WORK/files/f_kernels.csv" 40 > "$WORK/files/f_table.txt" 2>&1; then
        head -20 "$WORK/files/f_table.txt"
        kv configs "$(sed -n 's/^\([0-9]*\) launch configurations.*/\1/p' "$WORK/files/f_table.txt")"
        check PASS "$(head -1 "$WORK/files/f_table.txt")"
    else
        check FAIL "dev/kernel_times.py --configs: $(tail -1 "$WORK/files/f_table.txt")"
    fi
    rm -f "$WORK/files/f_kernels.ncu-rep"  # (the CSV holds what was asked; the report is large)
}

# the summary's table, then the goals' ratios (docs/RESULTS.md has the predictions)
summary_print() {
    gs_summary_print
    "$PY" - "$DIR/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
r = {st["id"]: st.get("results", {}) for st in s["steps"]}
def g(step, key):
    return r.get(step, {}).get(key)
def f(x, fmt="{:.1f}"):
    return "-" if x is None or isinstance(x, str) else fmt.format(x)
a = r.get("a", {})
print("\nfigures:")
print(f"  machine: {a.get('probe.gpu0.name', '?')}; nvidia-smi: {a.get('smi', '?')}")
print(f"  copies GB/s: H2D pinned {f(a.get('rates.h2d_pinned_gbps'))}, D2H pinned {f(a.get('rates.d2h_pinned_gbps'))}, "
      f"H2D pageable {f(a.get('rates.h2d_pageable_gbps'))}, D2D {f(a.get('rates.d2d_gbps'))}; pinning GB/s: cudaMallocHost "
      f"{f(a.get('rates.pin_mallochost_gbps'))}, mmap+register {f(a.get('rates.pin_register_gbps'))} "
      f"(register alone {f(a.get('rates.pin_register_only_gbps'))}, copies from it {f(a.get('rates.h2d_registered_gbps'))})")
for k, v in a.items():
    if k.startswith("host.threads_") and k.endswith("triad_gbps"):
        n = k.split(".")[1][len("threads_"):]
        print(f"  host at {n} threads: triad {f(v)} GB/s, CPU Adam {f(a.get(f'host.threads_{n}.cpu_adam_gbps'))} GB/s")
print("  tools: " + "; ".join(f"{k[5:]}: {v}" for k, v in a.items() if k.startswith("tool.")))
c = r.get("c", {})
for k, v in c.items():
    if k.endswith(".ms_per_step"):
        n = k[:-len(".ms_per_step")]
        print(f"  {c.get('model')} B={c.get('B')} {n}: {f(v)} ms a step, {f(c.get(n + '.tokens_per_s'), '{:.0f}')} tokens/s, MFU "
              f"{f(None if c.get(n + '.mfu') is None else 100 * c[n + '.mfu'])}%, start-up {f(c.get(n + '.startup_s'))} s")
ops = [(k, v) for k, v in c.items() if ".op." in k and k.startswith("z0_")]
if ops:
    print("  the per-op timer, -z 0 (ms a step, share, time over the floor), the 8 longest of each run:")
    for k, v in [(k, v) for i, (k, v) in enumerate(ops) if sum(o[0].split(".")[0] == k.split(".")[0] for o in ops[:i]) < 8]:
        print(f"    {k.replace('.op.', ': ')}: {v}")
if c.get("gelu_fusion.ge1_vs_ge2_x") is not None:
    print(f"  -ge 2 (DGELU epilogue): the -ge 1 step takes {c['gelu_fusion.ge1_vs_ge2_x']}x the -ge 2 one's time")
if c.get("matmul_tune.untuned_vs_tuned_x") is not None:
    tl = next((v for k, v in c.items() if k.endswith(".tuning")), "no tuning line")
    print(f"  --matmul-tune 8: the untuned step takes {c['matmul_tune.untuned_vs_tuned_x']}x the tuned one's time ({tl})")
for k, v in c.items():
    if k.endswith(".stage3_vs_stage0_x"):
        print(f"  stage 3 / stage 0 ({k.split('.', 1)[0]}): {v}x of stage 0's speed (goal: within 3%)")
d = r.get("d", {})
for mode in ("eager", "compiled"):
    ms = d.get(f"torch_{mode}.ms_per_step")
    if ms is not None:
        best = min((v for k, v in c.items() if k.endswith(".ms_per_step") and isinstance(v, (int, float))), default=None)
        print(f"  PyTorch {mode}: {f(ms)} ms a step, MFU {f(None if d.get(f'torch_{mode}.mfu') is None else 100 * d[f'torch_{mode}.mfu'])}%"
              + (f"; ours (the best above) at {ms / best:.3f}x its speed" if best else ""))
for k, v in d.items():
    if k.startswith("attention.") and k.endswith((".flash", ".cublas")):
        print(f"  attention {k[10:]}: {v}")
    if k.endswith(".flash_vs_sdpa_x"):
        print(f"  attention {k[10:-len('.flash_vs_sdpa_x')]}: our flash at {v}x of PyTorch's SDPA (goal: at least 0.7x)")
e = r.get("e", {})
for k, v in e.items():
    if k.endswith(".ms_per_step"):
        n = k[:-len(".ms_per_step")]
        x = e.get(n[2:] + ".vs_none_x")
        extra = " ".join(f"{q}={e[n + '.' + q]}" for q in ("update_ms", "comm_wait_ms", "device_to_host_gib", "host_to_device_gib") if n + "." + q in e)
        movers = " ".join(f"{q[len(n) + 7:-3]}={v}" for q, v in e.items() if q.startswith(n + ".mover."))
        extra += f"; movers busy (ms, the profiled step): {movers}" if movers else ""
        print(f"  {e.get('model')} B={e.get('B')} {n[2:]}: {f(v)} ms a step, MFU {f(None if e.get(n + '.mfu') is None else 100 * e[n + '.mfu'])}%, "
              f"start-up {f(e.get(n + '.startup_s'))} s" + (f", {x}x of no offload" if x is not None else "") + (f"; {extra}" if extra else ""))
fr = r.get("f", {})
if fr.get("configs"):
    print(f"  Nsight Compute: {fr['configs']} launch configurations (files/f_table.txt in logs.tar.gz)")
EOF
}

gpu_steps_main "$@"
