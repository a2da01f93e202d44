"""torch_common.py: what the PyTorch peers of tpx's trainers share (torch_mlp.py, torch_gpt.py).

The flags every peer takes (device, dtype, compile, AdamW implementation, steps), tpx's RMSNorm
(eps 1e-5, a learned weight) and initialization (N(0, 1/fan_in)), the AdamW of tpx's trainers
(betas 0.9/0.95, eps 1e-8, no weight decay; fused on CUDA), one training step as a PyTorch user
writes it (autocast to bf16 with fp32 masters, clip_grad_norm_, opt.step), and the timing loop:
every step ends with torch.cuda.synchronize() on a GPU, as tpx's trainers read the loss back each
step with --report-every 1, and the median over the timed steps after the warm-up (compilation)
is the figure. With --profile-phases, the phase clock below times an eager step part by part
under the names tpx's trainers mark (tpx-train and tpx-gpt --profile-phases), so that where a
step's time goes can be read side by side (bench/peers/phase_compare.py).
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
    p.add_argument("--profile-phases", action="store_true",
                   help="time the timed steps part by part, under tpx's phase names (eager only)")


def check_common_flags(p, a):
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be at least 1, --warmup at least 0")
    if a.profile_phases and a.compile:
        p.error("--profile-phases times an eager step: torch.compile fuses kernels across the "
                "phases' marks (leave out --compile)")


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


def mlp_sublayer(torch, clock, rmsnorm, x, norm, w_in, w_out, norm_phase):
    """x + GELU_tanh(RMSNorm(x) W_in) W_out, marked where tpx marks it: norm_phase, "MLP up
    (GELU)", "MLP down" and their backward passes (GELU's backward in "MLP down backward", as tpx
    fuses it into that product's)."""
    mark, grad = clock.mark, clock.marked_gradient
    mark(norm_phase)
    h = grad(rmsnorm(x, norm), norm_phase + " backward")
    mark("MLP up (GELU)")
    u = torch.nn.functional.gelu(grad(h @ w_in, "MLP up backward"), approximate="tanh")
    mark("MLP down")
    return grad(x + u @ w_out, "MLP down backward")


def head_logits(clock, rmsnorm, x, final_norm, head):
    """RMSNorm(x) head, marked "final norm" and "LM head" (and their backward passes); what follows
    is marked "cross-entropy", the loss's backward pass too (tpx computes the logits' gradient with
    the loss)."""
    mark, grad = clock.mark, clock.marked_gradient
    mark("final norm")
    h = grad(rmsnorm(x, final_norm), "final norm backward")
    mark("LM head")
    logits = grad(h @ head, "LM head backward")
    mark("cross-entropy")
    return logits


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


