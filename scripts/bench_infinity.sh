#!/usr/bin/env bash
# ZeRO-Infinity on this machine: the CPU trainer trains GPT-3 2.7B (-e gpt3:c2560: fp32
# parameters, gradients and Adam's m and v are 16 bytes x 2.65B = 42.4 GB, nearly twice a
# 24 GiB machine's memory) for 2 steps at stage 3, with the parameter shards and the
# optimizer's master, moments and gradient shards in swap files under DIR.
#   usage: scripts/bench_infinity.sh DIR          (from anywhere; builds what it needs)
# Prints, from the run's --report:
#   - each rank's peak resident memory as the kernel counts it (VmHWM, read by the trainer
#     at the end of start-up and of the steps, the high-water mark reset in between), next
#     to the model states: the target is a peak under a third of them;
#   - what bounds it: the engine's accounting (gathered units and unit gradients, the NVMe
#     step's group buffers and staging, persistent units), the activations, the rest (MPI,
#     OpenBLAS, the program); and --estimate's figure for this configuration beside it;
#   - NVMe bytes read and written per step by the engine's counters, beside the kernel's
#     (/proc/self/io of each rank, so O_DIRECT and io_uring's workers);
#   - seconds per step and where they go: the update (of which NVMe wait), NVMe waits
#     outside it (parameter reads, gradient writes), communication wait, and the rest
#     (computation);
#   - the goal's ratio: the step against the larger of its busy time (the step less every
#     wait) and the time the node's NVMe bytes of a step (both ranks') take at fio's rates
#     on DIR, measured by scripts/bench_nvme.sh (RUNS=1, BENCH_FIO_MIB MiB) just before and
#     just after the run in the same invocation, averaged (a shared virtual disk drifts):
#     the target is at most 1.25. The same ratio for the steps after the first, which carry
#     the update the step before deferred (the first has none to carry), is printed after
#     it. The bytes' time adds the reads' and the writes' at fio's sequential rates: a disk
#     that serves both at once (this machine's virtual one does) moves them in less, so a
#     disk-bound step can come out under 1.
# Two ranks of one thread each: the machine's 2 cores either way, and 2 ranks partition the
# states (each swap file is half, each rank gathers the other's shards), which is what
# ZeRO-3 is; the node's memory is then the two ranks' sum, each holding its own working
# set. The knobs (BENCH_ARGS) bound that working set to a few units: --reduce-bucket-size
# 1e8 keeps one block's gradient in flight (the default 5e8 keeps six, 1.9 GB);
# --max-reuse-distance 1e8 frees each block after its forward use (the default 1e9 keeps
# the last five blocks gathered from the forward into the backward, 1.5 GB at 2 ranks, to
# save re-reading them); --sub-group-size 1e7 makes the step's 4 sets of 4 group buffers
# 0.64 GB; --max-in-cpu 0 puts every parameter shard but the persistent units' on NVMe. Swap files need 20 bytes per parameter in all (master, m, v,
# gradients, parameters): 53 GB; DIR's free space is checked first. Not a test: it prints
# measured figures. test/e2e/test_scripts.sh runs it on a small model (BENCH_MODEL=d2).
#   BENCH_MODEL (gpt3:c2560), BENCH_RANKS (2), BENCH_T (64), BENCH_STEPS (2),
#   BENCH_ARGS (the knobs above), BENCH_KEEP=1 keeps the report and log in DIR,
#   BENCH_FIO_MIB (2048; 0 skips fio and the goal's ratio)
set -euo pipefail
dir=${1:?usage: scripts/bench_infinity.sh DIR (where the swap files go)}
cd "$(dirname "$0")/.."
model=${BENCH_MODEL:-gpt3:c2560}; ranks=${BENCH_RANKS:-2}; T=${BENCH_T:-64}; steps=${BENCH_STEPS:-2}
knobs=${BENCH_ARGS:---reduce-bucket-size 1e8 --max-reuse-distance 1e8 --sub-group-size 1e7 --max-in-cpu 0}
[ -d "$dir" ] || { echo "error: $dir is not a directory" >&2; exit 1; }
make -s train_gpt2_zero3_cpu data > /dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
read -ra extra <<< "$knobs"
ARGS=(-e "$model" -b 1 -t "$T" -x "$steps" -v 0 -s 0 -z 3 --offload-optimizer nvme --offload-param nvme "${extra[@]}")

