#!/usr/bin/env python3
"""torch_gpt.py: the GPT example's model (examples/gpt/model.hpp) in PyTorch, timed per step.

The peer of tpx-gpt (host) and tpx-gpt-cuda (GPU): the same transformer, written as a PyTorch
user writes it in nanoGPT's layout (one fused QKV projection, scaled_dot_product_attention with
is_causal, which PyTorch runs as flash attention on a GPU; fused AdamW on CUDA; bf16 autocast with
fp32 masters), so that both count the same parameters and FLOPs: learned token and position
embeddings, L pre-norm blocks x += Attn(RMSNorm(x)) Wo (with --kv-heads, grouped-query attention
as tpx-gpt's: query head i reads key and value head i // (heads / kv-heads), SDPA's enable_gqa), x += GELU_tanh(RMSNorm(x) W_in) W_out
(RMSNorm eps 1e-5 with a learned weight, no biases, scale 1/sqrt(E)), a final RMSNorm, an untied
head [D, V] and the mean cross-entropy of every next token; tpx's init (N(0, 1/fan_in) matrices,
embeddings fan_in 1, ones for norms), clip_grad_norm_ to 1.0 and AdamW (torch_common.py).
Batches are random tokens below --vocab (only the step time matters here), or with --text FILE
windows of T + 1 bytes at random positions of a file (vocab 256), made on the device before the
timed loop.

Model FLOPs per token are tpx-gpt's (examples/gpt/family.hpp): 6 N + 12 L T D, N the weights of
the matrix products (Q, K, V, O, W_in, W_out per block and the head; K and V D x kv-heads E). MFU divides by --peak-tflops
(H100 SXM: 989 dense bf16, 67 fp32 without TF32; 0 leaves it out). --profile-phases (eager)
times the step under tpx-gpt's phase names (torch_common.PhaseClock), for phase_compare.py.

  python3 bench/peers/torch_gpt.py --device cuda --dtype bf16 --compile --batch 16 --seq 1024 \\
      --heads 12 --head-dim 64 --ffn 3072 --layers 12 --vocab 50304 --peak-tflops 989
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as common  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_flags(p)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64, help="sequence length T")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0,
                   help="key and value heads, each shared by heads / kv-heads query heads (0: --heads)")
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--text", help="train on windows of this file (default: random tokens)")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="for MFU (0: no MFU)")
    a = p.parse_args(argv)
    common.check_common_flags(p, a)
    if min(a.batch, a.seq, a.heads, a.head_dim, a.ffn, a.layers, a.vocab) < 1:
        p.error("--batch, --seq, --heads, --head-dim, --ffn, --layers and --vocab must be >= 1")
    if a.kv_heads < 0 or (a.kv_heads > 0 and a.heads % a.kv_heads != 0):
        p.error(f"--kv-heads {a.kv_heads} must divide --heads {a.heads} (0: as many as --heads)")
    a.kv_heads = a.kv_heads or a.heads
    if a.text and a.vocab < 256:
        p.error("--text trains on bytes: --vocab must be at least 256")
    return a


def model_flops_per_token(a):
    d, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    weights = a.layers * (2 * d * d + 2 * d * kv + 2 * d * a.ffn) + d * a.vocab
    return 6.0 * weights + 12.0 * a.layers * a.seq * d


def main(argv=None):
    a = parse_args(argv)
    torch, dev = common.setup(a, "torch_gpt")
    nn = torch.nn
    Fn = torch.nn.functional
    B, T, H, E, F, L, V = a.batch, a.seq, a.heads, a.head_dim, a.ffn, a.layers, a.vocab
    D, Hk = H * E, a.kv_heads
    normal, ones = common.parameter_makers(torch, dev)
    rmsnorm = common.rmsnorm_function(torch)
    clock = common.PhaseClock(torch, dev, a.profile_phases)

    class ByteGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = normal(V, D, fan_in=1.0)
            self.pos = normal(T, D, fan_in=1.0)
            self.norm1 = nn.ParameterList([ones(D) for _ in range(L)])
            self.w_qkv = nn.ParameterList([normal(D, D + 2 * Hk * E, fan_in=D) for _ in range(L)])
            self.w_o = nn.ParameterList([normal(D, D, fan_in=D) for _ in range(L)])
            self.norm2 = nn.ParameterList([ones(D) for _ in range(L)])
            self.w_in = nn.ParameterList([normal(D, F, fan_in=D) for _ in range(L)])
            self.w_out = nn.ParameterList([normal(F, D, fan_in=F) for _ in range(L)])
            self.final_norm = ones(D)
            self.head = normal(D, V, fan_in=D)

        # Marked (--profile-phases) where tpx-gpt marks its phases: mark() in the forward pass,
        # grad(t, name) where the backward pass reaches t; autocast's casts of the weights fall in
        # the phase of their product (tpx casts a block's weights in "block weights").
        def forward(self, tokens):  # tokens [B, T + 1]: the inputs, shifted by one the targets
            mark, grad = clock.mark, clock.marked_gradient
            mark("embedding forward")
            x = grad(self.tok[tokens[:, :T]] + self.pos, "embedding backward")
            for l in range(L):
                mark("attention norm")
                h = grad(rmsnorm(x, self.norm1[l]), "attention norm backward")
                mark("QKV projections")
                qkv = grad(h @ self.w_qkv[l], "QKV backward")
                q, k, v = qkv.split([D, Hk * E, Hk * E], dim=-1)
                q = q.view(B, T, H, E).transpose(1, 2)
                k, v = (t.view(B, T, Hk, E).transpose(1, 2) for t in (k, v))
                mark("attention")
                o = grad(Fn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hk != H),
                         "attention backward")
                mark("attention output")
                x = grad(x + o.transpose(1, 2).reshape(B, T, D) @ self.w_o[l], "attention output backward")
                x = common.mlp_sublayer(torch, clock, rmsnorm, x, self.norm2[l], self.w_in[l],
                                        self.w_out[l], "MLP norm")
            logits = common.head_logits(clock, rmsnorm, x, self.final_norm, self.head)
            return Fn.cross_entropy(logits.float().view(B * T, V), tokens[:, 1:].reshape(B * T))

    model = ByteGPT()
    n_params = sum(p.numel() for p in model.parameters())
    fn = torch.compile(model) if a.compile else model
    opt, adam = common.adamw(torch, a, model.parameters())

    batches = common.make_batches(torch, a, dev, T + 1, V, "torch_gpt")

    times, losses = common.train_and_time(torch, a, model, fn, opt, batches, clock)
    sec, timed = common.timing_summary(a, times)
    tokens_per_s = B * T / sec
    flops = model_flops_per_token(a) * tokens_per_s
    mfu = flops / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else None
    result = {
        "bench": "torch_gpt", "framework": "torch", "version": torch.__version__,
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "dtype": a.dtype, "compile": a.compile,
        "tf32": a.tf32, "adam": adam,
        "batch": B, "seq": T, "heads": H, "kv_heads": Hk, "head_dim": E, "d_model": D, "ffn": F, "layers": L,
        "vocab": V, "params": n_params, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step": sec * 1e3, "ms_per_step_min": min(timed) * 1e3,
        "first_step_ms": times[0] * 1e3, "tokens_per_s": tokens_per_s,
        "model_tflops": flops * 1e-12, "mfu": mfu,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    if clock.enabled:
        result.update(clock.fields())
    print(f"torch_gpt: torch {torch.__version__} {result['device_name']}, {common.mode_text(a)}, "
          f"B={B} T={T} D={D} ({H} heads of {E}" + (f", {Hk} key and value heads" if Hk != H else "") + f") F={F} L={L} V={V}, {n_params} parameters")
    print(f"torch_gpt: median {sec * 1e3:.3f} ms/step over {a.steps} steps (min {min(timed) * 1e3:.3f}, "
          f"first {times[0] * 1e3:.0f} ms) | {tokens_per_s:.0f} tokens/s | "
          f"{flops * 1e-12:.2f} model TFLOP/s" + (f" | MFU {100 * mfu:.1f}%" if mfu is not None else "") +
          f" | loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if clock.enabled:
        print(clock.table("torch_gpt"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
