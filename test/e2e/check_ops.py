#!/usr/bin/python3
"""Checks a --profile-ops run's outputs (llmc/profile.h) against each other and the contract.

    check_ops.py REPORT.json OUTDIR LOG N PEAK_FLOPS PEAK_BYTES OP...

REPORT.json the run's --report, OUTDIR its -o, LOG its output, N the --profile-ops steps,
PEAK_FLOPS and PEAK_BYTES the device's rates the floors must come from (0: not known), OP...
names that must be rows. Prints one PASS or FAIL line per check, and "P F" last."""
import json
import sys

report, outdir, log, n, peak_f, peak_b = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
want = sys.argv[7:]
r = json.load(open(report))
ok = bad = 0


def check(cond, what):
    global ok, bad
    print(("PASS " if cond else "FAIL ") + what)
    ok, bad = ok + bool(cond), bad + (not cond)


rows = r.get("ops", [])
names = [x["name"] for x in rows]
check(rows and names[-1] == "(no op)" and all(w in names for w in want),
      f"the report's ops: {len(rows)} rows, {', '.join(want)} among them, the step's rest last")
check(abs(sum(x["share"] for x in rows) - 1.0) < 1e-6, f"the shares sum to the step ({sum(x['share'] for x in rows):.9f})")
ms = [x["ms_per_step"] for x in rows[:-1]]
check(ms == sorted(ms, reverse=True), "the longest op first")
steps = r["steps"]
check([bool(s.get("profiled")) for s in steps] == [False] * (len(steps) - n) + [True] * n and r.get("ops_steps") == n,
      f"the last {n} steps marked profiled, the others not")
# the floors: a call's FLOPs at the peak or its bytes at the rate, the larger (0 where neither is known)
def floor(x):
    ff = x["flops_per_call"] / peak_f if peak_f > 0 else 0.0
    fb = x["bytes_per_call"] / peak_b if peak_b > 0 else 0.0
    return 1e3 * max(ff, fb)
check(all(abs(x["floor_ms_per_call"] - floor(x)) <= 1e-9 * max(1.0, floor(x)) for x in rows if x["name"] != "(no op)"),
      f"every floor is the larger of its FLOPs at {peak_f:g} FLOP/s and its bytes at {peak_b:g} B/s")
lines = [json.loads(l) for l in open(f"{outdir}/main.jsonl") if '"op"' in l]
check([x["op"] for x in lines] == names and all(abs(a["ms"] - b["ms_per_step"]) < 1e-5 for a, b in zip(lines, rows)),
      f"main.jsonl's {len(lines)} op lines are the report's rows")
text = open(log).read()
check(f"ops over {n} profiled steps" in text and "(no op)" in text, "the table printed")
t = json.load(open(f"{outdir}/ops_trace.json"))
ev = t["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M"}
spans = [e for e in ev if e["ph"] == "X"]
compute = [e for e in spans if e["tid"] == 1]
calls = sum(x["calls_per_step"] for x in rows[:-1]) * n
check(set(tracks) == {0, 1} and len([e for e in spans if e["tid"] == 0 and e["name"] == "step"]) == n
      and abs(len(compute) - calls) < 1e-6 and all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans),
      f"the timeline: tracks {sorted(tracks.values())}, {n} steps on the host's, {len(compute)} ops on the other")
print(ok, bad)
