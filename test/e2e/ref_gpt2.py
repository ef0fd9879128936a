#!/usr/bin/python3
"""
Reference GPT-2 in PyTorch (float64) for the C trainer's tests.

    /usr/bin/python3 test/e2e/ref_gpt2.py OUTDIR
    python3 test/e2e/ref_gpt2.py --inputs-only OUTDIR [L]   # model.bin and train.bin only, stdlib only
                                                            # (L layers: a deeper model of the same widths)

Builds a small random GPT-2 (L=2, NH=4, C=64, maxT=64, V=211, Vp=256: odd V on purpose,
so the padded vocabulary columns V..Vp-1 are exercised), computes on one batch (B=8,
T=64) the logits, the loss and the gradient of every parameter, then 10 AdamW steps on
that same batch, and writes:

  OUTDIR/model.bin  llm.c model file, version 3 (fp32)
  OUTDIR/train.bin  llm.c token shard (magic 20240520, version 1), 4*B*T+1 random tokens < V
  OUTDIR/ref.bin    the expected values, format below

The model is the trainer's: token + position embedding, pre-LN blocks (causal multi-head
attention, GELU tanh MLP), final LayerNorm (eps 1e-5), classifier tied to wte whose
softmax / cross-entropy only see the real V columns (the padded columns are computed as
logits but take no part in the loss, so rows V..Vp-1 of wte get no gradient), loss = mean
cross-entropy over the B*T positions. Every tensor is random, biases, LayerNorm gains and
the padding rows of wte included, so that every path of forward and backward carries a
non-trivial value. The parameters are drawn in float64, rounded to float32 (what model.bin
holds) and the float64 reference starts from exactly those rounded values.

Training: AdamW (torch.optim.AdamW: lr 1e-3 constant, betas (0.9, 0.95), eps 1e-8,
weight decay 0.1 on wte, wpe, qkvw, attprojw, fcw, fcprojw only), global-norm gradient
clipping at 1.0 done by hand as the trainer does it (norm = sqrt(sum g^2); if norm > 1:
g *= 1/norm; no epsilon, unlike torch.nn.utils.clip_grad_norm_). The loss of each step is
the loss of the forward BEFORE that step's update, as the trainer logs it.

Tolerance yardstick: the whole computation is repeated in float32 in PyTorch (same fp32
initial parameters, same batch) and the max abs difference fp32-vs-fp64 of every quantity
is stored in ref.bin and printed. That is how far a correct fp32 implementation lands from
the float64 truth; the C test accepts a stated multiple of it (see test/e2e/test_gpt2.c).

ref.bin (little-endian):
  int32   header[256]  [0] 20240917 magic, [1] 1 version, [2] B, [3] T, [4] V, [5] Vp,
                       [6] L, [7] NH, [8] C, [9] maxT, [10] nsteps, [11] num_params,
                       [12] num_tensors = 4 + 12 L; the rest 0
  float64 hyper[8]     lr, weight_decay, grad_clip, beta1, beta2, eps, 0, 0
  int32   inputs[B*T]  (B,T) row-major
  int32   targets[B*T] (B,T)
  float64 logits[B*T*Vp]        (B,T,Vp): ALL Vp columns, the padded ones included
                                (they are lnf @ wte[V..Vp-1]^T, computed but unused)
  float64 loss
  float64 grads[num_params]     gradient of loss, llm.c FILE order (kind-major: all wte,
                                all wpe, ln1w of layer 0..L-1, ...); tensor shapes as in
                                llmc/gpt2.h; rows V..Vp-1 of dwte are exactly 0
  float64 step_loss[nsteps]     loss before the update of step 0..nsteps-1
  float64 step_norm[nsteps]     global grad norm (before clipping) of each step
  -- fp32-vs-fp64 discrepancy (max abs difference, PyTorch float32 minus float64) --
  float64 err_logits, err_loss
  float64 err_grads[num_tensors]  per tensor, file order: wte, wpe, ln1w l=0..L-1, ...
  float64 err_step_loss[nsteps], err_step_norm[nsteps]
"""
import array
import math
import os
import random
import struct
import sys

REF_MAGIC = 20240917
MODEL_MAGIC, MODEL_VERSION = 20240326, 3
SHARD_MAGIC, SHARD_VERSION = 20240520, 1

# configuration of the test model and run
L, NH, C, MAXT, V, VP = 2, 4, 64, 64, 211, 256
B, T = 8, 64
NSTEPS = 10
LR, WD, CLIP, BETA1, BETA2, EPS = 1e-3, 0.1, 1.0, 0.9, 0.95, 1e-8
SEED = 20240917

