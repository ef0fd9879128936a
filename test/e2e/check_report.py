#!/usr/bin/python3
"""Checks the steps of a trainer --report JSON against a PyTorch reference (ref.bin).

    check_report.py REF.bin REPORT.json N NAME

The first N steps' loss and grad norm must match the reference within
tol = max(10 d, 16 * 2^-24 * |ref|), d being the measured PyTorch float32-vs-float64
discrepancy of that quantity (stored in ref.bin): see test/e2e/test_reference.sh for why.
Prints one line per check and, last, "P F" (passed, failed)."""
import json
import sys

import numpy as np

ref_path, report_path, n, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# ref.bin layout: see test/e2e/ref_gpt2.py
with open(ref_path, "rb") as f:
    buf = f.read()
h = np.frombuffer(buf, dtype="<i4", count=256)
B, T, V, Vp, L, NH, C, maxT, nsteps, nparams, nt = (int(x) for x in h[2:13])
off = 1024 + 8 * 8 + 2 * 4 * B * T + 8 * B * T * Vp + 8 + 8 * nparams
d = lambda k: np.frombuffer(buf, dtype="<f8", count=k, offset=off)
step_loss = d(nsteps); off += 8 * nsteps
step_norm = d(nsteps); off += 8 * nsteps
off += 16 + 8 * nt
err_loss = d(nsteps); off += 8 * nsteps
err_norm = d(nsteps)


def tol(dq, ref):  # as test/e2e/test_gpt2.c: max(10 d, 16 fp32 ulps-of-roundoff of |ref|)
    return max(10.0 * dq, 16.0 * 2.0 ** -24 * abs(ref))


ok = bad = 0


def check(name, err, t):
    global ok, bad
    good = err <= t
    print("%-34s max abs err %.3e  tol %.3e  %s" % (name, err, t, "OK" if good else "FAIL"))
    if good:
        ok += 1
    else:
        bad += 1


try:
    steps = json.load(open(report_path))["steps"]
except Exception as e:
    print("cannot read %s: %s" % (report_path, e))
    steps = []
check("%s: steps in report" % what, abs(len(steps) - n), 0)
for i in range(min(n, len(steps))):
    s = steps[i]
    check("%s: step %d index" % (what, i), abs(s["step"] - i), 0)
    check("%s: step %d loss" % (what, i), abs(s["loss"] - step_loss[i]), tol(err_loss[i], step_loss[i]))
    check("%s: step %d grad norm" % (what, i), abs(s["grad_norm"] - step_norm[i]), tol(err_norm[i], step_norm[i]))
print(ok, bad)
