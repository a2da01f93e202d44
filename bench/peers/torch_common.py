"""torch_common.py: what the PyTorch peers of tpx's trainers share (torch_mlp.py, torch_gpt.py).

The flags every peer takes (device, dtype, compile, AdamW implementation, steps), tpx's RMSNorm
(eps 1e-5, a learned weight) and initialization (N(0, 1/fan_in)), the AdamW of tpx's trainers
(betas 0.9/0.95, eps 1e-8, no weight decay; fused on CUDA), one training step as a PyTorch user
writes it (autocast to bf16 with fp32 masters, clip_grad_norm_, opt.step), and the timing loop:
every step ends with torch.cuda.synchronize() on a GPU, as tpx's trainers read the loss back each
step with --report-every 1, and the median over the timed steps after the warm-up (compilation)
is the figure.
"""
import math
import statistics
import sys
import time


def add_common_flags(p):
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model and loss")
    p.add_argument("--tf32", action="store_true", help="allow TF32 in fp32 matmuls (off by default)")
    p.add_argument("--adam", choices=["auto", "fused", "foreach", "for-loop"], default="auto",
                   help="AdamW implementation (auto: fused on CUDA, PyTorch's default on CPU)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0)


def check_common_flags(p, a):
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be at least 1, --warmup at least 0")


def setup(a, name):
    """Imports torch, applies the flags that configure it, and returns (torch, device)."""
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{name}: --device cuda, but torch.cuda.is_available() is False")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)
    return torch, torch.device(a.device)


def parameter_makers(torch, dev):
    """normal(*shape, fan_in) and ones(n): tpx's initialization, as nn.Parameters."""
    def normal(*shape, fan_in):
        return torch.nn.Parameter(torch.randn(*shape, device=dev) / math.sqrt(fan_in))

    def ones(n):
        return torch.nn.Parameter(torch.ones(n, device=dev))

    return normal, ones


def rmsnorm_function(torch):
    """rmsnorm(x, w): tpx's RMSNorm (eps 1e-5), PyTorch's fused one where it has it."""
    Fn = torch.nn.functional
    if hasattr(Fn, "rms_norm"):
        return lambda x, w: Fn.rms_norm(x, (x.shape[-1],), w, eps=1e-5)

    def rmsnorm(x, w):  # PyTorch < 2.4
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w).type_as(x)

    return rmsnorm


def adamw(torch, a, parameters):
    """tpx's AdamW; returns (optimizer, the implementation's keyword or "default")."""
    kw = {}
    if a.adam == "fused" or (a.adam == "auto" and a.device == "cuda"):
        kw["fused"] = True
    elif a.adam == "foreach":
        kw["foreach"] = True
    elif a.adam == "for-loop":
        kw["foreach"] = False
    opt = torch.optim.AdamW(parameters, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **kw)
    return opt, kw or "default"


def make_batches(torch, a, dev, width, vocab, name):
    """warmup + steps batches of a.batch rows of `width` tokens, made on the device: windows at
    random positions of a.text (bytes) when given, else random tokens below vocab."""
    total = a.warmup + a.steps
    gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
    if not a.text:
        return torch.randint(0, vocab, (total, a.batch, width), device=dev, generator=gen)
    with open(a.text, "rb") as f:
        text = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(dev)
    if text.numel() < width:
        sys.exit(f"{name}: {a.text} has {text.numel()} bytes, fewer than the {width} of a row")
    starts = torch.randint(0, text.numel() - width + 1, (total, a.batch, 1), device=dev, generator=gen)
    return text[starts + torch.arange(width, device=dev)].long()


def train_and_time(torch, a, model, loss_fn, opt, batches):
    """Runs len(batches) steps of loss_fn(batch) -> backward -> clip -> opt.step; returns the
    per-step times (seconds, the warm-up included) and the losses."""
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = loss_fn(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return loss

    times, losses = [], []
    for tokens in batches:
        sync()
        t0 = time.perf_counter()
        loss = step(tokens)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    return times, [float(x) for x in losses]


def timing_summary(a, times):
    """(median seconds per timed step, the timed steps' times)."""
    timed = times[a.warmup:]
    return statistics.median(timed), timed


def mode_text(a):
    return ("compile" if a.compile else "eager") + f" {a.dtype}" + (" tf32" if a.tf32 else "")