KINDS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
# the scales of random_params: the embeddings 0.1 (logits = lnf @ wte^T then have std ~
# sqrt(C) * 0.1 ~ 0.8: a loss a little above ln V), qkvw 0.125 (q.k / sqrt(hs) has std ~1:
# attention neither uniform nor one-hot), the other matrices 0.1 (pre-GELU values of order 1:
# both the linear and the curved part of GELU are used), biases 0.1, LayerNorm gains
# 1 + 0.1 N(0,1)
STD = {"wte": 0.1, "wpe": 0.1, "qkvw": 0.125, "attprojw": 0.1, "fcw": 0.1, "fcprojw": 0.1}
GAINS = ("ln1w", "ln2w", "lnfw")


def shapes():
    """per kind: the shape of the whole kind as stored in the file (block kinds lead with L)"""
    return {
        "wte": (VP, C), "wpe": (MAXT, C),
        "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


def write_inputs_only(outdir):
    """--inputs-only: model.bin and train.bin of the same shapes, scales and token range,
    drawn with Python's own generator (other values than the full run's), and no ref.bin:
    for the GPU tests that compare runs with each other where numpy or torch is missing
    (test/gpu/test_gpu_trainer.sh then skips the PyTorch comparisons by name)"""
    rng = random.Random(SEED)
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "model.bin"), "wb") as f:
        f.write(array.array("i", [MODEL_MAGIC, MODEL_VERSION, MAXT, V, L, NH, C, VP] + [0] * 248).tobytes())
        for k in KINDS:
            n = math.prod(shapes()[k])
            base = 1.0 if k in GAINS else 0.0
            scale = 0.1 if k in GAINS else STD.get(k, 0.1)
            f.write(array.array("f", (base + scale * rng.gauss(0.0, 1.0) for _ in range(n))).tobytes())
    ntok = 4 * B * T + 1
    with open(os.path.join(outdir, "train.bin"), "wb") as f:
        f.write(array.array("i", [SHARD_MAGIC, SHARD_VERSION, ntok] + [0] * 253).tobytes())
        f.write(array.array("H", (rng.randrange(V) for _ in range(ntok))).tobytes())
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--inputs-only"] and len(sys.argv) in (3, 4):
    if len(sys.argv) == 4:  # a deeper model (the memory tests: many small units)
        L = int(sys.argv[3])
    sys.exit(write_inputs_only(sys.argv[2]))  # before numpy and torch are imported

import numpy as np  # noqa: E402 (after the stdlib-only mode above)
import torch        # noqa: E402


def random_params(gen):
    """float64 numpy arrays, already rounded to float32 values, with the scales of STD"""
    out = {}
    for k, shp in shapes().items():
        x = gen.standard_normal(shp)
        if k in GAINS:
            x = 1.0 + 0.1 * x
        else:
            x = STD.get(k, 0.1) * x  # biases (and anything else): 0.1
        out[k] = x.astype(np.float32).astype(np.float64)
    return out


# ----------------------------------------------------------------------------
# the model, written out op by op


