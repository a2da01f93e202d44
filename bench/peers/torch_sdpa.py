#!/usr/bin/env python3
"""torch_sdpa.py: PyTorch's causal scaled_dot_product_attention alone, forward and backward, timed.

The peer of `tpx-bench-cuda attention` (bench/cuda/attention.cu) for issue 11's target (tpx's
fused attention kernel >= 0.9x SDPA's flash attention, forward and backward, at T = 1024 and
4096): torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) with q, k, v
[B, H, T, E] (tpx's [B x H, T, E] in the same memory order), N(0, 1), the default scale
1/sqrt(E). With --kv-heads G < H, grouped-query attention: k and v [B, G, T, E] and
enable_gqa=True (PyTorch >= 2.5), query head h reading key head h // (H / G), as tpx's
`tpx-bench-cuda attention --kv-heads G` does. The flash backend is forced (torch.nn.attention.sdpa_kernel(FLASH_ATTENTION)); where
it cannot run (fp32, a CPU, an old PyTorch) the script says so and lets PyTorch pick, and the
JSON names the backend that ran.

  forward   q, k, v require grad, as in training: the call also keeps what the backward needs
            (flash attention's logsumexp), as tpx's forward writes lse
  backward  torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on one forward made
            before the timing, so that only the backward is timed (with its preprocessing,
            delta = rowsum(dout * out), as tpx's backward includes its delta)

Each is the mean of --steps back-to-back calls after --warmup, between two CUDA events (on a CPU,
perf_counter). TFLOP/s count FlashAttention's benchmarks' FLOPs, as the tpx side does: forward
4 B H T^2 E / 2 (causal), backward 2.5x the forward.

  python3 bench/peers/torch_sdpa.py --device cuda --types bf16,fp32 --lengths 1024,4096
  python3 bench/peers/torch_sdpa.py --device cuda --types bf16 --kv-heads 4   # grouped-query
"""
import argparse
import contextlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as common  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda",
                   help="cpu only tries the code path: the figures then mean nothing")
    p.add_argument("--types", default="bf16", help="comma-separated: bf16, fp32")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0,
                   help="key and value heads, dividing --heads: grouped-query attention (0: --heads)")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--lengths", default="1024,4096", help="comma-separated sequence lengths T")
    p.add_argument("--steps", type=int, default=20, help="timed calls (after --warmup)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    a.tf32 = False  # what torch_common.setup configures; fp32 attention runs without TF32
    a.types = a.types.split(",")
    a.lengths = [int(t) for t in a.lengths.split(",")]
    if any(t not in ("bf16", "fp32") for t in a.types):
        p.error(f"--types {','.join(a.types)}: each must be bf16 or fp32")
    if min(a.batch, a.heads, a.head_dim, *a.lengths) < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--batch, --heads, --head-dim, --lengths and --steps must be >= 1, --warmup >= 0")
    a.kv_heads = a.kv_heads or a.heads
    if a.kv_heads < 1 or a.heads % a.kv_heads:
        p.error(f"--kv-heads {a.kv_heads} must divide --heads {a.heads}")
    return a


def forward_flops(a, t):  # FlashAttention's count: two [T, T] x E products, half masked
    return 4.0 * a.batch * a.heads * t * t * a.head_dim / 2


def flash_or_default(torch, attend):
    """(context manager, backend name): flash attention forced when one call of attend() runs
    under it, else PyTorch's own choice, with a note saying why."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("torch_sdpa: note: no torch.nn.attention.sdpa_kernel (PyTorch < 2.3): PyTorch picks "
              "the backend")
        return contextlib.nullcontext, "default"
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            attend()
        return (lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)), "flash"
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"torch_sdpa: note: the flash backend cannot run here ({reason}); PyTorch picks "
              "the backend")
        return contextlib.nullcontext, "default"


def seconds_per_call(torch, a, fn):
    """Mean seconds of a.steps back-to-back calls of fn after a.warmup, by CUDA events."""
    for _ in range(a.warmup):
        fn()
    if a.device != "cuda":
        t0 = time.perf_counter()
        for _ in range(a.steps):
            fn()
        return (time.perf_counter() - t0) / a.steps
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.steps):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / a.steps


def grouped_query_flags(torch, a):
    """SDPA's keyword for grouped-query attention where --kv-heads asks for it."""
    if a.kv_heads == a.heads:
        return {}
    import inspect
    try:
        takes_gqa = "enable_gqa" in inspect.signature(
            torch.nn.functional.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: try the call
        takes_gqa = True
    if not takes_gqa:
        sys.exit(f"torch_sdpa: --kv-heads {a.kv_heads}: PyTorch {torch.__version__}'s "
                 "scaled_dot_product_attention has no enable_gqa (PyTorch >= 2.5 has)")
    return {"enable_gqa": True}


def measure(torch, dev, a, dtype_name, t):
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    shape = (a.batch, a.heads, t, a.head_dim)
    key_shape = (a.batch, a.kv_heads, t, a.head_dim)
    q = torch.randn(shape, device=dev, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(key_shape, device=dev, dtype=dtype, requires_grad=True) for _ in range(2))
    dout = torch.randn(shape, device=dev, dtype=dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa = grouped_query_flags(torch, a)
    attend = lambda: sdpa(q, k, v, is_causal=True, **gqa)  # noqa: E731
    backend, backend_name = flash_or_default(torch, attend)
    with backend():
        forward_s = seconds_per_call(torch, a, attend)
        out = attend()
        backward_s = seconds_per_call(
            torch, a, lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    flops = forward_flops(a, t)
    return {"type": dtype_name, "batch": a.batch, "heads": a.heads, "kv_heads": a.kv_heads,
            "t": t, "e": a.head_dim,
            "backend": backend_name, "forward_ms": forward_s * 1e3,
            "forward_tflops": flops / forward_s * 1e-12, "backward_ms": backward_s * 1e3,
            "backward_tflops": 2.5 * flops / backward_s * 1e-12}


def main(argv=None):
    a = parse_args(argv)
    torch, dev = common.setup(a, "torch_sdpa")
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    grouped = f" ({a.kv_heads} key and value heads)" if a.kv_heads != a.heads else ""
    print(f"torch_sdpa: torch {torch.__version__} {name}, causal SDPA, {a.batch} x {a.heads} heads of "
          f"{a.head_dim}{grouped}, {a.steps} calls after {a.warmup}")
    print(f"# {'type':>5} {'T':>6} {'backend':>8} {'fwd(ms)':>11} {'fwd TFLOP/s':>12} {'bwd(ms)':>11} "
          f"{'bwd TFLOP/s':>12}")
    rows = []
    for dtype_name in a.types:
        for t in a.lengths:
            r = measure(torch, dev, a, dtype_name, t)
            rows.append(r)
            print(f"  {r['type']:>5} {t:>6} {r['backend']:>8} {r['forward_ms']:>11.3f} "
                  f"{r['forward_tflops']:>12.1f} {r['backward_ms']:>11.3f} {r['backward_tflops']:>12.1f}",
                  flush=True)
    print(json.dumps({"bench": "torch_sdpa", "framework": "torch", "version": torch.__version__,
                      "device": a.device, "device_name": name, "steps": a.steps, "warmup": a.warmup,
                      "rows": rows}))


if __name__ == "__main__":
    main()