# the estimate of this configuration: the host memory per rank and the swap file's size
est=$(./train_gpt2_zero3_cpu "${ARGS[@]}" --nvme-path "$dir" --estimate 1:"$ranks")
need=$(sed -nE 's/.*swap_bytes_per_rank=([0-9]+).*/\1/p' <<< "$est")
[ -n "$need" ] || { echo "error: no swap_bytes_per_rank in --estimate's output:" >&2; echo "$est" >&2; exit 1; }
free_bytes=$(df -P -B1 "$dir" | awk 'NR == 2 {print $4}')
total=$((need * ranks + (1 << 30)))  # and 1 GiB for the rest of the filesystem's users
if [ "$free_bytes" -lt "$total" ]; then
    echo "error: $dir has $((free_bytes >> 20)) MiB free; the swap files of $model at $ranks ranks need $((total >> 20)) MiB (20 bytes per parameter, and 1 GiB to spare)" >&2
    exit 1
fi
nv=$(mktemp -d "$dir/bench_infinity.XXXXXX")
out=$(mktemp -d)
trap 'rm -rf "$nv" "$out"' EXIT
echo "machine: $(nproc --all) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $model, $ranks ranks x 1 thread, B=1 T=$T, $steps steps, stage 3, optimizer and parameters on NVMe in $dir ($(df -P "$dir" | awk 'NR == 2 {print $1}'))"
echo "  knobs: $knobs"
# fio's sequential O_DIRECT rates on DIR (scripts/bench_nvme.sh's last line), "read write" GB/s
fio_rates() {
    local line
    line=$(SIZE_MIB=$fio_mib RUNS=1 scripts/bench_nvme.sh "$dir" 2>&1 | tail -1)
    sed -nE 's/.*fio_read_gbps=([0-9.]+) fio_write_gbps=([0-9.]+).*/\1 \2/p' <<< "$line" | grep . \
        || { echo "error: bench_nvme.sh gave no fio rates: $line" >&2; exit 1; }
}
fio_mib=${BENCH_FIO_MIB:-2048}
fio_before="0 0"; fio_after="0 0"
if [ "$fio_mib" -gt 0 ]; then fio_before=$(fio_rates); fi
start=$SECONDS
if ! mpirun --allow-run-as-root --oversubscribe -np "$ranks" ./train_gpt2_zero3_cpu "${ARGS[@]}" --nvme-path "$nv" --report "$out/report.json" > "$out/log" 2>&1; then
    echo "error: the run failed:" >&2; tail -5 "$out/log" >&2; exit 1
fi
wall=$((SECONDS - start))
if [ "$fio_mib" -gt 0 ]; then fio_after=$(fio_rates); fi
if [ "${BENCH_KEEP:-0}" = 1 ]; then cp "$out/report.json" "$out/log" "$dir/"; fi
/usr/bin/python3 - "$out/report.json" "$wall" "$est" "$fio_before" "$fio_after" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1])); wall = int(sys.argv[2]); est = sys.argv[3]
fio = [[float(x) for x in a.split()] for a in sys.argv[4:6]]  # [read, write] GB/s, before and after
G = 1e9
n = r["world_size"]; P = r["num_parameters"]
states = 16 * P                      # fp32 parameters, gradients, Adam m and v
mem, ker = r["memory"]["per_rank"], r["kernel"]["per_rank"]
m = re.search(r"peak_bytes_per_rank=([0-9.e+]+)", est)
est_peak = float(m.group(1)) if m else float("nan")
print(f"model states: {P / 1e9:.3f}B parameters x 16 bytes = {states / G:.1f} GB, {states / n / G:.1f} GB per rank; run {wall} s wall")
print(f"{'rank':>4} {'peak RSS start-up':>18} {'peak RSS steps':>15} {'/ rank states':>14} {'estimate':>9} {'est/meas':>9}")
tot = 0
for k in ker:
    rk = k["rank"]; steps_peak = k["peak_rss_steps"]; tot += steps_peak
    print(f"{rk:>4} {k['peak_rss_startup'] / G:15.2f} GB {steps_peak / G:12.2f} GB {steps_peak / (states / n):14.3f} "
          f"{est_peak / G:6.2f} GB {est_peak / steps_peak:9.3f}")
