#!/usr/bin/env python3
"""Plots one or more runs' logs, as llm.c's vislog notebook shows them.

    usage: scripts/plot_log.py OUT.png DIR [DIR ...]      (Debian's python3-matplotlib)

Each DIR is a run's -o directory: its main.log (llm.c's lines: "s:N trl:X lr:Y norm:Z",
"s:N tel:X", "s:N eval:X") and, when there, main.jsonl (a JSON line per step: "tokens" gives
the tokens axis; without it the tokens panel says so). Six panels, the runs overlaid, each
in its colour and named by its directory: train and validation loss against steps; the
validation loss alone; HellaSwag accuracy; the learning rate; the gradient norm; train and
validation loss against tokens. A line cut short (a run killed while writing it) is passed
over with a warning; a directory without main.log, or a log without a step, is an error
naming it. Prints what each panel holds.
"""
import json
import os
import re
import sys

LINE = re.compile(r"s:(\d+) (trl|tel|eval):(\S+)(?: lr:(\S+) norm:(\S+))?$")


def fail(msg):
    print(f"plot_log: {msg}", file=sys.stderr)
    sys.exit(1)


def read_run(d):
    """the run in directory d: {"trl": [(step, loss)], "tel", "eval", "lr", "norm", "tokens": {step: n}}"""
    log = os.path.join(d, "main.log")
    if not os.path.isdir(d):
        fail(f"{d} is not a directory (give the -o directories of runs)")
    if not os.path.isfile(log):
        fail(f"{d} has no main.log (is it the -o directory of a run?)")
    run = {"trl": [], "tel": [], "eval": [], "lr": [], "norm": [], "tokens": {}}
    with open(log, errors="replace") as f:
        lines = f.read().split("\n")
    for i, text in enumerate(lines, 1):
        if text == "":
            continue
        m = LINE.match(text)
        try:
            if m is None:
                raise ValueError
            step, kind, value = int(m.group(1)), m.group(2), float(m.group(3))
            run[kind].append((step, value))
            if kind == "trl" and m.group(4) is not None:
                run["lr"].append((step, float(m.group(4))))
                run["norm"].append((step, float(m.group(5))))
        except ValueError:
            print(f"plot_log: warning: {log} line {i} is not one of main.log's ({text[:60]!r}; a run killed "
                  f"while writing it?): passed over", file=sys.stderr)
    if not run["trl"] and not run["tel"]:
        fail(f"{log} holds no step (no 's:N trl:' or 's:N tel:' line)")
    jl = os.path.join(d, "main.jsonl")
    if os.path.isfile(jl):
        with open(jl, errors="replace") as f:
            for i, text in enumerate(f, 1):
                try:
                    s = json.loads(text)
                    if "tensors" in s:  # --log-tensors' line of the step (docs/FORMATS.md)
                        continue
                    run["tokens"][int(s["step"])] = float(s["tokens"])
                except (ValueError, KeyError, TypeError):
                    print(f"plot_log: warning: {jl} line {i} is not a step's JSON (cut short?): passed over",
                          file=sys.stderr)
    return run


def tokens_of(run, step):
    """tokens seen after `step` steps (a validation at step s saw s steps' tokens), or None"""
    t = run["tokens"]
    if step == 0:
        return 0.0
    if step - 1 in t:
        return t[step - 1]
    if t:  # a step past the JSON lines: the tokens per step of the last one
        last = max(t)
        return t[last] / (last + 1) * step
    return None


def main():
    if len(sys.argv) < 3:
        fail("usage: scripts/plot_log.py OUT.png DIR [DIR ...]")
    out, dirs = sys.argv[1], sys.argv[2:]
    if not out.endswith(".png"):
        fail(f"{out}: the output is a PNG file (OUT.png)")
    if os.path.abspath(out) in {os.path.abspath(os.path.join(d, n)) for d in dirs for n in ("main.log", "main.jsonl")}:
        fail(f"refusing to write {out}: it is one of the logs read")
    runs = [(os.path.basename(os.path.normpath(d)) or d, read_run(d)) for d in dirs]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed here (Debian's python3-matplotlib: scripts/install_deps.sh)")

    fig, axes = plt.subplots(2, 3, figsize=(18, 9))
    panels = [
        (axes[0][0], "loss against steps", "step", [("trl", "train"), ("tel", "val")], False),
        (axes[0][1], "validation loss", "step", [("tel", "val")], False),
        (axes[0][2], "HellaSwag accuracy", "step", [("eval", "HellaSwag")], False),
        (axes[1][0], "learning rate", "step", [("lr", "lr")], False),
        (axes[1][1], "gradient norm", "step", [("norm", "norm")], False),
        (axes[1][2], "loss against tokens", "tokens", [("trl", "train"), ("tel", "val")], True),
    ]
    for ax, title, xlabel, series, by_tokens in panels:
        drawn = 0
        for i, (name, run) in enumerate(runs):
            colour = f"C{i % 10}"
            for j, (key, label) in enumerate(series):
                pts = run[key]
                if by_tokens:
                    pts = [(tokens_of(run, s), v) for s, v in pts]
                    pts = [(x, v) for x, v in pts if x is not None]
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colour, linestyle="-" if j == 0 else "--",
                        marker="" if len(pts) > 1 else "o", label=f"{name} {label}" if len(series) > 1 else name)
                drawn += 1
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        if drawn:
            ax.legend(fontsize="small")
        else:
            why = "no HellaSwag lines (-h 1)" if title.startswith("HellaSwag") else \
                  "no main.jsonl with tokens" if by_tokens else "nothing logged"
            ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
        print(f"plot_log: {title}: {drawn} curve{'s' if drawn != 1 else ''}")
    fig.tight_layout()
    tmp = out + ".tmp.png"
    fig.savefig(tmp, dpi=60)
    os.replace(tmp, out)
    print(f"plot_log: wrote {out} ({len(runs)} run{'s' if len(runs) != 1 else ''})")


if __name__ == "__main__":
    main()
