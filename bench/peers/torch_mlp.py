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
it beside tpx-train-cuda. --profile-phases (eager) times the step under tpx-train's phase names
(torch_common.PhaseClock), for phase_compare.py.

  python3 bench/peers/torch_mlp.py --device cuda --dtype bf16 --compile \\
      --batch 8192 --d-model 1024 --ffn 4096 --layers 4 --context 3
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as common  # noqa: E402

VOCAB = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_flags(p)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--context", type=int, default=3)
    p.add_argument("--text", help="train on windows of this file (default: random bytes)")
    a = p.parse_args(argv)
    common.check_common_flags(p, a)
    return a


def main(argv=None):
    a = parse_args(argv)
    torch, dev = common.setup(a, "torch_mlp")
    nn = torch.nn
    Fn = torch.nn.functional
    B, D, F, L, C, V = a.batch, a.d_model, a.ffn, a.layers, a.context, VOCAB
    normal, ones = common.parameter_makers(torch, dev)
    rmsnorm = common.rmsnorm_function(torch)
    clock = common.PhaseClock(torch, dev, a.profile_phases)

    class ByteMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.ParameterList([normal(V, D, fan_in=1.0) for _ in range(C)])
            self.norm = nn.ParameterList([ones(D) for _ in range(L)])
            self.w_in = nn.ParameterList([normal(D, F, fan_in=D) for _ in range(L)])
            self.w_out = nn.ParameterList([normal(F, D, fan_in=F) for _ in range(L)])
            self.final_norm = ones(D)
            self.head = normal(D, V, fan_in=D)

        # Marked (--profile-phases) where tpx-train marks its phases, as torch_gpt.py is.
        def forward(self, tokens):  # tokens [B, C + 1]: C inputs, then the target
            mark, grad = clock.mark, clock.marked_gradient
            mark("embedding forward")
            x = self.embed[0][tokens[:, 0]]
            for k in range(1, C):
                x = x + self.embed[k][tokens[:, k]]
            x = grad(x, "embedding backward")
            for l in range(L):
                x = common.mlp_sublayer(torch, clock, rmsnorm, x, self.norm[l], self.w_in[l],
                                        self.w_out[l], "norm")
            logits = common.head_logits(clock, rmsnorm, x, self.final_norm, self.head)
            return Fn.cross_entropy(logits.float(), tokens[:, C])

    model = ByteMLP()
    n_params = sum(p.numel() for p in model.parameters())
    fn = torch.compile(model) if a.compile else model
    opt, adam = common.adamw(torch, a, model.parameters())

    batches = common.make_batches(torch, a, dev, C + 1, V, "torch_mlp")

    times, losses = common.train_and_time(torch, a, model, fn, opt, batches, clock)
    sec, timed = common.timing_summary(a, times)
    flops = 6.0 * B * (2.0 * D * F * L + D * V)
    result = {
        "bench": "torch_mlp", "framework": "torch", "version": torch.__version__,
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "dtype": a.dtype, "compile": a.compile,
        "tf32": a.tf32, "adam": adam,
        "batch": B, "d_model": D, "ffn": F, "layers": L, "context": C, "vocab": V,
        "params": n_params, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step": sec * 1e3, "ms_per_step_min": min(timed) * 1e3,
        "first_step_ms": times[0] * 1e3, "samples_per_s": B / sec, "gflops": flops / sec * 1e-9,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    if clock.enabled:
        result.update(clock.fields())
    print(f"torch_mlp: torch {torch.__version__} {result['device_name']}, {common.mode_text(a)}, "
          f"B={B} D={D} F={F} L={L} context={C}, {n_params} parameters")
    print(f"torch_mlp: median {sec * 1e3:.3f} ms/step over {a.steps} steps (min {min(timed) * 1e3:.3f}, "
          f"first {times[0] * 1e3:.0f} ms) | {B / sec:.0f} samples/s | {flops / sec * 1e-9:.1f} GFLOP/s | "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if clock.enabled:
        print(clock.table("torch_mlp"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
