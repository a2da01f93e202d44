#!/usr/bin/env python3
"""jax_mlp.py: the example trainer's model (examples/trainer/model.hpp) in JAX, timed per step.

tpx is worth using only if its typed step is as fast as what a user gets from a framework for
the same model. This is that model as a JAX user would write it: a byte-level LM (vocab 256),
`--context` embedding tables summed (x = sum_k E_k[token_k]), L residual blocks
x += GELU_tanh(RMSNorm(x) W_in) W_out (RMSNorm eps 1e-5 with a learned weight, no biases), a final
RMSNorm, a head [D, V] and the mean cross-entropy of the next byte; tpx's init (N(0, 1/fan_in)
matrices, embeddings fan_in 1, ones for norms), clipping of the global gradient norm to 1.0 and
AdamW (lr 3e-3, betas 0.9/0.95, eps 1e-8, no weight decay), written out by hand so that the
script needs nothing but jax. The whole step (forward, backward, clipping, AdamW) is one jitted
function. Batches are random bytes (only the step time matters here), or with --text FILE
windows of context + 1 bytes at random positions of a file, as tpx-train draws them, to check
that the loss falls as tpx-train's does.

With --devices N > 1 the script forces N host devices (XLA_FLAGS=
--xla_force_host_platform_device_count=N) and shards as tpx-train does on an X x Y mesh: the
batch over X, parameters FSDP over X and tensor-parallel over Y (E_k[V_X, D_Y], W_in[D_X, F_Y],
W_out[F_Y, D_X], Head[D_X, V_Y], norms [D_YX]), activations [B_X, D_Y] and [B_X, F_Y], by
NamedSharding; XLA inserts the collectives. --dtype bf16 computes in bf16 with fp32 master
weights and moments (tpx-train --bf16).

Prints the median step time over --steps timed steps after --warmup (the first includes the
compilation), samples/s and matrix GFLOP/s (6 B (2 D F L + D V), tpx-train's count), then one
JSON line. bench/peers/compare.py runs it beside tpx-train.

  python3 bench/peers/jax_mlp.py --batch 1024 --d-model 512 --ffn 2048 --steps 8 --warmup 2
  python3 bench/peers/jax_mlp.py --devices 4 --mesh 2x2
"""
import argparse
import json
import os
import statistics
import sys
import time

