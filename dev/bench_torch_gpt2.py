#!/usr/bin/env python3
"""
A PyTorch GPT-2 of a given shape, trained for a few steps on random tokens to measure
tokens/s and MFU next to ./train_gpt2_zero3 (scripts/bench_gpu.sh runs both in one go).

The model is GPT-2 as the trainer builds it: learned token and position embeddings,
pre-norm blocks (layernorm, causal self-attention, residual, layernorm, 4C MLP with
tanh GELU, residual), a final layernorm, and the classifier tied to the token embedding,
over the vocabulary padded to 50304 columns (the loss uses the real 50257). Biases
everywhere, as in GPT-2. Training is what a PyTorch user would run for speed: bf16
autocast with fp32 parameters, torch.compile, F.scaled_dot_product_attention (flash
attention), fused AdamW (betas 0.9/0.95, eps 1e-8, weight decay on matrices and
embeddings), gradient clipping at 1.0.

MFU uses the trainer's formula (train_gpt2_zero3.cu): FLOPs per token =
6 * (12 L C^2 + Vp C) + 12 L T C, over the peak dense bf16 TFLOP/s of the device, from
the same table (H100 SXM / H200 989, H100 PCIe 756, A100 312; other devices: n/a).

    python3 dev/bench_torch_gpt2.py --layers 12 --heads 12 --channels 768 -b 64 -t 1024
    python3 dev/bench_torch_gpt2.py ... --report r.json   # the trainer's --report step fields

The last line printed is `torch_gpt2: tokens_per_s=... mfu=... ...`. Without a CUDA
device it stops with a message (--device cpu runs a small smoke test in fp32 instead).
"""
import argparse
import json
import math
import sys
import time


def flops_per_token(L, C, Vp, T):
    # the 12 C^2 of each block's qkv, attproj, fc and fcproj weights plus the classifier's
    # Vp C, 6 FLOPs per parameter per token (forward + backward); plus the attention's
    # Q K^T and att V: 12 L T C
    return 6.0 * (L * 12.0 * C * C + Vp * C) + 12.0 * L * T * C


def peak_bf16_tflops(name):
    # the trainer's table (peak_bf16_tflops in train_gpt2_zero3.cu)
    if "H200" in name:
        return 989.0
    if "H100" in name:
        if "PCIe" in name:
            return 756.0
        if "HBM3" in name or "SXM" in name:
            return 989.0
        return 0.0
    if "A100" in name:
        return 312.0
    return 0.0


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", "-L", type=int, default=12)
    ap.add_argument("--heads", "-H", type=int, default=12)
    ap.add_argument("--channels", "-C", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--padded-vocab", type=int, default=50304)
    ap.add_argument("--max-seq-len", type=int, default=0, help="rows of the position embedding (default: -t)")
    ap.add_argument("-b", "--batch", type=int, default=64, help="micro batch size")
    ap.add_argument("-t", "--seq-len", type=int, default=1024)
    ap.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10, help="first steps left out of the figures (compilation)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--no-compile", action="store_true", help="eager mode")
    ap.add_argument("--report", default=None, help="JSON: steps [{step, loss, ms, tokens_per_s, mfu}] and a summary")
    ap.add_argument("--print-flops", action="store_true", help="print FLOPs per token and exit")
    a = ap.parse_args()
    if a.max_seq_len == 0:
        a.max_seq_len = a.seq_len
    for name in ("layers", "heads", "channels", "vocab", "batch", "seq_len", "accum", "steps"):
        if getattr(a, name) <= 0:
            die(f"--{name.replace('_', '-')} must be positive")
    if a.channels % a.heads != 0:
        die(f"--channels {a.channels} is not a multiple of --heads {a.heads}")
    if a.padded_vocab < a.vocab or a.seq_len > a.max_seq_len:
        die("--padded-vocab must be >= --vocab and -t <= --max-seq-len")
    if not 0 <= a.warmup < a.steps:
        die(f"--warmup {a.warmup} must be in [0, --steps {a.steps})")
    return a


def build_model(torch, a):
    nn, F = torch.nn, torch.nn.functional
    L, NH, C, V, Vp = a.layers, a.heads, a.channels, a.vocab, a.padded_vocab
    hs = C // NH
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.attproj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (z.view(B, T, NH, hs).transpose(1, 2) for z in (q, k, v))
            if sdpa is not None:
                y = sdpa(q, k, v, is_causal=True)
            else:  # PyTorch < 2.0 (the CPU smoke test on Debian's 1.13)
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                y = att @ v
            x = x + self.attproj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(a.max_seq_len, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            # GPT-2's init: N(0, 0.02), the residual projections scaled by 1/sqrt(2L), zero biases
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("attproj.weight", "fcproj.weight")) else 0.02
                    nn.init.normal_(p, mean=0.0, std=std)

        def forward(self, idx, targets):
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = F.linear(self.lnf(x), self.wte.weight)  # (B, T, Vp), tied classifier
            # autocast runs cross_entropy in fp32; the loss is over the real V columns, as in the trainer
            return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))

    return GPT(), sdpa is not None


