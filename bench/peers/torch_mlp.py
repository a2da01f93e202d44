#!/usr/bin/env python3
"""torch_mlp.py: the example trainer's model (examples/trainer/model.hpp) in PyTorch, timed per step.

tpx is worth using only if its typed step is as fast as the untyped one. This is the same model
as a PyTorch user would write it, the peer of tpx-train (host) and tpx-train-cuda (one GPU): a
byte-level LM (vocab 256), `--context` embedding tables summed (x = sum_k E_k[token_k]), L
residual blocks x += GELU_tanh(RMSNorm(x) W_in) W_out (RMSNorm eps 1e-5 with a learned weight, no
biases; tpx's GELU is the tanh approximation, include/tpx/kernels/elementwise.hpp), a final
RMSNorm, a head [D, V] and the mean cross-entropy of the next byte; tpx's init (N(0, 1/fan_in)
matrices, embeddings fan_in 1, ones for norms), clip_grad_norm_ to 1.0 and AdamW (lr 3e-3, betas
0.9/0.95, eps 1e-8, no weight decay; fused on CUDA). Batches are random bytes (only the step time
matters here), or with --text FILE windows of context + 1 bytes at random positions of a file, as
tpx-train draws them, to check that the loss falls as tpx-train's does; either way they are made
on the device before the timed loop.

Modes: --device cpu|cuda; --dtype fp32 (no TF32 unless --tf32, PyTorch's default) or bf16
(torch.autocast to bf16, fp32 master weights and moments, as tpx-train --bf16); --compile wraps
the model and its loss in torch.compile (the optimizer step stays eager). Prints the median step
time over --steps timed steps after --warmup (each step ends with torch.cuda.synchronize() on a
GPU, as tpx-train --report-every 1 reads the loss back every step), samples/s and matrix GFLOP/s
(6 B (2 D F L + D V), tpx-train's count), then one JSON line. bench/peers/compare.py --gpu runs
it beside tpx-train-cuda.

  python3 bench/peers/torch_mlp.py --device cuda --dtype bf16 --compile \\
      --batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3
"""
import argparse
import json
import math
import statistics
import sys
import time

VOCAB = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model and loss")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in fp32 matmuls (off by default)")
    p.add_argument("--adam", choices=["auto", "fused", "foreach", "for-loop"], default="auto",
                   help="AdamW implementation (auto: fused on CUDA, PyTorch's default on CPU)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--context", type=int, default=3)
    p.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--text", help="train on windows of this file (default: random bytes)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0)
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be at least 1, --warmup at least 0")
    return a


def main(argv=None):
    a = parse_args(argv)
    import torch
    import torch.nn as nn
    import torch.nn.functional as Fn

    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_mlp: --device cuda, but torch.cuda.is_available() is False")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    B, D, F, L, C, V = a.batch, a.d_model, a.ffn, a.layers, a.context, VOCAB

    def normal(*shape, fan_in):
        return nn.Parameter(torch.randn(*shape, device=dev) / math.sqrt(fan_in))

    def ones(n):
        return nn.Parameter(torch.ones(n, device=dev))

    if hasattr(Fn, "rms_norm"):
        def rmsnorm(x, w):
            return Fn.rms_norm(x, (x.shape[-1],), w, eps=1e-5)
    else:  # PyTorch < 2.4
        def rmsnorm(x, w):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w).type_as(x)

    class ByteMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.ParameterList([normal(V, D, fan_in=1.0) for _ in range(C)])
            self.norm = nn.ParameterList([ones(D) for _ in range(L)])
            self.w_in = nn.ParameterList([normal(D, F, fan_in=D) for _ in range(L)])
            self.w_out = nn.ParameterList([normal(F, D, fan_in=F) for _ in range(L)])
            self.final_norm = ones(D)
            self.head = normal(D, V, fan_in=D)

        def forward(self, tokens):  # tokens [B, C + 1]: C inputs, then the target
            x = self.embed[0][tokens[:, 0]]
            for k in range(1, C):
                x = x + self.embed[k][tokens[:, k]]
            for l in range(L):
                h = rmsnorm(x, self.norm[l])
                x = x + Fn.gelu(h @ self.w_in[l], approximate="tanh") @ self.w_out[l]
            logits = rmsnorm(x, self.final_norm) @ self.head
            return Fn.cross_entropy(logits.float(), tokens[:, C])

    model = ByteMLP()
    n_params = sum(p.numel() for p in model.parameters())
    fn = torch.compile(model) if a.compile else model
    adam_kw = {}
    if a.adam == "fused" or (a.adam == "auto" and a.device == "cuda"):
        adam_kw["fused"] = True
    elif a.adam == "foreach":
        adam_kw["foreach"] = True
    elif a.adam == "for-loop":
        adam_kw["foreach"] = False
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0, **adam_kw)

    total = a.warmup + a.steps
    gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
    if a.text:
        with open(a.text, "rb") as f:
            text = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(dev)
        starts = torch.randint(0, text.numel() - C, (total, B, 1), device=dev, generator=gen)
        batches = text[starts + torch.arange(C + 1, device=dev)].long()
    else:
        batches = torch.randint(0, V, (total, B, C + 1), device=dev, generator=gen)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = fn(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return loss

    times, losses = [], []
    for i in range(total):
        sync()
        t0 = time.perf_counter()
        loss = step(batches[i])
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    losses = [float(x) for x in losses]

    timed = times[a.warmup:]
    sec = statistics.median(timed)
    flops = 6.0 * B * (2.0 * D * F * L + D * V)
    result = {
        "bench": "torch_mlp", "framework": "torch", "version": torch.__version__,
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "dtype": a.dtype, "compile": a.compile,
        "tf32": a.tf32, "adam": adam_kw or "default",
        "batch": B, "d_model": D, "ffn": F, "layers": L, "context": C, "vocab": V,
        "params": n_params, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step": sec * 1e3, "ms_per_step_min": min(timed) * 1e3,
        "first_step_ms": times[0] * 1e3, "samples_per_s": B / sec, "gflops": flops / sec * 1e-9,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    mode = ("compile" if a.compile else "eager") + f" {a.dtype}" + (" tf32" if a.tf32 else "")
    print(f"torch_mlp: torch {torch.__version__} {result['device_name']}, {mode}, "
          f"B={B} D={D} F={F} L={L} context={C}, {n_params} parameters")
    print(f"torch_mlp: median {sec * 1e3:.3f} ms/step over {a.steps} steps (min {min(timed) * 1e3:.3f}, "
          f"first {times[0] * 1e3:.0f} ms) | {B / sec:.0f} samples/s | {flops / sec * 1e-9:.1f} GFLOP/s | "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