print(f"node: peak RSS of the steps summed over ranks {tot / G:.2f} GB = {tot / states:.3f} of the model states (target < 0.333)")
x = mem[0]
eng = x["params"] + x["grads"] + x["optimizer"] + x["buffers"] + x["host_params"] + x["host_grads"] + x["host_optimizer"] + x["host_buffers"]
rss0 = ker[0]["peak_rss_steps"]
print("what bounds rank 0's peak (the engine's own accounting, peaks):")
print(f"  gathered units, unit gradients, reduce buffers  {x['buffers'] / G:6.2f} GB")
print(f"  NVMe group buffers and staging                  {x['host_buffers'] / G:6.2f} GB")
print(f"  shard-resident states (persistent units etc.)   {(x['params'] + x['grads'] + x['optimizer'] + x['host_params'] + x['host_grads'] + x['host_optimizer']) / G:6.2f} GB")
print(f"  activations                                     {x['activations'] / G:6.2f} GB")
print(f"  the rest (MPI, OpenBLAS, program, page tables)  {(rss0 - eng - x['activations']) / G:6.2f} GB   (peak RSS minus the above)")
print(f"  swap file per rank                              {x['nvme'] / G:6.2f} GB")
t = r["transfers_per_step"]
print(f"NVMe per step (rank 0): engine read {t['nvme_read'] / G:.2f} GB, written {t['nvme_write'] / G:.2f} GB; "
      f"kernel read {ker[0]['read_bytes_per_step'] / G:.2f} GB, written {ker[0]['write_bytes_per_step'] / G:.2f} GB")
steps = r["steps"]
ms = sum(s["ms"] for s in steps) / len(steps)
wait = sum(s["comm_wait_ms"] for s in steps) / len(steps)
upd, upd_io, io = t["update_ms"], t["update_nvme_wait_ms"], t["nvme_wait_ms"]
other_io = io - upd_io
compute = ms - upd - other_io - wait
print(f"seconds per step (rank 0, mean of {len(steps)}): {ms / 1e3:.1f} = compute {compute / 1e3:.1f} + NVMe wait {other_io / 1e3:.1f} "
      f"(parameter reads, gradient writes) + comm wait {wait / 1e3:.1f} + update {upd / 1e3:.1f} (of which NVMe wait {upd_io / 1e3:.1f})")
print("losses: " + " ".join("%.4f" % s["loss"] for s in steps))
goal = ""
if fio[0][0] > 0 and fio[1][0] > 0:
    fr, fw = (fio[0][0] + fio[1][0]) / 2, (fio[0][1] + fio[1][1]) / 2
    rd, wr = n * t["nvme_read"], n * t["nvme_write"]   # the node's: the ranks' shares are equal at stage 3
    disk = rd / (fr * G) + wr / (fw * G)
    busy = ms - io - wait                              # the step less every wait: compute, the CPU Adam, copies
    bound = max(busy * 1e-3, disk)
    print(f"fio: read {fio[0][0]:.2f} / {fio[1][0]:.2f} GB/s, write {fio[0][1]:.2f} / {fio[1][1]:.2f} GB/s (before / after the run)")
    print(f"goal: the node's NVMe bytes per step, read {rd / G:.1f} GB + written {wr / G:.1f} GB, take {disk:.1f} s at fio's mean rates; "
          f"busy {busy / 1e3:.1f} s; step {ms / 1e3:.1f} s = {ms * 1e-3 / bound:.2f} x the larger (target <= 1.25)")
    goal = f" nvme_s={disk:.1f} busy_s={busy / 1e3:.1f} goal_ratio={ms * 1e-3 / bound:.2f}"
    if len(steps) > 1:
        later = sum(s["ms"] for s in steps[1:]) / (len(steps) - 1)
        print(f"steps after the first (each carries the update deferred from the one before): {later / 1e3:.1f} s = "
              f"{later * 1e-3 / bound:.2f} x the larger")
        goal += f" later_ratio={later * 1e-3 / bound:.2f}"
print(f"infinity: peak_rss_ratio={tot / states:.3f} estimate_ratio={est_peak / ker[0]['peak_rss_steps']:.3f} step_s={ms / 1e3:.1f}{goal}")
PY