class PhaseClock:
    """Where an eager step's time goes, part by part, measured as tpx's phase clock measures it
    (include/tpx/spmd/phase_clock.hpp): mark(name) ends the phase before it and begins `name`; on
    a GPU a mark records a CUDA event on the current stream, so a phase is the GPU's time from its
    mark to the next one (no profiler needed), on the CPU the wall time. The backward pass is
    marked through the tensors of the forward pass: marked_gradient(t, name) returns t, and marks
    `name` in the backward pass once t's gradient is whole, that is where the backward of what
    made t begins. A model places its marks where tpx's does (examples/gpt/model.hpp), so a phase
    of either side holds the same work, up to where PyTorch fuses otherwise (the model says
    where). Only timed steps are marked; the warm-up runs unmarked. Disabled, every call is a
    no-op that returns its tensor."""

    def __init__(self, torch, device, enabled):
        self._torch = torch
        self._cuda = device.type == "cuda"
        self.enabled = enabled
        self._marking = False
        self._marks = []    # this step's (name, CUDA event or perf_counter seconds)
        self._totals = {}   # name -> [seconds, marks], in the order first marked
        self.steps = 0
        self.wall_seconds = 0.0
        self._mark_gradient = _gradient_marker(torch, self) if enabled else None

    def begin_step(self, timed):
        self._marking = self.enabled and timed
        self._marks = []

    def mark(self, name):
        if not self._marking:
            return
        if self._cuda:
            stamp = self._torch.cuda.Event(enable_timing=True)
            stamp.record()
        else:
            stamp = time.perf_counter()
        self._marks.append((name, stamp))

    def marked_gradient(self, t, name):
        return self._mark_gradient.apply(t, name) if self._marking else t

    def end_step(self, wall_seconds):
        """Adds the step's phases; call after the step's last mark and its synchronization."""
        if not self._marking:
            return
        for (name, begin), (_, end) in zip(self._marks, self._marks[1:]):
            if not name:
                continue
            seconds = begin.elapsed_time(end) / 1e3 if self._cuda else end - begin
            total = self._totals.setdefault(name, [0.0, 0])
            total[0] += seconds
            total[1] += 1
        self.steps += 1
        self.wall_seconds += wall_seconds
        self._marking = False

    def phases(self):
        """[(name, ms per step, marks per step)] in the order first marked."""
        return [(name, s / self.steps * 1e3, n / self.steps) for name, (s, n) in self._totals.items()]

    def table(self, who):
        """The table tpx's trainers print (examples/trainer/phase_table.hpp): heaviest first, then
        what no phase holds (on a GPU, the stream idle between the step's start and its marks)."""
        step_ms = self.wall_seconds / self.steps * 1e3
        lines = [f"{who}: phases of the step, mean of the last {self.steps} steps ({step_ms:.3f} ms each):",
                 f"  {'phase':<28} {'ms/step':>10} {'share':>7} {'marks/step':>11}"]
        in_phases = 0.0
        for name, ms, marks in sorted(self.phases(), key=lambda p: -p[1]):
            in_phases += ms
            lines.append(f"  {name:<28} {ms:10.3f} {100 * ms / step_ms:6.1f}% {marks:11.1f}")
        rest = step_ms - in_phases
        lines.append(f"  {'(in no phase)':<28} {rest:10.3f} {100 * rest / step_ms:6.1f}%")
        return "\n".join(lines)

    def fields(self):
        """The JSON fields of tpx's log for the same figures ("phase_steps", ...)."""
        return {"phase_steps": self.steps, "phase_ms_per_step": self.wall_seconds / self.steps * 1e3,
                "phases": [{"name": n, "ms_per_step": ms, "marks_per_step": m}
                           for n, ms, m in self.phases()]}


def _gradient_marker(torch, clock):
    class GradientMark(torch.autograd.Function):
        """The identity, whose backward marks a phase (no copy either way)."""

        @staticmethod
        def forward(ctx, t, name):
            ctx.phase = name
            return t.view_as(t)

        @staticmethod
        def backward(ctx, grad):
            clock.mark(ctx.phase)
            return grad, None

    return GradientMark


def train_and_time(torch, a, model, loss_fn, opt, batches, clock):
    """Runs len(batches) steps of loss_fn(batch) -> backward -> clip -> opt.step; returns the
    per-step times (seconds, the warm-up included) and the losses. The clock (PhaseClock; a no-op
    when disabled) marks the timed steps: the model's own phases, then "gradient norm" and
    "AdamW", as tpx's training step marks them (examples/trainer/train_step.hpp)."""
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = loss_fn(tokens)
        loss.backward()
        clock.mark("gradient norm")
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        clock.mark("AdamW")
        opt.step()
        clock.mark("")
        return loss

    times, losses = [], []
    for i, tokens in enumerate(batches):
        clock.begin_step(timed=i >= a.warmup)
        sync()
        t0 = time.perf_counter()
        loss = step(tokens)
        sync()
        times.append(time.perf_counter() - t0)
        clock.end_step(times[-1])
        losses.append(loss.detach())
    return times, [float(x) for x in losses]


def timing_summary(a, times):
    """(median seconds per timed step, the timed steps' times)."""
    timed = times[a.warmup:]
    return statistics.median(timed), timed


def mode_text(a):
    return ("compile" if a.compile else "eager") + f" {a.dtype}" + (" tf32" if a.tf32 else "")
