#!/usr/bin/env bash
# Where the GPU trainer's step goes, kernel by kernel: one run without a profiler for the
# step time, one under Nsight Compute timing every kernel (gpu__time_duration only, clocks
# left as they are), then dev/kernel_times.py's table: the kernels by time, the classes
# (cuBLAS's matmuls, NCCL, ours) and the share of the step with no kernel running.
# Builds nothing (run it through scripts/gpu_bundle.sh exec DIR on a machine that cannot).
#
#   scripts/gpu_kernel_times.sh DIR [trainer flags]   # default -e d12 -b 32 -t 1024
# DIR gets kernels.csv (ncu's raw CSV), table.txt and run.log. Environment: NCU (the ncu
# binary), KT_STEPS (profiled steps, default 1), KT_TIMEOUT (each run's limit, default 300 s).
# The profiler costs about 0.12 s a kernel (an H200, 2026-11-27: 660 kernels of d12's first
# step in 80 s), and one step of d12 launches well over a thousand: a run stopped by
# KT_TIMEOUT still gives the table of the kernels it reached, marked partial.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/run_common.sh"   # die, require_gpu, RUN_ROOT
cd "$RUN_ROOT" || exit 1
[ $# -ge 1 ] || die "usage: scripts/gpu_kernel_times.sh DIR [trainer flags]"
dir=$1; shift
mkdir -p "$dir" || die "cannot make $dir"
ncu=${NCU:-$(command -v ncu || true)}
for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -n "$ncu" ] || { [ -x "$c" ] && ncu=$c; }
done
[ -x "${ncu:-/nonexistent}" ] || die "ncu (Nsight Compute) not found${ncu:+ at $ncu}: set NCU=/path/to/ncu"
require_gpu "scripts/gpu_kernel_times.sh"
[ -x ./train_gpt2_zero3 ] || die "./train_gpt2_zero3 is not built (make train_gpt2_zero3, or run this through scripts/gpu_bundle.sh exec DIR)"
steps=${KT_STEPS:-1} limit=${KT_TIMEOUT:-300}
args=(-e d12 -b 32 -t 1024 -v 0 -s 0 -n 0 "$@")

# the step time, unprofiled: the steps after two of warm-up
timeout -k 5 "$limit" ./train_gpt2_zero3 "${args[@]}" -x $((steps + 4)) --report "$dir/plain.json" \
    > "$dir/run.log" 2>&1 || die "the unprofiled run failed: $(tail -3 "$dir/run.log")"
step_ms=$(python3 -c 'import sys; sys.path.insert(0, "dev"); from report_figures import figures; print(figures(sys.argv[1], 2)[3])' \
          "$dir/plain.json") || die "no step time in $dir/plain.json"

# every kernel of a short run, timed by the profiler (the few kernels of the set-up included)
echo "profiling with $ncu: ./train_gpt2_zero3 ${args[*]} -x $steps" | tee -a "$dir/run.log"
timeout -k 5 "$limit" "$ncu" --clock-control none --metrics gpu__time_duration.sum --force-overwrite \
    -o "$dir/kernels" ./train_gpt2_zero3 "${args[@]}" -x "$steps" >> "$dir/run.log" 2>&1
rc=$?
partial=""
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then partial="partial: the profiler was stopped after ${limit} s; "
elif [ $rc -ne 0 ]; then die "the profiled run failed (exit $rc): $(tail -3 "$dir/run.log")"; fi
[ -s "$dir/kernels.ncu-rep" ] || die "ncu wrote no report: $(tail -3 "$dir/run.log")"
"$ncu" --import "$dir/kernels.ncu-rep" --csv --page raw --metrics gpu__time_duration.sum > "$dir/kernels.csv" \
    || die "ncu --import failed"
rm -f "$dir/kernels.ncu-rep"
echo "${partial}step time unprofiled: $step_ms ms" | tee "$dir/table.txt"
# a partial run's kernels are not whole steps: no idle share then
python3 dev/kernel_times.py "$dir/kernels.csv" "$steps" "$([ -z "$partial" ] && echo "$step_ms")" 30 | tee -a "$dir/table.txt"
