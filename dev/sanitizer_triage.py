#!/usr/bin/env python3
"""Sorts a compute-sanitizer log's reports into ours and the libraries' own.

    dev/sanitizer_triage.py LOG      prints {"ours": N, "library": M, "first_ours": "...",
                                     "first_library": "..."} as one JSON line

Why: on the first H100 run (2026-11-26, NCCL 2.28.3, cuBLAS 13.1) both tools reported
errors that are not this program's, and the tool's own filters cannot be checked without
a GPU (compute-sanitizer is not installed on the build machines):
  - memcheck: "Program hit cudaErrorNoKernelImageForDevice ... on CUDA API call to
    cudaFuncGetAttributes" inside ncclCommInitRank. NCCL probes its kernels and handles the
    error itself; a report whose first caller past libcuda is a library (NCCL, cuBLAS,
    cudart) is the library's. API errors from our own calls are caught by our checked
    wrappers anyway, and appear here with one of our frames first.
  - racecheck: hazards inside cuBLAS's Hopper kernels (nvjet_*, sm90_xmma_*, cutlass_*),
    whose warp-specialised pipelines synchronise through mbarriers and the tensor memory
    accelerator, which racecheck does not model. A race is the library's when both of
    its accesses are in such a kernel.
Every other report (an invalid access in any kernel, cuBLAS's included, since bad
arguments are ours; a race in one of our kernels; a leak) counts as ours.
"""
import json
import re
import sys

LIBRARY_KERNEL = re.compile(r"^(nvjet_|sm\d+_xmma_|cutlass_|.*gemm)", re.I)
LIBRARY_OBJECT = re.compile(r" in (libnccl|libcublas|libcublasLt|libcudart)\.so")
RACE = re.compile(r"Race reported between \w+ access at (\S+?)\+0x[0-9a-f]+")
RACE2 = re.compile(r"and \w+ access at (\S+?)\+0x[0-9a-f]+")


def reports(lines):
    """Splits the '========= ' lines into reports: each starts at a line with text right
    after the prefix (not indented) and ends at the next empty '========= ' line."""
    cur = None
    for line in lines:
        if not line.startswith("========="):
            continue
        body = line[len("========="):]
        if not body.strip():
            if cur:
                yield cur
            cur = None
        elif body.startswith(" ") and not body.startswith("  "):
            text = body.strip()
            if text.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY",
                                "LEAK SUMMARY", "Target application returned")):
                continue
            if cur:
                yield cur
            cur = [text]
        elif cur is not None:
            cur.append(body.strip())
    if cur:
        yield cur


def is_library(rep):
    head = rep[0]
    m = RACE.search(head)
    if m:
        second = next((RACE2.search(x) for x in rep[1:] if RACE2.search(x)), None)
        kernels = [m.group(1)] + ([second.group(1)] if second else [])
        return all(LIBRARY_KERNEL.match(k) for k in kernels)
    if "on CUDA API call" in head:
        frames = [x for x in rep if x.startswith("Host Frame")]
        past_driver = [x for x in frames if "libcuda.so" not in x]
        return bool(past_driver) and bool(LIBRARY_OBJECT.search(past_driver[0]))
    return False


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: dev/sanitizer_triage.py LOG")
    with open(sys.argv[1], errors="replace") as f:
        reps = list(reports(f.read().splitlines()))
    ours = [r for r in reps if not is_library(r)]
    lib = [r for r in reps if is_library(r)]
    print(json.dumps({"ours": len(ours), "library": len(lib),
                      "first_ours": ours[0][0] if ours else "",
                      "first_library": lib[0][0] if lib else ""}))


if __name__ == "__main__":
    main()
