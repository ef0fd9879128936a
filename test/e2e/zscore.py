"""llm.c's outlier detector, the tests' reference for -sl and -sg: each step's z-score of
REPORT's KEY ("loss" or "grad_norm") against the last 128 steps' values, its own included
(NaN in the first 127), computed in two passes here.

    zscore.py REPORT KEY        one z-score per line
    zscore.py REPORT KEY K      one character per step: 1 passes K, 0 not, ? within 1e-4
                                of it (the trainer's limit on the norm is a float: a
                                z-score that close may go either way)
"""
import json
import math
import sys

steps = json.load(open(sys.argv[1]))["steps"]
v = [s[sys.argv[2]] for s in steps]
k = float(sys.argv[3]) if len(sys.argv) > 3 else None
out = []
for i in range(len(v)):
    z = float("nan")
    if i >= 127:
        w = v[i - 127:i + 1]
        mean = sum(w) / 128
        var = sum((x - mean) ** 2 for x in w) / 128
        z = (v[i] - mean) / math.sqrt(var) if var > 0 else 0.0
    if k is None:
        out.append(repr(z) + "\n")
    else:
        out.append("?" if abs(z - k) < 1e-4 else "1" if z > k else "0")
print("".join(out), end="" if k is None else "\n")
