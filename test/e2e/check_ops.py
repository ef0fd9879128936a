#!/usr/bin/python3
"""Checks a --profile-ops run's outputs (llmc/profile.h) against each other and the contract.

    check_ops.py REPORT.json OUTDIR LOG N PEAK_FLOPS PEAK_BYTES OP... [mover:NAME...]

REPORT.json the run's --report, OUTDIR its -o, LOG its output, N the --profile-ops steps,
PEAK_FLOPS and PEAK_BYTES the device's rates the floors must come from (0: not known), OP...
names that must be rows; mover:NAME, the ZeRO engine's movers that must be on the timeline
(on its tracks, 2 and up, inside the profiled steps) and in the movers' table; without any,
the timeline must have none. Prints one PASS or FAIL line per check, and "P F" last."""
import json
import sys

report, outdir, log, n, peak_f, peak_b = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
want = [a for a in sys.argv[7:] if not a.startswith("mover:")]
movers = [a[len("mover:"):] for a in sys.argv[7:] if a.startswith("mover:")]
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
check(f"ops over {n} profiled step" in text and "(no op)" in text, "the table printed")
t = json.load(open(f"{outdir}/ops_trace.json"))
ev = t["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M"}
spans = [e for e in ev if e["ph"] == "X"]
compute = [e for e in spans if e["tid"] == 1]
calls = sum(x["calls_per_step"] for x in rows[:-1]) * n
check({0, 1} <= set(tracks) and len([e for e in spans if e["tid"] == 0 and e["name"] == "step"]) == n
      and abs(len(compute) - calls) < 1e-6 and all(e["ts"] >= 0 and e["dur"] >= 0 for e in spans),
      f"the timeline: tracks {sorted(tracks.values())}, {n} steps on the host's, {len(compute)} ops on the other")
# the engine's movers: on tracks of their own, inside the profiled steps (the GPU's events
# and the host's clock line up to well under a millisecond), named, in the table
moved = [e for e in spans if e["tid"] >= 2]
steps_end = max(e["ts"] + e["dur"] for e in spans if e["tid"] == 0) if spans else 0.0
if movers:
    check(all(any(e["name"] == m for e in moved) for m in movers) and all(e["tid"] in tracks for e in moved)
          and all(e["ts"] >= 0 and e["ts"] + e["dur"] <= steps_end + 1e3 and "unit" in e["args"] for e in moved),
          f"the movers' timeline: {len(moved)} spans on {sorted(tracks[t] for t in {e['tid'] for e in moved})}, "
          f"{', '.join(movers)} among them")
    table = text[text.find("the ZeRO engine's movers"):] if "the ZeRO engine's movers" in text else ""
    check(all(any(l.split()[:len(m.split())] == m.split() for l in table.splitlines()[2:]) for m in movers),
          "the movers' table printed, each mover a row")
else:
    check(not moved and set(tracks) == {0, 1}, f"no mover on the timeline ({len(moved)} spans)")
print(ok, bad)
