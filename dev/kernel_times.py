#!/usr/bin/env python3
"""
Where a GPU step's time goes, kernel by kernel, from Nsight Compute's raw CSV of a run
(scripts/gpu_kernel_times.sh writes it: `ncu --metrics gpu__time_duration.sum --csv
--page raw`):

    python3 dev/kernel_times.py NCU.csv STEPS [STEP_MS] [TOP]

Prints one row per kernel name (calls per step, ms per step, share of the kernels' time),
the top TOP (default 25), then the total by class (matmul: cuBLAS/cuBLASLt's kernels;
nccl; ours: every other kernel, by its name's first word) and, given STEP_MS (the step
time of the same run without the profiler), the share of the step the GPU spent in no
kernel at all (launch gaps, host work, synchronisation). Exit 1 when the file holds no
kernel rows or no duration column.
"""
import csv
import sys
from collections import defaultdict

UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
METRIC = "gpu__time_duration.sum"


def rows_of(path):
    """(kernel name, duration in ns) of each profiled launch in ncu's raw CSV"""
    lines = [l for l in open(path, newline="") if l.startswith('"')]  # ncu's own ==PROF== lines aside
    table = list(csv.reader(lines))
    if not table or "Kernel Name" not in table[0] or METRIC not in table[0]:
        raise ValueError(f"{path}: no 'Kernel Name' and '{METRIC}' columns")
    name_col, t_col = table[0].index("Kernel Name"), table[0].index(METRIC)
    scale, out = 1.0, []
    for r in table[1:]:
        if len(r) <= max(name_col, t_col):
            continue
        v = r[t_col].replace(",", "")
        try:
            out.append((r[name_col], float(v) * scale))
        except ValueError:  # the units row
            scale = UNIT_NS.get(v, scale)
    if not out:
        raise ValueError(f"{path}: no kernel rows")
    return out


def kernel_class(name):
    n = name.lower()
    if n.startswith("nccl"):
        return "nccl"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "cublas", "sm90_xmma", "splitk")):
        return "matmul (cuBLAS)"
    return "ours"


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    try:
        rows = rows_of(sys.argv[1])
    except (OSError, ValueError) as e:
        print(f"kernel_times: {e}", file=sys.stderr)
        return 1
    steps = float(sys.argv[2])
    step_ms = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    by_name, calls, by_class = defaultdict(float), defaultdict(int), defaultdict(float)
    for name, ns in rows:
        short = name.split("(")[0].split("<")[0].strip().removeprefix("void ") or name
        by_name[short] += ns
        calls[short] += 1
        by_class[kernel_class(short)] += ns
    total = sum(by_name.values())
    print(f"{len(rows)} kernels over {steps:g} steps: {total / 1e6 / steps:.2f} ms of kernels a step")
    print(f"{'kernel':60s} {'calls/step':>10s} {'ms/step':>9s} {'share':>6s}")
    for name, ns in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name[:60]:60s} {calls[name] / steps:10.1f} {ns / 1e6 / steps:9.3f} {100 * ns / total:5.1f}%")
    for c, ns in sorted(by_class.items(), key=lambda kv: -kv[1]):
        print(f"class {c:20s} {ns / 1e6 / steps:9.3f} ms/step {100 * ns / total:5.1f}%")
    if step_ms:
        busy = total / 1e6 / steps
        print(f"step {step_ms:.2f} ms unprofiled: kernels {busy:.2f} ms ({100 * busy / step_ms:.1f}%), "
              f"no kernel running {max(step_ms - busy, 0):.2f} ms ({100 * max(step_ms - busy, 0) / step_ms:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
