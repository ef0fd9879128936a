#!/usr/bin/env python3
"""
The speed of a run from its --report JSON (the trainer's, or dev/bench_torch_gpt2.py's,
which has the same step fields), its first WARMUP steps left out (cuBLASLt's heuristics,
torch.compile, the allocator's first growth):

    python3 dev/report_figures.py REPORT.json WARMUP
    -> {"steps": 15, "ms_per_step": 151.2, "tokens_per_s": 433412.0, "mfu": 0.412}

tokens/s is the kept steps' tokens over their time; MFU is the time-weighted mean of the
steps' MFU, which is the MFU of that overall rate (MFU is linear in tokens/s), or null when
a step has none (a GPU missing from the trainer's table of peaks). Steps the per-op timer
ran in (`"profiled": true`, --profile-ops) are left out too: its events cost time. Used by
scripts/bench_gpu.sh, scripts/gpu_first_contact.sh and scripts/gpu_speed.sh.
"""
import json
import sys


def figures(path, warmup):
    """(tokens/s, MFU or None, kept steps, ms per step) of the report at path"""
    steps = [s for s in json.load(open(path))["steps"][int(warmup):] if not s.get("profiled")]
    if not steps:
        raise ValueError(f"{path}: no steps after the {warmup} warm-up steps (steps under --profile-ops not counted)")
    ms = sum(s["ms"] for s in steps)
    toks = sum(s["tokens_per_s"] * s["ms"] / 1e3 for s in steps)
    mfus = [s.get("mfu") for s in steps]
    mfu = sum(m * s["ms"] for m, s in zip(mfus, steps)) / ms if all(m is not None for m in mfus) else None
    return toks / (ms / 1e3), mfu, len(steps), ms / len(steps)


def main():
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        print("usage: report_figures.py REPORT.json WARMUP", file=sys.stderr)
        return 2
    try:
        tps, mfu, n, ms = figures(sys.argv[1], int(sys.argv[2]))
    except (OSError, ValueError, KeyError) as e:
        print(f"report_figures: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"steps": n, "ms_per_step": round(ms, 3), "tokens_per_s": round(tps, 1),
                      "mfu": None if mfu is None else round(mfu, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
