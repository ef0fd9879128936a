#!/usr/bin/python3
"""
PyTorch reference for the trainers' HellaSwag scores (-h 1).

    /usr/bin/python3 test/e2e/ref_hellaswag.py MODEL.bin EVAL.bin OUT.txt

MODEL.bin: an llm.c model file in fp32 (version 3), as the trainers' checkpoints write it.
EVAL.bin: llm.c's eval file (magic 20240522; docs/FORMATS.md), read here on its own.

Each completion is scored the way llm.c's hellaswag.py defines it, with no batching or
padding: the context and the completion as one sequence, the model's cross-entropy at
every position whose next token is one of the completion's, their mean. The lowest mean
is the prediction. The forward is ref_gpt2.py's (the trainers' model written op by op),
run in float64 and again in float32, so that the float32-vs-float64 difference of every
score is there to size a tolerance by.

OUT.txt, one line per example: index, label, prediction (float64), then per completion
its float64 score and |float32 - float64|.
"""
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_gpt2  # noqa: E402  (forward and the tensor shapes, from the module's globals)


def read_model(path):
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        if h[0] != ref_gpt2.MODEL_MAGIC or h[1] != 3:
            raise SystemExit("%s: not an fp32 llm.c model file (magic %d, version %d)" % (path, h[0], h[1]))
        maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
        # ref_gpt2's forward reads the sizes from its module's globals: set them to this model's
        ref_gpt2.MAXT, ref_gpt2.V, ref_gpt2.L, ref_gpt2.NH, ref_gpt2.C, ref_gpt2.VP = maxT, V, L, NH, C, Vp
        params = {}
        for k, shape in ref_gpt2.shapes().items():
            n = int(np.prod(shape))
            params[k] = np.frombuffer(f.read(4 * n), dtype="<f4").reshape(shape).astype(np.float64)
    return params


def read_eval(path):
    data = open(path, "rb").read()
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240522 and h[1] == 1, "not an eval file"
    w = np.frombuffer(data[1024:], dtype="<u2")
    examples, at = [], 0
    for i in range(h[2]):
        assert w[at] == 65535 and w[at + 2] == i
        end = at + w[at + 1] // 2
        label, k, n = int(w[at + 3]), int(w[at + 4]), int(w[at + 5])
        ctx = [int(x) for x in w[at + 6:at + 6 + n]]
        p, endings = at + 6 + n, []
        for _ in range(k):
            m = int(w[p])
            endings.append([int(x) for x in w[p + 1:p + 1 + m]])
            p += 1 + m
        assert p == end
        examples.append((label, ctx, endings))
        at = end
    return examples


def score(params, dtype, ctx, ending):
    p = {k: torch.tensor(v, dtype=dtype) for k, v in params.items()}
    seq = torch.tensor([ctx + ending], dtype=torch.long)
    inputs, targets = seq[:, :-1], seq[:, 1:]
    logits, _ = ref_gpt2.forward(p, inputs, targets)  # (1, n-1, Vp)
    losses = torch.nn.functional.cross_entropy(logits[0, :, :ref_gpt2.V], targets[0], reduction="none")
    return float(losses[len(ctx) - 1:].mean())  # position len(ctx)-1 predicts the ending's first token


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    params = read_model(sys.argv[1])
    with torch.no_grad(), open(sys.argv[3], "w") as out:
        for i, (label, ctx, endings) in enumerate(read_eval(sys.argv[2])):
            s64 = [score(params, torch.float64, ctx, e) for e in endings]
            s32 = [score(params, torch.float32, ctx, e) for e in endings]
            pred = min(range(len(s64)), key=lambda j: (s64[j], j))
            cols = " ".join("%.12g %.3g" % (a, abs(b - a)) for a, b in zip(s64, s32))
            out.write("%d %d %d %s\n" % (i, label, pred, cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
