#!/usr/bin/env bash
# Inter-node traffic of ZeRO-3 and its multi-node variants, measured on the wire: two
# "hosts" made of network namespaces on this machine (test/e2e/netns_hosts.sh: each joined
# by a veth to a bridge, MTU 65000), 2 ranks on each, the CPU trainer on GPT-2 124M (d12)
# at B=1, T=64. What crossed is read from the hosts' veths (the bytes both hosts sent out),
# not computed: each configuration runs twice, for 2 and for 4 steps, and the difference
# of the veth bytes over the difference of the steps is the bytes per optimizer step, the
# start-up and teardown (Open MPI's launch, the model's init, the report) cancelling.
# Prints a table: configuration, inter-node bytes per step on the veths, the report's own
# count of them (comm.network.job_bytes_per_step.inter summed over the collectives, from the
# longer run; n/a where the report has none), veths / report, and the ratio to plain ZeRO-3;
# then one line "bench_comm: ..." with the same figures. Not a test: it prints measured
# figures. test/e2e/test_scripts.sh runs it on a small model (BENCH_MODEL=d2).
#   usage: scripts/bench_comm.sh        (from anywhere, as root: it makes network namespaces;
#                                       builds what it needs; about 8 minutes on 2 cores)
#   BENCH_MODEL (d12), BENCH_B (1), BENCH_T (64), BENCH_STEPS ("2 4": the two step counts),
#   BENCH_ARGS ("--max-reuse-distance 0": every configuration frees each unit after its
#   forward use and gathers it again for the backward, as a model too large to keep its
#   units gathered does; d12 at the defaults keeps all of them from the forward to the
#   backward, and then there is no backward gather for hpZ to keep inside the node)
# Exit status 2 where the two hosts cannot be made here (the reason on stderr), 1 where a
# configuration failed (its row says why; the others are still measured).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${BENCH_MODEL:-d12}; B=${BENCH_B:-1}; T=${BENCH_T:-64}
read -ra extra <<< "${BENCH_ARGS---max-reuse-distance 0}"
read -r s1 s2 <<< "${BENCH_STEPS:-2 4}"
[ "$s2" -gt "$s1" ] || { echo "error: BENCH_STEPS must be two step counts, the second larger" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=test/e2e/netns_hosts.sh
source test/e2e/netns_hosts.sh
if ! hosts_up 2> /dev/null; then
    echo "error: cannot make the two hosts: $HOSTS_REASON" >&2
    exit 2
fi
make -s train_gpt2_zero3_cpu data > /dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

configs=(
    "zero3|ZeRO-3|-z 3"
    "mics|MiCS, shard groups of 2|-z 3 --mics-shard-size 2"
    "hpz|hpZ, secondary groups of 2|-z 3 --zero-hpz-partition-size 2"
    "zpp|qwZ + hpZ + qgZ (ZeRO++)|-z 3 --zero-hpz-partition-size 2 --zero-quantized-weights 1 --zero-quantized-gradients 1"
)
TRAIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
echo "machine: $(nproc --all) cores; 2 hosts (network namespaces, veth MTU 65000, $HOSTS_SUBNET) x 2 ranks x 1 thread;" \
     "$model, B=$B T=$T per rank, runs of $s1 and $s2 steps; every run: ${extra[*]:-(no extra flags)}"
failed=0
for c in "${configs[@]}"; do
    IFS='|' read -r name label flags <<< "$c"
    for s in "$s1" "$s2"; do
        before=$(hosts_link_bytes)
        start=$SECONDS
        # shellcheck disable=SC2086
        if hosts_mpirun 2 ./train_gpt2_zero3_cpu -e "$model" -i "$TRAIN" -j "$TRAIN" -b "$B" -t "$T" -x "$s" -v 0 -s 0 $flags "${extra[@]}" \
                --report "$tmp/${name}_$s.json" > "$tmp/${name}_$s.log" 2>&1; then
            echo $(($(hosts_link_bytes) - before)) > "$tmp/${name}_$s.veth"
            echo "  $label, $s steps: $(cat "$tmp/${name}_$s.veth") bytes on the veths, $((SECONDS - start)) s" >&2
        else
            grep -m1 -iE 'error|unknown' "$tmp/${name}_$s.log" > "$tmp/${name}.err" || tail -1 "$tmp/${name}_$s.log" > "$tmp/${name}.err"
            failed=1
            break
        fi
    done
done

/usr/bin/python3 - "$tmp" "$s1" "$s2" "${configs[@]}" <<'PY'
import json, os, sys
d, s1, s2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [c.split("|") for c in sys.argv[4:]]
M = 1e6
def per_step(name):
    try:
        v1, v2 = (int(open(f"{d}/{name}_{s}.veth").read()) for s in (s1, s2))
    except FileNotFoundError:
        return None, None
    net = json.load(open(f"{d}/{name}_{s2}.json"))["comm"].get("network")
    rep = sum(net["job_bytes_per_step"]["inter"].values()) if net else None
    return (v2 - v1) / (s2 - s1), rep
res = {name: per_step(name) for name, _, _ in rows}
base = res["zero3"][0]
print(f"{'configuration':<28}{'veth MB/step':>14}{'report MB/step':>16}{'veth/report':>13}{'vs ZeRO-3':>11}")
line = []
for name, label, flags in rows:
    veth, rep = res[name]
    if veth is None:
        err = open(f"{d}/{name}.err").read().strip() if os.path.exists(f"{d}/{name}.err") else "failed"
        print(f"{label:<28}  failed: {err}")
        line.append(f"{name}=failed")
        continue
    rs = f"{rep / M:16.2f}" if rep is not None else f"{'n/a':>16}"
    rr = f"{veth / rep:13.3f}" if rep else f"{'n/a':>13}"
    vs = f"{veth / base:11.3f}" if base else f"{'n/a':>11}"
    print(f"{label:<28}{veth / M:14.2f}{rs}{rr}{vs}")
    line.append(f"{name}_bytes_per_step={veth:.0f}" + (f" {name}_report={rep:.0f}" if rep is not None else "")
                + (f" {name}_vs_zero3={veth / base:.3f}" if base else ""))
print("bench_comm: " + " ".join(line))
PY
exit $failed
