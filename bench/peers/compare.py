#!/usr/bin/env python3
"""compare.py: tpx against the same work in JAX (host) or PyTorch (GPU), from one run.

Issue 9 asks that the typed trainer be at least as fast as the untyped frameworks on the same
model, measured side by side on the same machine in one run, so that load and clock changes hit
both. This script runs them and prints the table and the ratios:

  host (default): tpx-train at meshes 1x1, 2x1, 1x2, 2x2 and bench/peers/jax_mlp.py on one device
    and on 2x2 forced host devices, at the demo shape (B=64, D=64, F=256, L=4, context 3) and the
    large one (B=1024, D=512, F=2048, L=4); ms per step (median of the timed steps), matrix
    GFLOP/s (6 B (2 D F L + D V)), the speed ratio tpx's best mesh / JAX's best, and tpx's best
    GFLOP/s at the large shape against this machine's SGEMM rate (numpy's OpenBLAS on 2 threads,
    the best of 1024^3 and the large shape's 1024 x 512 x 2048). Targets (issue 9, requirement 8):
    ratio >= 1.0 at both shapes, >= 70 % of SGEMM at the large shape.
  --gpu (requirement 4): tpx-train-cuda --mesh 1x1, fp32 and --bf16, each also with --cuda-graph
    (the step recorded once as a CUDA graph and replayed), against bench/peers/
    torch_mlp.py eager and torch.compile, fp32 and bf16 autocast, at gpu-h100.md's shape (B=8192,
    D=1024, F=4096, L=4, context 3) and the demo shape; samples/s and the ratios of the targets
    (bf16 >= 1.0x eager bf16 and >= 0.8x compile bf16, fp32 >= 1.0x eager fp32, demo >= 1.0x
    eager). Run on an H200 on 2026-11-27: bench/README.md has the figures.
  --gpt (issue 11): tpx-gpt-cuda --mesh 1x1 --bf16, with the reference attention, with
    --fused-attention, and with both --fused-attention and --cuda-graph, against bench/peers/torch_gpt.py (the same transformer, SDPA attention,
    fused AdamW, bf16 autocast) eager and torch.compile, at GPT-2 124M's shape (B=16, T=1024, 12 heads of 64, F=3072, L=12, V=50304) and the test size;
    tokens/s, MFU against --peak-tflops and the ratios (target: tpx >= 1.1x torch.compile).
    Run on an H200 on 2026-11-27: bench/README.md has the figures.
  --attention (issue 11): the fused causal attention kernels alone (tpx-bench-cuda attention)
    against PyTorch's scaled_dot_product_attention with the flash backend (bench/peers/
    torch_sdpa.py), forward and backward, at B=16 x H=12 heads of E=64, T=1024 and 4096, bf16
    (--attention-types bf16,fp32 adds fp32, where SDPA has no flash kernel); ms per call,
    TFLOP/s as FlashAttention counts them (forward 4 B H T^2 E / 2, backward 2.5x) and the speed
    ratios SDPA ms / tpx ms (target: >= 0.9 forward and backward). Run on an H200 on
    2026-11-27: bench/README.md has the figures. --attention-kv-heads G compares grouped-query
    attention (G key and value heads; SDPA's enable_gqa): not yet measured.

On a shared machine --rounds R runs every host configuration R times, alternating the order, and
keeps each one's best round (the JSON keeps every round, with the load average before each run).
tpx-train is run from a copy in a temporary directory, so that a concurrent build cannot replace
the binary mid-run; its per-step times come from its --log JSONL (--report-every 1, so every
step ends with the loss read back, as the peers' steps end with a synchronization). The peers
run under --python (default: this interpreter), which needs jax (host) or torch (GPU).

  python3 bench/peers/compare.py                          # host table
  python3 bench/peers/compare.py --rounds 3               # the same, best of 3 interleaved rounds
  python3 bench/peers/compare.py --tpx build/default/examples/tpx-train --json peers.json
  python3 bench/peers/compare.py --gpu                    # on a GPU machine
  python3 bench/peers/compare.py --gpt                    # the GPT example, on a GPU machine
  python3 bench/peers/compare.py --attention              # the attention kernel, on a GPU machine
  python3 bench/peers/compare.py --attention --attention-kv-heads 4   # grouped-query
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VOCAB = 256

SHAPES = {  # name: (batch, d_model, ffn, layers, context)
    "demo": (64, 64, 256, 4, 3),
    "large": (1024, 512, 2048, 4, 3),
    "h100": (8192, 1024, 4096, 4, 3),
}


def flops_per_step(shape):
    b, d, f, l, _ = shape
    return 6.0 * b * (2.0 * d * f * l + d * VOCAB)


def shape_flags(shape):
    b, d, f, l, c = shape
    return ["--batch", str(b), "--d-model", str(d), "--ffn", str(f), "--layers", str(l),
            "--context", str(c)]


def find_binary(given, defaults, what):
    for path in ([given] if given else defaults):
        full = path if os.path.isabs(path) else os.path.join(ROOT, path)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    sys.exit(f"compare: no {what} at {given or ' or '.join(defaults)} (build it, or pass its path)")


SKIPPED = 77  # what tpx's CUDA programs exit with when there is no GPU


def run(cmd, env=None, timeout=1800):
    print("  $ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode == SKIPPED:
        sys.exit(f"compare: {os.path.basename(cmd[0])} {p.stdout.strip()}")
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def tpx_step_seconds(binary, mesh, flags, steps, warmup, workdir, extra=()):
    """The median step time of a tpx trainer run (from its --log), and its last loss."""
    log = os.path.join(workdir, f"tpx-{mesh}-{'-'.join(flags[1::2])}-{'_'.join(extra)}.jsonl")
    run([binary, "--mesh", mesh, "--steps", str(warmup + steps), "--log", log,
         "--log-every", "1000000", "--report-every", "1", *flags, *extra])
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    timed = [r["seconds"] for r in rows if r["step"] >= warmup]
    if len(timed) != steps:
        raise RuntimeError(f"tpx log {log}: {len(timed)} timed steps, expected {steps}")
    return statistics.median(timed), rows[-1]["loss"]


def run_tpx(binary, mesh, shape, steps, warmup, workdir, extra=()):
    sec, loss = tpx_step_seconds(binary, mesh, shape_flags(shape), steps, warmup, workdir, extra)
    return {"ms_per_step": sec * 1e3, "samples_per_s": shape[0] / sec,
            "gflops": flops_per_step(shape) / sec * 1e-9, "loss_last": loss}


def run_peer(python, script, args, env=None):
    out = run([python, os.path.join(HERE, script), *args], env=env)
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def attempt(results, key, job, brief):
    """Runs one configuration into results[key] and prints it at once. A failure is printed and
    left out, and the other configurations still run: on a GPU lent for minutes one broken mode
    (say --cuda-graph) must not cost every figure, nor a run cut off the figures made before."""
    try:
        results[key] = job()
    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
        print(f"  {key}: FAILED ({e})", flush=True)
        return
    print(f"  {key}: {brief(results[key])}", flush=True)


SGEMM_PROBE = r"""
import json, sys, time
import numpy as np
best = {}
for m, k, n in [(1024, 1024, 1024), (1024, 512, 2048)]:
    a = np.random.default_rng(0).standard_normal((m, k), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((k, n), dtype=np.float32)
    for _ in range(3):
        a @ b
    t = []
    for _ in range(int(sys.argv[1])):
        t0 = time.perf_counter(); a @ b; t.append(time.perf_counter() - t0)
    best[f"{m}x{k}x{n}"] = 2.0 * m * k * n / min(t) * 1e-9
print(json.dumps({"numpy": np.__version__, "gflops": best}))
"""


def sgemm_rate(python, threads, reps=20):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([python, "-c", SGEMM_PROBE, str(reps)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def fmt_ms(r):
    return f"{r['ms_per_step']:,.1f} ms ({r['gflops']:.0f})" if r['ms_per_step'] >= 10 else \
        f"{r['ms_per_step']:.2f} ms ({r['gflops']:.1f})"


def host(a):
    tpx = find_binary(a.tpx, ["build/default/examples/tpx-train", "build/dev/examples/tpx-train"],
                      "tpx-train")
    workdir = tempfile.mkdtemp(prefix="tpx-peers-")
    binary = os.path.join(workdir, "tpx-train")
    shutil.copy2(tpx, binary)
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"compare: tpx-train {tpx} (run from a copy in {workdir}), peers with {a.python}; "
          f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, {os.cpu_count()} cores, {started}")
    meshes = ["1x1", "2x1", "1x2", "2x2"]
    steps = {"demo": (a.demo_steps, a.demo_warmup), "large": (a.large_steps, a.large_warmup)}
    shapes = a.shapes.split(",")
    for name in shapes:
        shape, (n, w) = SHAPES[name], steps[name]
        print(f"shape {name}: B={shape[0]} D={shape[1]} F={shape[2]} L={shape[3]} context={shape[4]}, "
              f"{n} timed steps after {w}")

    def jobs(name):
        shape, (n, w) = SHAPES[name], steps[name]
        common = shape_flags(shape) + ["--steps", str(n), "--warmup", str(w)]
        out = {f"tpx {m}": (lambda m=m: run_tpx(binary, m, shape, n, w, workdir)) for m in meshes}
        out["jax 1"] = lambda: run_peer(a.python, "jax_mlp.py", common + ["--devices", "1"])
        out["jax 2x2"] = lambda: run_peer(a.python, "jax_mlp.py",
                                          common + ["--devices", "4", "--mesh", "2x2"])
        return out

    # Every round runs every configuration once, in alternating order (so that neither side
    # always runs last, when a build starting on the machine would hit it); each configuration
    # keeps its best round.
    runs = {name: {} for name in shapes}
    probes1, probes2 = [], []
    for rnd in range(a.rounds):
        print(f"round {rnd + 1} of {a.rounds}")
        for name in shapes:
            todo = list(jobs(name).items())
            for key, job in (todo if rnd % 2 == 0 else todo[::-1]):
                load = os.getloadavg()[0]
                res = job()
                res.update(round=rnd, load_before=load)
                runs[name].setdefault(key, []).append(res)
        probes1.append(sgemm_rate(a.python, 1))
        probes2.append(sgemm_rate(a.python, 2))
    results = {name: {k: min(v, key=lambda x: x["ms_per_step"]) for k, v in r.items()}
               for name, r in runs.items()}
    best_of = lambda probes: {k: max(p["gflops"][k] for p in probes) for k in probes[0]["gflops"]}
    probe1 = {"numpy": probes1[0]["numpy"], "gflops": best_of(probes1)}
    probe2 = {"numpy": probes2[0]["numpy"], "gflops": best_of(probes2)}
    sgemm = max(probe2["gflops"].values())
    load1 = os.getloadavg()
    max_load = max(x["load_before"] for r in runs.values() for v in r.values() for x in v)

    cols = [f"tpx {m}" for m in meshes] + ["jax 1", "jax 2x2"]
    heads = [f"tpx-train {m}" for m in meshes] + ["JAX jit, 1 device", "JAX, 2x2 forced host devices"]
    print()
    print(f"ms per step, median of the timed steps, best of {a.rounds} round(s) (matrix GFLOP/s); "
          f"load average {load0[0]:.2f} at start, {load1[0]:.2f} at end, at most {max_load:.2f} "
          f"before a run")
    print("| shape | " + " | ".join(heads) + " | tpx best / JAX best (speed) |")
    print("|---|" + "---|" * (len(heads) + 1))
    summary = {}
    for name, r in results.items():
        b, d, f, l, c = SHAPES[name]
        tpx_best = min((k for k in cols if k.startswith("tpx")), key=lambda k: r[k]["ms_per_step"])
        jax_best = min((k for k in cols if k.startswith("jax")), key=lambda k: r[k]["ms_per_step"])
        ratio = r[jax_best]["ms_per_step"] / r[tpx_best]["ms_per_step"]
        summary[name] = {"tpx_best": tpx_best, "jax_best": jax_best, "ratio": ratio}
        cells = [("**" + fmt_ms(r[k]) + "**") if k in (tpx_best, jax_best) else fmt_ms(r[k]) for k in cols]
        print(f"| {name} (B={b}, D={d}, F={f}, L={l}) | " + " | ".join(cells) +
              f" | {ratio:.2f} ({tpx_best} / {jax_best}) |")
    print()
    if "large" in results:
        best = summary["large"]["tpx_best"]
        g = results["large"][best]["gflops"]
        summary["sgemm"] = {"gflops_2_threads": sgemm, "tpx_best_gflops": g, "share": g / sgemm}
        print(f"SGEMM (numpy {probe2['numpy']} OpenBLAS, best of 20 per round): 2 threads "
              + ", ".join(f"{k} {v:.1f}" for k, v in probe2["gflops"].items())
              + " GFLOP/s; 1 thread " + ", ".join(f"{k} {v:.1f}" for k, v in probe1["gflops"].items()))
        print(f"large shape: tpx best ({best}) {g:.1f} GFLOP/s = {100 * g / sgemm:.0f} % of the "
              f"2-thread SGEMM rate {sgemm:.1f} GFLOP/s (target >= 70 %)")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"bench": "peers-host", "tpx": tpx, "started": started, "load_start": load0,
                       "load_end": load1, "rounds": a.rounds, "results": results, "runs": runs,
                       "summary": summary, "sgemm": {"1": probe1, "2": probe2}}, out, indent=1)
        print(f"json: {a.json}")
    shutil.rmtree(workdir, ignore_errors=True)


def gpu(a):
    tpx = find_binary(a.tpx_cuda, ["build/cuda/examples/tpx-train-cuda",
                                   "build/dev-cuda/examples/tpx-train-cuda"], "tpx-train-cuda")
    workdir = tempfile.mkdtemp(prefix="tpx-peers-gpu-")
    binary = os.path.join(workdir, "tpx-train-cuda")
    shutil.copy2(tpx, binary)
    check = "import torch" + ("; assert torch.cuda.is_available()" if a.torch_device == "cuda" else "")
    have_torch = subprocess.run([a.python, "-c", check], capture_output=True).returncode == 0
    if not have_torch:
        print(f"compare: {a.python} has no torch with CUDA: the PyTorch columns are left out "
              "(pip install torch)")
    print(f"compare --gpu: tpx-train-cuda {tpx} (run from a copy), peers with {a.python}")
    results = {}
    for name in a.gpu_shapes.split(","):
        shape = SHAPES[name]
        n, w = a.gpu_steps, a.gpu_warmup
        print(f"shape {name}: B={shape[0]} D={shape[1]} F={shape[2]} L={shape[3]} context={shape[4]}, "
              f"{n} timed steps after {w}")
        r = {}
        brief = lambda v: f"{v['samples_per_s']:,.0f} samples/s ({v['ms_per_step']:.3f} ms)"
        for key, extra in (("tpx fp32", ()), ("tpx bf16", ("--bf16",)),
                           ("tpx fp32 graph", ("--cuda-graph",)),
                           ("tpx bf16 graph", ("--bf16", "--cuda-graph"))):
            attempt(r, key, lambda extra=extra: run_tpx(binary, "1x1", shape, n, w, workdir, extra), brief)
        if have_torch:
            common = ["--device", a.torch_device] + shape_flags(shape) + ["--steps", str(n), "--warmup", str(w)]
            for mode in ("eager", "compile"):
                for dt in ("fp32", "bf16"):
                    extra = ["--dtype", dt] + (["--compile"] if mode == "compile" else [])
                    attempt(r, f"torch {mode} {dt}",
                            lambda extra=extra: run_peer(a.python, "torch_mlp.py", common + extra), brief)
        results[name] = r
    print()
    print("samples/s (ms per step)")
    for name, r in results.items():
        print(f"shape {name} {SHAPES[name]}:")
        for k, v in r.items():
            print(f"  {k:22s} {v['samples_per_s']:>12,.0f} samples/s  ({v['ms_per_step']:.3f} ms, "
                  f"{v['gflops'] / 1e3:.1f} TFLOP/s)")
        targets = [("tpx fp32", "torch eager fp32", 1.0), ("tpx fp32", "torch compile fp32", None),
                   ("tpx bf16", "torch eager bf16", 1.0), ("tpx bf16", "torch compile bf16", 0.8)]
        targets += [(mine + " graph", peer, target) for mine, peer, target in targets]
        for mine, peer, target in targets:
            if mine in r and peer in r:
                ratio = r[mine]["samples_per_s"] / r[peer]["samples_per_s"]
                goal = f"target >= {target}" if target else "no target"
                ok = "" if target is None else (" met" if ratio >= target else " NOT met")
                print(f"  {mine} / {peer}: {ratio:.2f}x ({goal}{ok})")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"bench": "peers-gpu", "tpx": tpx, "results": results}, out, indent=1)
        print(f"json: {a.json}")
    shutil.rmtree(workdir, ignore_errors=True)


GPT_SHAPES = {  # name: (batch, seq, heads, head_dim, ffn, layers, vocab)
    "gpt2": (16, 1024, 12, 64, 3072, 12, 50304),  # GPT-2 124M, issue 11's target shape
    "small": (16, 64, 4, 16, 256, 2, 256),         # examples/gpt's test size: launch-bound
}


def gpt_flags(shape):
    b, t, h, e, f, l, v = shape
    return ["--batch", str(b), "--seq", str(t), "--heads", str(h), "--head-dim", str(e),
            "--ffn", str(f), "--layers", str(l), "--vocab", str(v)]


def gpt_flops_per_token(shape):  # examples/gpt/family.hpp's and torch_gpt.py's count
    _, t, h, e, f, l, v = shape
    d = h * e
    return 6.0 * (l * (4 * d * d + 2 * d * f) + d * v) + 12.0 * l * t * d


def gpt(a):
    tpx = find_binary(a.tpx_gpt_cuda, ["build/cuda/examples/tpx-gpt-cuda"], "tpx-gpt-cuda")
    workdir = tempfile.mkdtemp(prefix="tpx-peers-gpt-")
    binary = os.path.join(workdir, os.path.basename(tpx))
    shutil.copy2(tpx, binary)
    print(f"compare --gpt: {tpx} (run from a copy) against bench/peers/torch_gpt.py with "
          f"{a.python}, bf16, one GPU, MFU against {a.peak_tflops} TFLOP/s")
    results = {}
    for name in a.gpt_shapes.split(","):
        shape = GPT_SHAPES[name]
        n, w = a.gpu_steps, a.gpu_warmup
        print(f"shape {name}: B={shape[0]} T={shape[1]} {shape[2]} heads of {shape[3]} F={shape[4]} "
              f"L={shape[5]} V={shape[6]}, {n} timed steps after {w}")
        tokens = shape[0] * shape[1]
        r = {}
        mfu = lambda v: gpt_flops_per_token(shape) * v["tokens_per_s"] / (a.peak_tflops * 1e12)
        brief = lambda v: f"{v['tokens_per_s']:,.0f} tokens/s ({v['ms_per_step']:.2f} ms, MFU {100 * mfu(v):.1f}%)"

        def run_gpt(extra):
            sec, loss = tpx_step_seconds(binary, "1x1", gpt_flags(shape), n, w, workdir, extra)
            return {"ms_per_step": sec * 1e3, "tokens_per_s": tokens / sec, "loss_last": loss}
        for key, extra in (("tpx bf16", ("--bf16",)), ("tpx bf16 fused", ("--bf16", "--fused-attention")),
                           ("tpx bf16 fused graph", ("--bf16", "--fused-attention", "--cuda-graph"))):
            attempt(r, key, lambda extra=extra: run_gpt(extra), brief)
        common = (["--device", a.torch_device, "--dtype", "bf16", "--steps", str(n), "--warmup", str(w)]
                  + gpt_flags(shape))
        for mode in ("eager", "compile"):
            attempt(r, f"torch {mode} bf16",
                    lambda mode=mode: run_peer(a.python, "torch_gpt.py",
                                               common + (["--compile"] if mode == "compile" else [])),
                    brief)
        for v in r.values():
            v["mfu"] = mfu(v)
        results[name] = r
    print()
    for name, r in results.items():
        print(f"shape {name} {GPT_SHAPES[name]}:")
        for k, v in r.items():
            print(f"  {k:20s} {v['tokens_per_s']:>12,.0f} tokens/s  ({v['ms_per_step']:.2f} ms, "
                  f"MFU {100 * v['mfu']:.1f}%)")
        for mine in ("tpx bf16", "tpx bf16 fused", "tpx bf16 fused graph"):
            for peer, target in (("torch eager bf16", None), ("torch compile bf16", 1.1)):
                if mine not in r or peer not in r:
                    continue
                ratio = r[mine]["tokens_per_s"] / r[peer]["tokens_per_s"]
                goal = f"target >= {target}" if target else "no target"
                ok = "" if target is None else (" met" if ratio >= target else " NOT met")
                print(f"  {mine} / {peer}: {ratio:.2f}x ({goal}{ok})")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"bench": "peers-gpt", "tpx": tpx, "peak_tflops": a.peak_tflops,
                       "results": results}, out, indent=1)
        print(f"json: {a.json}")
    shutil.rmtree(workdir, ignore_errors=True)


def attention(a):
    tpx = find_binary(a.tpx_bench_cuda, ["build/cuda/bench/cuda/tpx-bench-cuda"], "tpx-bench-cuda")
    workdir = tempfile.mkdtemp(prefix="tpx-peers-attention-")
    binary = os.path.join(workdir, os.path.basename(tpx))
    shutil.copy2(tpx, binary)
    b, h, e = a.attention_batch, a.attention_heads, a.attention_head_dim
    g = a.attention_kv_heads or h
    n, w = a.gpu_steps, a.gpu_warmup
    grouped = f" ({g} key and value heads)" if g != h else ""
    print(f"compare --attention: {tpx} (run from a copy) against bench/peers/torch_sdpa.py with "
          f"{a.python}; causal, {b} x {h} heads of {e}{grouped}, T={a.attention_lengths}, "
          f"{a.attention_types}, {n} timed calls after {w}")
    tpx_json = os.path.join(workdir, "attention.json")
    run([binary, "attention", "-B", str(b), "-H", str(h), "-G", str(g), "-E", str(e),
         "-T", a.attention_lengths, "-t", a.attention_types, "-n", str(n), "-w", str(w),
         "--json", tpx_json])
    with open(tpx_json) as f:
        tpx_rows = json.load(f)["rows"]
    sdpa = run_peer(a.python, "torch_sdpa.py",
                    ["--device", a.torch_device, "--types", a.attention_types, "--batch", str(b),
                     "--heads", str(h), "--kv-heads", str(g), "--head-dim", str(e),
                     "--lengths", a.attention_lengths,
                     "--steps", str(n), "--warmup", str(w)])
    sdpa_rows = {(r["type"], r["t"]): r for r in sdpa["rows"]}
    target = 0.9
    print()
    print(f"ms per call (TFLOP/s); ratio = SDPA ms / tpx ms (target >= {target}); "
          f"PyTorch {sdpa['version']} on {sdpa['device_name']}")
    print("| shape | tpx forward | SDPA forward | ratio | tpx backward | SDPA backward | ratio "
          "| SDPA backend | tpx max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    results, missed = [], []
    for r in tpx_rows:
        peer = sdpa_rows[(r["type"], r["t"])]
        row = {"tpx": r, "sdpa": peer}
        cells = []
        for way in ("forward", "backward"):
            ratio = peer[f"{way}_ms"] / r[f"{way}_ms"]
            row[f"{way}_ratio"] = ratio
            if ratio < target:
                missed.append(f"{r['type']} T={r['t']} {way} {ratio:.2f}")
            cells += [f"{r[f'{way}_ms']:.3f} ({r[f'{way}_tflops']:.1f})",
                      f"{peer[f'{way}_ms']:.3f} ({peer[f'{way}_tflops']:.1f})", f"{ratio:.2f}"]
        results.append(row)
        heads = f"{b}x{h}" + (f" ({g} kv)" if g != h else "")
        print(f"| {r['type']} {heads}, T={r['t']}, E={e} | " + " | ".join(cells) +
              f" | {peer['backend']} | {r['max_rel_diff']:.2g} |")
    print()
    print(f"target >= {target}x SDPA forward and backward: " +
          ("met" if not missed else "NOT met (" + ", ".join(missed) + ")"))
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"bench": "peers-attention", "tpx": tpx, "target": target, "torch": sdpa,
                       "results": results}, out, indent=1)
        print(f"json: {a.json}")
    shutil.rmtree(workdir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", action="store_true", help="tpx-train-cuda against PyTorch on one GPU")
    p.add_argument("--gpt", action="store_true",
                   help="tpx-gpt-cuda against bench/peers/torch_gpt.py on one GPU (issue 11)")
    p.add_argument("--attention", action="store_true",
                   help="tpx's fused attention kernels against PyTorch's SDPA (flash) on one GPU "
                        "(issue 11)")
    p.add_argument("--tpx", help="tpx-train (default build/default/examples/tpx-train, "
                                 "else build/dev/examples/tpx-train)")
    p.add_argument("--tpx-cuda", help="tpx-train-cuda (default build/cuda/examples/tpx-train-cuda, "
                                      "else build/dev-cuda/examples/tpx-train-cuda)")
    p.add_argument("--tpx-gpt-cuda", help="tpx-gpt-cuda (default build/cuda/examples/tpx-gpt-cuda)")
    p.add_argument("--tpx-bench-cuda",
                   help="tpx-bench-cuda (default build/cuda/bench/cuda/tpx-bench-cuda)")
    p.add_argument("--attention-batch", type=int, default=16)
    p.add_argument("--attention-heads", type=int, default=12)
    p.add_argument("--attention-kv-heads", type=int, default=0,
                   help="--attention: key and value heads, dividing --attention-heads: "
                        "grouped-query attention (0: as many as query heads)")
    p.add_argument("--attention-head-dim", type=int, default=64)
    p.add_argument("--attention-lengths", default="1024,4096", help="--attention: sequence lengths T")
    p.add_argument("--attention-types", default="bf16", help="--attention: bf16, fp32 (comma-separated)")
    p.add_argument("--gpt-shapes", default="gpt2,small", help="--gpt shapes: gpt2,small")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="--gpt: the GPU's dense bf16 peak for MFU (H100 SXM: 989)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the peer scripts")
    p.add_argument("--shapes", default="demo,large", help="host shapes: demo,large")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every host configuration this many times, alternating the order; "
                        "each keeps its best round")
    p.add_argument("--demo-steps", type=int, default=30)
    # 100 demo steps (0.1-0.2 s) before timing: for about 0.1 s after start-up OpenBLAS's idle
    # worker threads spin (its THREAD_TIMEOUT) on the cores the tpx ranks of a 2-rank mesh need.
    p.add_argument("--demo-warmup", type=int, default=100)
    p.add_argument("--large-steps", type=int, default=8)
    p.add_argument("--large-warmup", type=int, default=2)
    p.add_argument("--gpu-shapes", default="h100,demo", help="GPU shapes: h100,demo")
    p.add_argument("--gpu-steps", type=int, default=30)
    p.add_argument("--gpu-warmup", type=int, default=10)
    p.add_argument("--torch-device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: try --gpu's code path on a machine without a GPU (with --tpx-cuda "
                        "pointing at the host tpx-train); the figures then mean nothing")
    p.add_argument("--json", help="write every figure to this file")
    a = p.parse_args()
    attention(a) if a.attention else gpt(a) if a.gpt else gpu(a) if a.gpu else host(a)


if __name__ == "__main__":
    main()