VOCAB = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--context", type=int, default=3)
    p.add_argument("--steps", type=int, default=30, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--devices", type=int, default=1,
                   help="forced host devices (XLA_FLAGS=--xla_force_host_platform_device_count)")
    p.add_argument("--mesh", default=None,
                   help="XxY over the devices (X: batch/FSDP, Y: tensor parallel); "
                        "default 2x2 for 4 devices, else Nx1")
    p.add_argument("--platform", default="cpu", help="JAX_PLATFORMS (default cpu)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--text", help="train on windows of this file (default: random bytes)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0)
    a = p.parse_args(argv)
    if a.mesh is None:
        a.mesh = "2x2" if a.devices == 4 else f"{a.devices}x1"
    mx, my = (int(s) for s in a.mesh.lower().split("x"))
    if mx * my != a.devices:
        p.error(f"--mesh {a.mesh} has {mx * my} devices, --devices is {a.devices}")
    a.mesh_x, a.mesh_y = mx, my
    if a.steps < 1 or a.warmup < 1:
        p.error("--steps and --warmup must be at least 1 (the first step compiles)")
    return a


def main(argv=None):
    a = parse_args(argv)
    # Both must be set before jax is imported.
    os.environ.setdefault("JAX_PLATFORMS", a.platform)
    if a.devices > 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (
            flags + f" --xla_force_host_platform_device_count={a.devices}").strip()

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    if len(jax.devices()) < a.devices:
        sys.exit(f"jax_mlp: {a.devices} devices asked, jax sees {len(jax.devices())}")
    B, D, F, L, C, V = a.batch, a.d_model, a.ffn, a.layers, a.context, VOCAB
    cdt = jnp.bfloat16 if a.dtype == "bf16" else jnp.float32

    # Parameters (fp32 masters), tpx's init.
    rng = np.random.default_rng(a.seed)

    def normal(shape, fan_in):
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32)

    params = {
        "embed": [normal((V, D), 1.0) for _ in range(C)],
        "norm": [np.ones((D,), np.float32) for _ in range(L)],
        "w_in": [normal((D, F), D) for _ in range(L)],
        "w_out": [normal((F, D), F) for _ in range(L)],
        "final_norm": np.ones((D,), np.float32),
        "head": normal((D, V), D),
    }
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))

    # Shardings: tpx-train's, when there is a mesh.
    if a.devices > 1:
        mesh = Mesh(np.array(jax.devices()[: a.devices]).reshape(a.mesh_x, a.mesh_y), ("x", "y"))

        def sharding(*spec):
            return NamedSharding(mesh, P(*spec))

        specs = {
            "embed": [sharding("x", "y")] * C,           # E_k[V_X, D_Y]
            "norm": [sharding(("y", "x"))] * L,          # [D_YX]
            "w_in": [sharding("x", "y")] * L,            # [D_X, F_Y]
            "w_out": [sharding("y", "x")] * L,           # [F_Y, D_X]
            "final_norm": sharding(("y", "x")),
            "head": sharding("x", "y"),                  # [D_X, V_Y]
        }
        token_sharding = sharding("x", None)             # tokens[B_X, W]
        act_sharding = sharding("x", "y")                # x[B_X, D_Y], a[B_X, F_Y], logits[B_X, V_Y]

        def constrain(t):
            return jax.lax.with_sharding_constraint(t, act_sharding)

        params = jax.tree.map(lambda x, s: jax.device_put(x, s), params, specs)
    else:
        token_sharding = None
        params = jax.tree.map(jnp.asarray, params)

        def constrain(t):
            return t

    def rmsnorm(x, w):
        xf = x.astype(jnp.float32)
        rstd = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-5)
        return (xf * rstd * w).astype(cdt)

    def loss_fn(p, tokens):
        x = p["embed"][0].astype(cdt)[tokens[:, 0]]
        for k in range(1, C):
            x = x + p["embed"][k].astype(cdt)[tokens[:, k]]
        x = constrain(x)
        for l in range(L):
            h = rmsnorm(x, p["norm"][l])
            act = constrain(h @ p["w_in"][l].astype(cdt))
            g = jax.nn.gelu(act, approximate=True)
            x = x + constrain(g @ p["w_out"][l].astype(cdt))
        h = rmsnorm(x, p["final_norm"])
        logits = constrain(h @ p["head"].astype(cdt)).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[:, C:C + 1], axis=1))

    b1, b2, eps, wd = 0.9, 0.95, 1e-8, 0.0

    def train_step(p, m, v, step, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(p, tokens)
        leaves_p, tree = jax.tree.flatten(p)
        leaves_g, leaves_m, leaves_v = (jax.tree.leaves(t) for t in (grads, m, v))
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in leaves_g))
        scale = jnp.where(norm > a.clip, a.clip / norm, 1.0)
        t = (step + 1).astype(jnp.float32)
        bc1, bc2 = 1.0 - b1 ** t, 1.0 - b2 ** t
        new_p, new_m, new_v = [], [], []
        for pi, gi, mi, vi in zip(leaves_p, leaves_g, leaves_m, leaves_v):
            gi = gi * scale
            mi = b1 * mi + (1.0 - b1) * gi
            vi = b2 * vi + (1.0 - b2) * gi * gi
            pi = pi - a.lr * ((mi / bc1) / (jnp.sqrt(vi / bc2) + eps) + wd * pi)
            new_p.append(pi)
            new_m.append(mi)
            new_v.append(vi)
        unflat = lambda leaves: jax.tree.unflatten(tree, leaves)
        return unflat(new_p), unflat(new_m), unflat(new_v), loss, norm

    step_fn = jax.jit(train_step, donate_argnums=(0, 1, 2))
    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)

    total = a.warmup + a.steps
    data_rng = np.random.default_rng(a.seed + 1)
    if a.text:
        text = np.frombuffer(open(a.text, "rb").read(), dtype=np.uint8)
        starts = data_rng.integers(0, len(text) - C, size=(total, B))
        batches = text[starts[..., None] + np.arange(C + 1)].astype(np.int32)
    else:
        batches = data_rng.integers(0, V, size=(total, B, C + 1), dtype=np.int32)

    times, losses = [], []
    for i in range(total):
        t0 = time.perf_counter()
        tokens = jax.device_put(batches[i], token_sharding) if token_sharding else jnp.asarray(batches[i])
        params, m, v, loss, norm = step_fn(params, m, v, jnp.int32(i), tokens)
        loss = float(loss)  # waits for the step
        times.append(time.perf_counter() - t0)
        losses.append(loss)

    timed = times[a.warmup:]
    sec = statistics.median(timed)
    flops = 6.0 * B * (2.0 * D * F * L + D * V)
    result = {
        "bench": "jax_mlp", "framework": "jax", "version": jax.__version__,
        "platform": jax.devices()[0].platform, "devices": a.devices, "mesh": a.mesh,
        "dtype": a.dtype, "batch": B, "d_model": D, "ffn": F, "layers": L, "context": C,
        "vocab": V, "params": n_params, "steps": a.steps, "warmup": a.warmup,
        "ms_per_step": sec * 1e3, "ms_per_step_min": min(timed) * 1e3,
        "first_step_ms": times[0] * 1e3, "samples_per_s": B / sec, "gflops": flops / sec * 1e-9,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    print(f"jax_mlp: jax {jax.__version__} {result['platform']}, {a.devices} device(s), mesh {a.mesh}, "
          f"{a.dtype}, B={B} D={D} F={F} L={L} context={C}, {n_params} parameters")
    print(f"jax_mlp: median {sec * 1e3:.2f} ms/step over {a.steps} steps (min {min(timed) * 1e3:.2f}, "
          f"first {times[0] * 1e3:.0f} ms with compilation) | {B / sec:.0f} samples/s | "
          f"{flops / sec * 1e-9:.1f} GFLOP/s | loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
