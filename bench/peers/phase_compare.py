#!/usr/bin/env python3
"""phase_compare.py: where a step's time goes in tpx and in its PyTorch peer, phase by phase.

tpx's trainers with --profile-phases --log FILE end their log with the step's phases ("phases":
name, ms and marks per step, in the order the step first marks them; examples/trainer/
phase_table.hpp), and the PyTorch peers with --profile-phases end their output with a JSON line
holding the same fields for an eager step marked under the same names (torch_common.PhaseClock).
This puts the two side by side, the phases where tpx takes the longest over the peer first, so a
gap between the two steps' times reads as the phases it comes from:

  python3 bench/peers/phase_compare.py profile-phases-gpt.jsonl profile-phases-torch-gpt.txt

A phase only one side marks (tpx's "batch upload" and "block weights", where PyTorch has no
upload and casts inside its products) shows "-" on the other and counts whole in the difference.
"(in no phase)" is each step's time outside every phase (on a GPU, the stream idle before the
first mark and between a phase's end and the next mark). Both inputs should come from one
machine, one run after the other: the figures are as comparable as the two runs' conditions.
"""
import argparse
import json
import signal
import sys


def last_phases(path):
    """The last JSON object in the file (one per line) that has "phases"."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        sys.exit(f"phase_compare: cannot read {path}: {e.strerror}")
    for line in reversed(lines):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "phases" in row:
            return row
    sys.exit(f"phase_compare: {path} has no line with \"phases\" "
             "(was it made with --profile-phases, and for tpx with --log?)")


def side(row):
    """{name: ms per step} and the step's ms, with "(in no phase)" as one more phase."""
    phases = {p["name"]: p["ms_per_step"] for p in row["phases"]}
    step = row["phase_ms_per_step"]
    phases["(in no phase)"] = step - sum(phases.values())
    return phases, step


def compare(tpx_row, peer_row):
    """Rows (name, tpx ms or None, peer ms or None, tpx - peer), the largest difference first,
    and the two steps' ms."""
    tpx, tpx_step = side(tpx_row)
    peer, peer_step = side(peer_row)
    names = list(tpx) + [n for n in peer if n not in tpx]
    rows = [(n, tpx.get(n), peer.get(n), (tpx.get(n) or 0.0) - (peer.get(n) or 0.0)) for n in names]
    rows.sort(key=lambda r: -r[3])
    return rows, tpx_step, peer_step


def peer_label(row):
    mode = "compile" if row.get("compile") else "eager"
    return f"{row.get('bench', 'peer')} ({mode} {row.get('dtype', '')})".replace(" )", ")")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tpx", help="tpx's --log file of a run with --profile-phases")
    p.add_argument("peer", help="the peer's output (or a file) of a run with --profile-phases")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args(argv)
    peer_row = last_phases(a.peer)
    rows, tpx_step, peer_step = compare(last_phases(a.tpx), peer_row)

    def ms(v):
        return f"{v:10.3f}" if v is not None else f"{'-':>10}"

    label = peer_label(peer_row)
    print(f"phases per step: tpx ({a.tpx}) against {label}, largest difference first")
    print(f"  {'phase':<28} {'tpx ms':>10} {'peer ms':>10} {'tpx - peer':>11}")
    for name, t, q, d in rows:
        print(f"  {name:<28} {ms(t)} {ms(q)} {d:+11.3f}")
    print(f"  {'step':<28} {ms(tpx_step)} {ms(peer_step)} {tpx_step - peer_step:+11.3f}")
    slower = sum(d for _, _, _, d in rows if d > 0)
    print(f"phase_compare: the phases where tpx is slower add up to {slower:.3f} ms per step; "
          f"the steps differ by {tpx_step - peer_step:+.3f} ms (tpx / peer time {tpx_step / peer_step:.2f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tpx": a.tpx, "peer": label, "tpx_step_ms": tpx_step, "peer_step_ms": peer_step,
                       "rows": [{"phase": n, "tpx_ms": t, "peer_ms": q, "difference_ms": d}
                                for n, t, q, d in rows]}, f, indent=1)


if __name__ == "__main__":
    if hasattr(signal, "SIGPIPE"):  # `| head` ends the table quietly, as other commands' do
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
