#!/usr/bin/env python3
"""tools/phase_compare.py: the modelled clock against the measured one, per training phase.

Reads two Chrome traces written by `furnace train --trace` for the same scenario: one measured on a
GPU (--backend cuda: CUDA events) and one modelled by the simulator (--backend sim --topology h200).
Prints, per phase (h2d, forward, loss, backward, optimizer) and for the whole step, the median over
steps (the first `--skip` steps are warm-up and left out) of each, and modelled / measured. Exit
status 1 when the whole step is outside +-TOL (default 25%); the per-phase figures are reported.
Writes the table as JSON with --json FILE.

  tools/phase_compare.py MEASURED.json MODELLED.json [--skip 2] [--tol 0.25] [--json out.json]
"""
import argparse
import json
import statistics
import sys

PHASES = ["h2d", "forward", "loss", "backward", "optimizer"]


def per_step(path, device=0):
    with open(path) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    steps = {}
    for e in events:
        if e.get("cat") != "phase" or e.get("name") not in PHASES or e.get("pid", 0) != device:
            continue
        step = e.get("args", {}).get("step", 0)
        steps.setdefault(step, {}).setdefault(e["name"], 0.0)
        steps[step][e["name"]] += e.get("dur", 0.0)  # microseconds
    if not steps:
        sys.exit(f"phase_compare.py: {path} has no training phases (was it written by furnace train --trace?)")
    return steps


def medians(steps, skip):
    keys = sorted(steps)[skip:] or sorted(steps)
    out = {p: statistics.median(steps[k].get(p, 0.0) for k in keys) for p in PHASES}
    out["step"] = statistics.median(sum(steps[k].get(p, 0.0) for p in PHASES) for k in keys)
    return out, len(keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("measured")
    ap.add_argument("modelled")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--tol", type=float, default=0.25)
    ap.add_argument("--json")
    a = ap.parse_args()
    measured, n = medians(per_step(a.measured), a.skip)
    modelled, _ = medians(per_step(a.modelled), a.skip)
    rows = []
    print(f"{'phase':<10} {'modelled us':>12} {'measured us':>12} {'model/meas':>11}   (median of {n} steps)")
    for p in PHASES + ["step"]:
        ratio = modelled[p] / measured[p] if measured[p] > 0 else float("nan")
        rows.append({"phase": p, "modelled_us": modelled[p], "measured_us": measured[p], "ratio": ratio})
        print(f"{p:<10} {modelled[p]:>12.1f} {measured[p]:>12.1f} {ratio:>10.2f}x")
    ok = abs(rows[-1]["ratio"] - 1.0) <= a.tol
    print(f"whole step: modelled {modelled['step']:.1f} us vs measured {measured['step']:.1f} us: "
          f"{'within' if ok else 'OUTSIDE'} +-{a.tol:.0%}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": n, "tolerance": a.tol, "within": ok, "phases": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
