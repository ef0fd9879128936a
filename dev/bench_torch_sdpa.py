#!/usr/bin/env python3
"""
PyTorch's causal attention alone, the anchor for the trainer's own: F.scaled_dot_product_attention
at one shape, forward and forward + backward, with each backend PyTorch has (flash, cuDNN,
memory-efficient), bf16:

    python3 dev/bench_torch_sdpa.py -b 64 --heads 12 -t 1024 --head-size 64 [--report r.json]

FLOPs are the causal ones (the masked half of the T x T products not counted, as a kernel
that skips it does no work there): forward 2 * 2 * B * NH * T^2 * hs / 2 (Q K^T and P V),
backward 2.5 times the forward (five products of that size: dV, dP, dS's softmax aside, dQ,
dK, and the recomputed Q K^T), the convention of the FlashAttention papers. Each time is the
median of --iters runs after --warmup, timed with CUDA events, on fresh random inputs (one
set per run, rotated: no result comes from the cache of the one before).

Prints a line per backend, `sdpa backend=flash fwd_ms=... bwd_ms=... fwd_tflops=...
bwd_tflops=... fwd_bwd_tflops=...` (or `sdpa backend=NAME unavailable: why`), the last line
`torch_sdpa: best_fwd_bwd_tflops=... backend=...`. Without a CUDA device it stops with a
message; --device cpu times a small shape in fp32 (a smoke test; where this PyTorch has no
scaled_dot_product_attention, the explicit softmax formula, backend "eager").
"""
import argparse
import json
import math
import statistics
import sys
import time


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--batch", type=int, default=64)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("-t", "--seq-len", type=int, default=1024)
    ap.add_argument("--head-size", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--report", default=None, help="JSON: the shape and each backend's figures")
    a = ap.parse_args()
    for name in ("batch", "heads", "seq_len", "head_size", "iters"):
        if getattr(a, name) <= 0:
            die(f"--{name.replace('_', '-')} must be positive")
    if a.warmup < 0:
        die("--warmup must be >= 0")
    return a


def causal_flops(a):
    """(forward, backward) FLOPs of one causal attention call at the shape"""
    fwd = 2.0 * 2.0 * a.batch * a.heads * a.seq_len * a.seq_len * a.head_size / 2.0
    return fwd, 2.5 * fwd


def main():
    a = parse_args()
    try:
        import torch
    except ImportError:
        die("PyTorch is not installed for this python")
    F = torch.nn.functional
    if a.device == "cuda" and not torch.cuda.is_available():
        die(f"no CUDA device (torch {torch.__version__}); --device cpu runs a smoke test")
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def eager(q, k, v):  # the formula, where this PyTorch has no sdpa
        T = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    backends = []  # (name, context factory or None)
    if sdpa is not None:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            for name, b in (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION")):
                if hasattr(SDPBackend, b):
                    backends.append((name, lambda b=b: sdpa_kernel(getattr(SDPBackend, b))))
        except ImportError:  # PyTorch 2.0-2.2: whichever it picks
            backends.append(("default", None))
    else:
        backends.append(("eager", None))

    shape = (a.batch, a.heads, a.seq_len, a.head_size)
    g = torch.Generator(device="cpu").manual_seed(1234)
    sets = [[torch.randn(shape, generator=g, dtype=torch.float32).to(dev, dtype).requires_grad_(True) for _ in range(3)]
            for _ in range(3)]
    dout = torch.randn(shape, generator=g, dtype=torch.float32).to(dev, dtype)
    fwd_flops, bwd_flops = causal_flops(a)
    name = torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}: causal attention B={a.batch} NH={a.heads} T={a.seq_len} hs={a.head_size} "
          f"{str(dtype).replace('torch.', '')}, fwd {fwd_flops / 1e9:.1f} GFLOP, bwd {bwd_flops / 1e9:.1f} GFLOP")

    def timed(fn):
        """median ms of fn over --iters after --warmup"""
        out = []
        for i in range(a.warmup + a.iters):
            q, k, v = sets[i % len(sets)]
            if a.device == "cuda":
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn(q, k, v)
                e.record()
                e.synchronize()
                ms = s.elapsed_time(e)
            else:
                t0 = time.perf_counter()
                fn(q, k, v)
                ms = (time.perf_counter() - t0) * 1e3
            if i >= a.warmup:
                out.append(ms)
        return statistics.median(out)

    results = []
    for bname, ctx in backends:
        attend = (lambda q, k, v: sdpa(q, k, v, is_causal=True)) if sdpa is not None else eager

        def fwd(q, k, v):
            with torch.no_grad():
                attend(q, k, v)

        def fwd_bwd(q, k, v):  # (autograd.grad: no .grad accumulated, which would add its own kernels)
            torch.autograd.grad(attend(q, k, v), (q, k, v), dout)

        try:
            if ctx is not None:
                with ctx():
                    f_ms, fb_ms = timed(fwd), timed(fwd_bwd)
            else:
                f_ms, fb_ms = timed(fwd), timed(fwd_bwd)
        except RuntimeError as e:  # a backend that does not take this shape, dtype or GPU
            why = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
            print(f"sdpa backend={bname} unavailable: {why}")
            results.append({"backend": bname, "available": False, "why": why})
            continue
        b_ms = max(fb_ms - f_ms, 1e-6)
        r = {"backend": bname, "available": True, "fwd_ms": f_ms, "bwd_ms": b_ms, "fwd_bwd_ms": fb_ms,
             "fwd_tflops": fwd_flops / (f_ms * 1e-3) / 1e12, "bwd_tflops": bwd_flops / (b_ms * 1e-3) / 1e12,
             "fwd_bwd_tflops": (fwd_flops + bwd_flops) / (fb_ms * 1e-3) / 1e12}
        results.append(r)
        print(f"sdpa backend={bname} fwd_ms={f_ms:.3f} bwd_ms={b_ms:.3f} fwd_tflops={r['fwd_tflops']:.1f} "
              f"bwd_tflops={r['bwd_tflops']:.1f} fwd_bwd_tflops={r['fwd_bwd_tflops']:.1f}", flush=True)

    ok = [r for r in results if r["available"]]
    if a.report:
        json.dump({"shape": {"B": a.batch, "NH": a.heads, "T": a.seq_len, "hs": a.head_size}, "device": name,
                   "torch": torch.__version__, "dtype": str(dtype), "fwd_flops": fwd_flops, "bwd_flops": bwd_flops,
                   "backends": results}, open(a.report, "w"), indent=1)
    if not ok:
        die("no attention backend ran at this shape")
    best = max(ok, key=lambda r: r["fwd_bwd_tflops"])
    print(f"torch_sdpa: best_fwd_bwd_tflops={best['fwd_bwd_tflops']:.1f} backend={best['backend']} "
          f"fwd_ms={best['fwd_ms']:.3f} bwd_ms={best['bwd_ms']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
