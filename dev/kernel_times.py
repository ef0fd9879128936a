#!/usr/bin/env python3
"""
Where a GPU step's time goes, kernel by kernel, from Nsight Compute's raw CSV of a run
(scripts/gpu_kernel_times.sh writes it: `ncu --metrics gpu__time_duration.sum --csv
--page raw`):

    python3 dev/kernel_times.py NCU.csv STEPS [STEP_MS] [TOP]
    python3 dev/kernel_times.py --configs NCU.csv [TOP]

Prints one row per kernel name (calls per step, ms per step, share of the kernels' time),
the top TOP (default 25), then the total by class (matmul: cuBLAS/cuBLASLt's kernels;
nccl; ours: every other kernel, by its name's first word) and, given STEP_MS (the step
time of the same run without the profiler), the share of the step the GPU spent in no
kernel at all (launch gaps, host work, synchronisation). Exit 1 when the file holds no
kernel rows or no duration column.

--configs: a profile of one launch per launch configuration (scripts/gpu_speed.sh step f:
`ncu --filter-mode per-launch-config --launch-count 1`, with DRAM bytes, throughput and
register metrics): one row per kernel and block and grid size, the longest first (TOP,
default 40): its time, the DRAM bytes it moved and their rate, the SM and memory
throughput as percentages of the peak, registers per thread. Columns a profile lacks show
as "-". The first line: "N launch configurations, one launch each: T ms of kernels".
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


UNIT_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def table_of(path):
    """ncu's raw CSV as a list of dicts: the strings of the launch's columns, and each metric
    column that parses as a number, converted by its unit (times to ns, bytes to bytes)"""
    lines = [l for l in open(path, newline="") if l.startswith('"')]
    table = list(csv.reader(lines))
    if not table or "Kernel Name" not in table[0] or METRIC not in table[0]:
        raise ValueError(f"{path}: no 'Kernel Name' and '{METRIC}' columns")
    head, units, out = table[0], {}, []
    for r in table[1:]:
        if len(r) < len(head):
            continue
        if r[head.index("Kernel Name")] == "":  # the units row
            units = {h: u for h, u in zip(head, r)}
            continue
        row = {}
        for h, v in zip(head, r):
            u = units.get(h, "")
            try:
                x = float(v.replace(",", ""))
                row[h] = x * UNIT_NS.get(u, 1.0) if h == METRIC else x * UNIT_BYTES.get(u, 1.0) if "bytes" in h else x
            except ValueError:
                row[h] = v
        out.append(row)
    if not out:
        raise ValueError(f"{path}: no kernel rows")
    return out


def configs(path, top):
    """--configs: one row per launch configuration, the longest first"""
    rows = table_of(path)
    def num(r, k):
        v = r.get(k)
        return v if isinstance(v, float) else None
    total = sum(num(r, METRIC) or 0.0 for r in rows)
    print(f"{len(rows)} launch configurations, one launch each: {total / 1e6:.3f} ms of kernels")
    print(f"{'kernel':48s} {'block':>12s} {'grid':>14s} {'us':>9s} {'DRAM MB':>9s} {'GB/s':>7s} {'SM%':>5s} {'mem%':>5s} {'regs':>4s}")
    def fmt(x, f):  # "-" in the column's width where the profile lacks the figure
        return f.format(x) if x is not None else "-".rjust(int(f.strip("{}:").split(".")[0].rstrip("f")))
    for r in sorted(rows, key=lambda r: -(num(r, METRIC) or 0.0))[:top]:
        ns = num(r, METRIC)
        rd, wr = num(r, "dram__bytes_read.sum"), num(r, "dram__bytes_write.sum")
        dram = rd + wr if rd is not None and wr is not None else None
        gbps = dram / ns if dram is not None and ns else None  # bytes per ns = GB/s
        name = str(r["Kernel Name"]).split("(")[0].split("<")[0].strip().removeprefix("void ")
        print(f"{name[:48]:48s} {str(r.get('Block Size', '-')).replace(' ', ''):>12s} {str(r.get('Grid Size', '-')).replace(' ', ''):>14s} "
              f"{fmt(None if ns is None else ns / 1e3, '{:9.1f}')} {fmt(None if dram is None else dram / 1e6, '{:9.1f}')} "
              f"{fmt(gbps, '{:7.0f}')} {fmt(num(r, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'), '{:5.1f}')} "
              f"{fmt(num(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'), '{:5.1f}')} "
              f"{fmt(num(r, 'launch__registers_per_thread'), '{:4.0f}')}")
    return 0


def kernel_class(name):
    n = name.lower()
    if n.startswith("nccl"):
        return "nccl"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "cublas", "sm90_xmma", "splitk")):
        return "matmul (cuBLAS)"
    return "ours"


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--configs":
        try:
            return configs(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
        except (OSError, ValueError) as e:
            print(f"kernel_times: {e}", file=sys.stderr)
            return 1
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