def layernorm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as torch.nn.LayerNorm
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(p, idx, targets):
    """p: dict kind -> tensor (file shapes). Returns logits (B,T,Vp) and the mean loss."""
    Bx, Tx = idx.shape
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:Tx]                                  # (B,T,C)
    causal = torch.tril(torch.ones(Tx, Tx, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]                         # (B,T,3C)
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(Bx, Tx, NH, hs).transpose(1, 2)                      # (B,NH,T,hs)
        k = k.view(Bx, Tx, NH, hs).transpose(1, 2)
        v = v.view(Bx, Tx, NH, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)               # (B,NH,T,T)
        scores = scores.masked_fill(~causal, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bx, Tx, C)                 # heads side by side
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        f = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])                    # (B,T,4C)
        x = x + f @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T                                              # (B,T,Vp), tied
    # the padded columns V..Vp-1 are not tokens: the softmax sees the first V only
    loss = torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def run(params64, idx, targets, dtype):
    """forward + backward, then NSTEPS AdamW steps from the same start. All in dtype."""
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params64.items()}
    idx_t = torch.tensor(idx, dtype=torch.long)
    tgt_t = torch.tensor(targets, dtype=torch.long)

    logits, loss = forward(p, idx_t, tgt_t)
    loss.backward()
    res = {
        "logits": logits.detach().double().numpy().copy(),
        "loss": float(loss.item()),
        "grads": {k: t.grad.detach().double().numpy().copy() for k, t in p.items()},
    }
    assert all(res["grads"]["wte"][V:].ravel() == 0.0), "padding rows of wte got a gradient"

    # training from the same initial parameters
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params64.items()}
    opt = torch.optim.AdamW([
        {"params": [p[k] for k in KINDS if k in DECAY], "weight_decay": WD},
        {"params": [p[k] for k in KINDS if k not in DECAY], "weight_decay": 0.0},
    ], lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses, norms = [], []
    for _ in range(NSTEPS):
        opt.zero_grad(set_to_none=False)
        _, loss = forward(p, idx_t, tgt_t)
        loss.backward()
        # global-norm clipping as the trainer does it: no epsilon in the scale
        norm = torch.sqrt(sum((t.grad.double() ** 2).sum() for t in p.values())).item()
        if norm > CLIP:
            for t in p.values():
                t.grad.mul_(CLIP / norm)
        opt.step()
        losses.append(float(loss.item()))
        norms.append(norm)
    res["step_loss"] = np.array(losses)
    res["step_norm"] = np.array(norms)
    return res


# ----------------------------------------------------------------------------
# files


def write_model(path, params):
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [MODEL_MAGIC, MODEL_VERSION, MAXT, V, L, NH, C, VP]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for k in KINDS:  # file order: each kind for all layers
            f.write(params[k].astype("<f4").tobytes())


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def flat_file_order(d):
    return np.concatenate([d[k].ravel() for k in KINDS])


def per_tensor(d):
    """list of (name, array) in file order: block kinds split per layer"""
    out = []
    for k in KINDS:
        if d[k].ndim >= 2 and k not in ("wte", "wpe"):
            for l in range(L):
                out.append(("%s[%d]" % (k, l), d[k][l]))
        else:
            out.append((k, d[k]))
    return out


def main():
    global B
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and not sys.argv[2].isdigit()):
        print("usage: %s OUTDIR [B]   (B: sequences in the batch, default %d)" % (sys.argv[0], B), file=sys.stderr)
        return 2
    outdir = sys.argv[1]
    if len(sys.argv) == 3:
        B = int(sys.argv[2])  # the ZeRO tests use 24, which splits over 1, 2, 3 and 4 ranks
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)  # tiny model; the machine is shared
    gen = np.random.default_rng(SEED)
    params = random_params(gen)
    ntok = 4 * B * T + 1
    tokens = gen.integers(0, V, size=ntok)
    # the trainer with -a 1 reuses the first batch: inputs tokens[0:BT], targets tokens[1:BT+1]
    inputs = tokens[:B * T].reshape(B, T)
    targets = tokens[1:B * T + 1].reshape(B, T)

    r64 = run(params, inputs, targets, torch.float64)
    r32 = run(params, inputs, targets, torch.float32)

    write_model(os.path.join(outdir, "model.bin"), params)
    write_shard(os.path.join(outdir, "train.bin"), tokens)

    num_params = sum(v.size for v in params.values())
    nt = 4 + 12 * L
    err_logits = float(np.abs(r32["logits"] - r64["logits"]).max())
    err_loss = abs(r32["loss"] - r64["loss"])
    g64, g32 = per_tensor(r64["grads"]), per_tensor(r32["grads"])
    err_grads = [float(np.abs(a - b).max()) for (_, a), (_, b) in zip(g32, g64)]
    err_step_loss = np.abs(r32["step_loss"] - r64["step_loss"])
    err_step_norm = np.abs(r32["step_norm"] - r64["step_norm"])
    assert len(err_grads) == nt

    header = np.zeros(256, dtype=np.int32)
    header[:13] = [REF_MAGIC, 1, B, T, V, VP, L, NH, C, MAXT, NSTEPS, num_params, nt]
    hyper = np.array([LR, WD, CLIP, BETA1, BETA2, EPS, 0.0, 0.0])
    with open(os.path.join(outdir, "ref.bin"), "wb") as f:
        f.write(header.astype("<i4").tobytes())
        f.write(hyper.astype("<f8").tobytes())
        f.write(inputs.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        f.write(r64["logits"].astype("<f8").tobytes())
        f.write(np.array([r64["loss"]]).astype("<f8").tobytes())
        f.write(flat_file_order(r64["grads"]).astype("<f8").tobytes())
        f.write(r64["step_loss"].astype("<f8").tobytes())
        f.write(r64["step_norm"].astype("<f8").tobytes())
        f.write(np.array([err_logits, err_loss]).astype("<f8").tobytes())
        f.write(np.array(err_grads).astype("<f8").tobytes())
        f.write(err_step_loss.astype("<f8").tobytes())
        f.write(err_step_norm.astype("<f8").tobytes())

    # the evidence for the tolerances: how far PyTorch float32 lands from float64
    print("reference: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d B=%d T=%d, %d parameters"
          % (L, NH, C, MAXT, V, VP, B, T, num_params))
    print("%-14s %14s %14s %10s" % ("quantity", "max|fp64|", "fp32-fp64", "relative"))
    def row(name, ref, err):
        m = float(np.abs(ref).max())
        print("%-14s %14.6e %14.6e %10.2e" % (name, m, err, err / m if m > 0 else 0.0))
    row("logits", r64["logits"], err_logits)
    row("loss", r64["loss"], err_loss)
    for (name, a), e in zip(g64, err_grads):
        row("d" + name, a[:V] if name == "wte" else a, e)
    for i in range(NSTEPS):
        row("step%d loss" % i, r64["step_loss"][i], err_step_loss[i])
    for i in range(NSTEPS):
        row("step%d norm" % i, r64["step_norm"][i], err_step_norm[i])
    print("losses fp64:", " ".join("%.6f" % x for x in r64["step_loss"]))
    print("norms  fp64:", " ".join("%.4f" % x for x in r64["step_norm"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
