#!/usr/bin/env python3
"""The PyTorch peers mark the phases tpx's trainers mark, so that bench/peers/phase_compare.py
sets like beside like: tpx-gpt and tpx-train run a few steps with --profile-phases, torch_gpt.py
and torch_mlp.py a few eager steps on the CPU with the same flag, and every phase either marks
must be marked by the other as often per step, but for the phases only tpx has (its batch upload,
its casts and gathers of the weights, the wait for its gradient reductions, and the "forward and
backward" that holds what a model marks nothing in). Each side's phases must fit in its step. The
peers refuse --profile-phases with --compile, saying why. Skipped (77) where the python that runs
the peers (TPX_PEERS_PYTHON, else this one) cannot import torch.

  python3 tests/scripts/peer_phases_test.py SOURCE_DIR TPX_GPT TPX_TRAIN
"""
import os
import subprocess
import sys
import tempfile

TPX_ONLY = {"batch upload", "block weights", "gradient reductions (wait)", "forward and backward"}


def run(args):
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited with {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    source, tpx_gpt, tpx_train = sys.argv[1:4]
    sys.path.insert(0, os.path.join(source, "bench", "peers"))
    from phase_compare import last_phases  # the comparison's own reader of both outputs
    python = os.environ.get("TPX_PEERS_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"skipped: {python} cannot import torch (set TPX_PEERS_PYTHON to one that can)")
        return 77
    failures = 0

    def check(what, ok, detail=""):
        nonlocal failures
        print(("ok: " if ok else "FAILED: ") + what + ("" if ok else f"\n  {detail}"))
        failures += not ok

    peers = os.path.join(source, "bench", "peers")
    cases = [("GPT", tpx_gpt, "torch_gpt.py", ["--layers", "2"]),
             ("MLP", tpx_train, "torch_mlp.py", ["--layers", "2"])]
    with tempfile.TemporaryDirectory() as tmp:
        for name, tpx, peer, shape in cases:
            log, output = os.path.join(tmp, f"{name}.jsonl"), os.path.join(tmp, f"{name}-torch.txt")
            run([tpx, "--mesh", "1x1", "--steps", "4", "--log-every", "1000", "--log", log,
                 "--profile-phases"] + shape)
            with open(output, "w") as f:
                f.write(run([python, os.path.join(peers, peer), "--profile-phases", "--steps", "2",
                             "--warmup", "1", "--threads", "1"] + shape))
            ours, theirs = last_phases(log), last_phases(output)
            ours_marks = {p["name"]: p["marks_per_step"] for p in ours["phases"]}
            their_marks = {p["name"]: p["marks_per_step"] for p in theirs["phases"]}
            shared = {n: m for n, m in ours_marks.items() if n not in TPX_ONLY}
            check(f"{name}: {peer} marks every phase tpx marks, as often per step", their_marks == shared,
                  f"tpx (less its own phases): {shared}\n  {peer}: {their_marks}")
            check(f"{name}: tpx marks its block phases once per block (2)",
                  ours_marks.get("attention norm" if name == "GPT" else "norm") == 2.0, str(ours_marks))
            for who, row in (("tpx", ours), (peer, theirs)):
                total = sum(p["ms_per_step"] for p in row["phases"])
                check(f"{name}: {who}'s phases fit in its step ({total:.3f} <= {row['phase_ms_per_step']:.3f} ms)",
                      0 < total <= row["phase_ms_per_step"] * (1 + 1e-9))
        refused = subprocess.run([python, os.path.join(peers, "torch_gpt.py"), "--profile-phases", "--compile"],
                                 capture_output=True, text=True)
        check("--profile-phases with --compile is refused, saying why",
              refused.returncode == 2 and "--profile-phases times an eager step" in refused.stderr, refused.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