def main():
    a = parse_args()
    fpt = flops_per_token(a.layers, a.channels, a.padded_vocab, a.seq_len)
    if a.print_flops:
        print(f"flops_per_token={fpt:.0f}")
        return 0
    try:
        import torch
    except ImportError:
        die("PyTorch is not installed for this python (pip install torch)")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            die("no CUDA device: this benchmark needs an NVIDIA GPU and a CUDA build of PyTorch "
                f"(torch {torch.__version__}, CUDA {torch.version.cuda}); --device cpu runs a smoke test")
        if not a.no_compile and not hasattr(torch, "compile"):
            die(f"torch.compile needs PyTorch >= 2.0 (this is {torch.__version__}); --no-compile runs eager")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)

    model, flash = build_model(torch, a)
    model.to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = False
    if a.device == "cuda":
        try:
            opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
            fused = True
        except (TypeError, RuntimeError) as e:
            print(f"warning: fused AdamW unavailable ({e}); using the default implementation")
    if not fused:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    compiled = a.device == "cuda" and not a.no_compile
    step_fn = torch.compile(model) if compiled else model
    use_bf16 = a.device == "cuda"

    # a few batches of random tokens, on the device from the start (data loading is not measured)
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    pool = [torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=g).to(dev) for _ in range(4)]
    name = torch.cuda.get_device_name(dev) if a.device == "cuda" else "cpu"
    peak = peak_bf16_tflops(name) if a.device == "cuda" else 0.0
    tokens_per_step = a.batch * a.seq_len * a.accum
    print(f"torch {torch.__version__} on {name}: GPT-2 L={a.layers} NH={a.heads} C={a.channels} "
          f"params={nparams} B={a.batch} T={a.seq_len} accum={a.accum} bf16={int(use_bf16)} "
          f"compile={int(compiled)} fused_adamw={int(fused)} attention={'sdpa' if flash else 'eager'}")

    records = []
    for step in range(a.steps):
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for micro in range(a.accum):
            batch = pool[(step * a.accum + micro) % len(pool)]
            x, y = batch[:, :-1], batch[:, 1:]
            if use_bf16:
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = step_fn(x, y)
            else:
                loss = step_fn(x, y)
            (loss / a.accum).backward()
            loss_sum += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        loss_v = float(loss_sum) / a.accum
        tps = tokens_per_step / (ms / 1e3)
        mfu = fpt * tps / (peak * 1e12) if peak > 0 else None
        rec = {"step": step, "loss": loss_v, "ms": ms, "tokens_per_s": tps, "grad_norm": float(norm)}
        if mfu is not None:
            rec["mfu"] = mfu
        records.append(rec)
        mfu_s = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
        print(f"step {step + 1:4d}/{a.steps} | loss {loss_v:.6f} | norm {float(norm):.4f} | {ms:.1f} ms | "
              f"{tps:.0f} tok/s | MFU {mfu_s}", flush=True)

    kept = records[a.warmup:]
    total_ms = sum(r["ms"] for r in kept)
    tps = tokens_per_step * len(kept) / (total_ms / 1e3)
    mfu = fpt * tps / (peak * 1e12) if peak > 0 else None
    mem = torch.cuda.max_memory_allocated(dev) if a.device == "cuda" else 0
    if a.report:
        summary = {"tokens_per_s": tps, "mfu": mfu, "ms_per_step": total_ms / len(kept), "flops_per_token": fpt,
                   "peak_bf16_tflops": peak, "device": name, "torch": torch.__version__, "num_parameters": nparams,
                   "compile": compiled, "fused_adamw": fused, "attention": "sdpa" if flash else "eager",
                   "max_memory_allocated": mem, "warmup_steps_dropped": a.warmup}
        json.dump({"config": vars(a), "summary": summary, "steps": records}, open(a.report, "w"), indent=1)
    mfu_s = f"{mfu:.4f}" if mfu is not None else "n/a"
    print(f"torch_gpt2: tokens_per_s={tps:.0f} mfu={mfu_s} ms_per_step={total_ms / len(kept):.1f} "
          f"steps_kept={len(kept)} flops_per_token={fpt:.0f} max_mem_gib={mem / 2**30:.1f} device={name.replace(' ', '_')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
