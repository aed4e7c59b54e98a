#!/usr/bin/python3
"""The speed of the command users run: `furnace train` (its whole loop: the loader, the
normalisation, the trace bus, progress, accuracy) next to PyTorch 1.13 on the same CPU, in one run.

Each row is a ratio measured in pairs, the two sides alternated (A B, B A, A B, ...), and the
median of the pairs is reported, since these machines are shared and noisy:
  fp32      furnace train                      / PyTorch eager fp32 (the better of its two thread
                                                 settings, see pytorch())
  bf16      furnace train --amp bf16           / PyTorch CPU autocast bf16
  fp16      furnace train --amp fp16           / PyTorch CPU autocast bf16 (PyTorch's CPU autocast
                                                 has no fp16)
  dp-k      furnace train --parallel dp over k simulated GPUs of dgx-h100 / the same on one GPU
  ddp-k     furnace train --parallel ddp --nproc k on workstation-4x3090 (k ranks, each a thread
            with batch / k) / the same on one GPU at the same (global) batch (issue 17: the
            simulator's own wall-clock cost of DDP)
  gloo-k    furnace launch --nproc-per-node k -- furnace train --parallel ddp (k processes, Gloo
            between them) / ddp-k (the same ranks as threads of one process) (issue 18)
Besides samples/s (each side's own loop timing), each side's CPU seconds in its training loop
(user + sys, all threads; for furnace the process's less that of the same command stopped after
one step) are printed, which the load of other processes disturbs less, and the load average
before and after. With --one-core every command runs pinned to one logical CPU with one thread
(OpenBLAS, OpenMP and PyTorch's intra-op threads; furnace's own pools size themselves by the
affinity): the ratios are then of the work each side does per sample, and hold still (measured:
DDP over 4 ranks, pairs within 0.70x-0.74x on one core, 0.67x-1.16x on two, where the ratio
follows the host's scheduling of this VM's two vCPUs). The last row is OpenBLAS's sgemm rate at
the step's shapes (bench/step_sgemm_rate.cpp) and how much of it the fp32 training step reaches.
--batch sets the batch of every side (for DDP and DataParallel the global batch, as `furnace
train --batch`): most of DDP's and DataParallel's own costs are per step and per rank (each
rank's optimizer step over all parameters, its GEMMs packing the weights, the all-reduce), so
their ratios grow with the batch. Ends with one JSON line. Needs /usr/bin/python3 with torch
(Debian's python3-torch).

Usage: /usr/bin/python3 bench/train_command_bench.py [--build build/cpu-release] [--pairs 3]
       [--epochs 1] [--steps N] [--batch 256] [--torch-threads best|omp|blas]
       [--rows fp32,bf16,fp16,dp2,dp4,dp8,ddp2,ddp4,gloo2,gloo4] [--no-sgemm] [--one-core]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_SET = 60000  # Fashion-MNIST's training images
BATCH = 256  # the default --batch


ONE_CORE = None  # with --one-core: the logical CPU every command is pinned to


def run(cmd, env=None):
    """Runs cmd; returns (stdout, CPU seconds of the child: user + sys)."""
    env = dict(os.environ, **(env or {}))
    pin = None
    if ONE_CORE is not None:
        env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        pin = lambda: os.sched_setaffinity(0, {ONE_CORE})  # noqa: E731
    with tempfile.TemporaryFile(mode="w+") as err:  # a file: no pipe to fill while stdout is read
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, preexec_fn=pin)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            why = err.read().strip().splitlines()
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}" + (f"\n  {why[-1]}" if why else ""))
    return out, usage.ru_utime + usage.ru_stime


def cpu_features():
    """The CPU's model and the instruction sets both sides' 16-bit paths depend on: PyTorch's CPU
    bf16 autocast is fast only with AVX512_BF16 (oneDNN's bf16 dot products; without it about
    800 samples/s on the reference MLP), and Furnace's conversions take 16 lanes with AVX-512,
    8 with F16C."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, **{name: name in flags for name in ("avx2", "f16c", "avx512f", "avx512_bf16")}}


def openblas_kernel():
    """The kernel set OpenBLAS runs under this environment (openblas_get_corename, in a child)."""
    code = ("import ctypes; f = ctypes.CDLL('libopenblas.so.0').openblas_get_corename; "
            "f.restype = ctypes.c_char_p; print(f().decode())")
    return run(["/usr/bin/python3", "-c", code])[0].strip()


def samples(args):
    """The images each side trains on: the epochs, or the first --steps batches of the first."""
    return min(TRAIN_SET * args.epochs, args.steps * args.batch) if args.steps else TRAIN_SET * args.epochs


def furnace(args, extra, steps=None, launch=None):
    """(samples/s, the training loop's CPU seconds): the process's CPU time less that of the same
    command stopped after one step (loading and normalising the data, building the model). With
    `launch` (processes per node) the command runs under `furnace launch` and the CPU time is
    every rank's (launch reaps them); rank 0's JSON is the run's."""
    steps = steps or args.steps
    prefix = [args.furnace, "launch", "--nproc-per-node", str(launch), "--master-port", "0", "--no-prefix",
              "--"] if launch else []
    cmd = prefix + [args.furnace, "train", "--epochs", str(args.epochs), "--lr", "0.05", "--lr-schedule",
           "constant", "--no-eval", "--quiet", "--json", "--batch", str(args.batch)] + \
        (["--steps", str(steps)] if steps else []) + extra
    out, cpu = run(cmd)
    r = json.loads(out.strip().splitlines()[-1])
    if steps == 1:
        return r["samples_per_s"], cpu
    key = f"launch {launch} " * bool(launch) + " ".join(extra)
    if key not in STARTUP_CPU:
        STARTUP_CPU[key] = furnace(args, extra, steps=1, launch=launch)[1]
    loop_steps = steps or -(-TRAIN_SET * args.epochs // args.batch)
    return r["samples_per_s"], max(cpu - STARTUP_CPU[key], 1e-3) * loop_steps / (loop_steps - 1)


STARTUP_CPU = {}  # furnace's CPU seconds before its loop, by flags


def pytorch(args, amp):
    """PyTorch's better of two fair thread settings with `threads` in all: its intra-op (OpenMP)
    threads over a single-threaded OpenBLAS, or one OpenMP thread over an OpenBLAS with `threads`.
    Both at `threads` oversubscribe the cores (measured: 4x to 8x slower on 2 busy cores)."""
    settings = {"best": ((args.threads, 1), (1, args.threads)), "omp": ((args.threads, 1),),
                "blas": ((1, args.threads),)}[args.torch_threads]
    if ONE_CORE is not None:
        settings = ((1, 1),)
    best = None
    for omp, blas in settings:
        cmd = ["/usr/bin/python3", os.path.join(HERE, "pytorch_mlp.py"), "--threads", str(omp),
               "--epoch-samples", str(samples(args)), "--batch", str(args.batch), "--amp", amp]
        out, cpu = run(cmd, {"OPENBLAS_NUM_THREADS": str(blas)})
        fields = out.split()
        got = (float(fields[fields.index("samples_per_s") + 1]), float(fields[fields.index("cpu_s") + 1]))
        if best is None or got[0] > best[0]:
            best = got
    return best


def pairs(n, a, b, row):
    """n pairs of (a(), b()), alternating which side runs first; each pair is printed on stderr
    as it ends (samples/s and CPU seconds of both sides, the load average)."""
    res = []
    for i in range(n):
        if i % 2 == 0:
            ra, rb = a(), b()
        else:
            rb, ra = b(), a()
        res.append((ra, rb))
        print(f"  {row} pair {i + 1}: {ra[0]:.0f} vs {rb[0]:.0f} samples/s = {ra[0] / rb[0]:.2f}x; "
              f"CPU {ra[1]:.2f} s vs {rb[1]:.2f} s; load {load():.2f}", file=sys.stderr, flush=True)
    return res


def load():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "cpu-release"))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="only the first N batches (default: whole epochs)")
    ap.add_argument("--batch", type=int, default=BATCH, help="every side's (global) batch")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="PyTorch's threads")
    ap.add_argument("--torch-threads", default="best", choices=["best", "omp", "blas"],
                    help="PyTorch's thread setting: the better of both (two runs a side), or one of them")
    ap.add_argument("--rows", default="fp32,bf16,fp16,dp2,dp4,dp8")
    ap.add_argument("--no-sgemm", action="store_true", help="skip the sgemm-rate row at the end")
    ap.add_argument("--openblas-coretype", default=None, metavar="KERNEL|unset",
                    help="OPENBLAS_CORETYPE for both sides (Debian's PyTorch runs its fp32 GEMMs on the same "
                         "OpenBLAS); 'unset': OpenBLAS's own pick for this CPU. Default: the environment's")
    ap.add_argument("--one-core", action="store_true",
                    help="pin every command to one logical CPU with one thread: ratios of the work per sample")
    args = ap.parse_args()
    if args.openblas_coretype == "unset":
        os.environ.pop("OPENBLAS_CORETYPE", None)
    elif args.openblas_coretype:
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype
    global ONE_CORE
    if args.one_core:
        ONE_CORE = max(os.sched_getaffinity(0))
    args.furnace = os.path.join(args.build, "runtime", "furnace")
    rows = args.rows.split(",")
    load_before = load()

    table, summary = [], {"load_before": round(load_before, 2), "pairs": args.pairs, "epochs": args.epochs,
                          "steps": args.steps, "torch_threads": args.torch_threads,
                          "one_core": args.one_core, "batch": args.batch}
    one_gpu = ["--topology", "dgx-h100"]
    for row in rows:
        if row in ("fp32", "bf16", "fp16"):
            amp = [] if row == "fp32" else ["--amp", row]
            res = pairs(args.pairs, lambda: furnace(args, amp),
                        lambda: pytorch(args, "off" if row == "fp32" else "bf16"), row)
            other = "PyTorch " + ("fp32" if row == "fp32" else "bf16 autocast")
        elif row.startswith("gloo"):
            k = int(row[4:])
            ddp = ["--topology", "workstation-4x3090", "--parallel", "ddp"]
            res = pairs(args.pairs, lambda: furnace(args, ddp, launch=k),
                        lambda: furnace(args, ddp + ["--nproc", str(k)]), row)
            other = f"furnace, {k} ranks as threads"
        elif row.startswith("ddp"):
            k = int(row[3:])
            station = ["--topology", "workstation-4x3090"]
            ddp = station + ["--parallel", "ddp", "--nproc", str(k)]
            res = pairs(args.pairs, lambda: furnace(args, ddp), lambda: furnace(args, station), row)
            other = "furnace, 1 GPU"
        elif row.startswith("dp"):
            k = int(row[2:])
            dp = one_gpu + ["--parallel", "dp", "--device-ids", ",".join(str(d) for d in range(k))]
            res = pairs(args.pairs, lambda: furnace(args, dp), lambda: furnace(args, one_gpu), row)
            other = "furnace, 1 GPU"
        else:
            sys.exit(f"unknown row {row}")
        ratios = [a[0] / b[0] for a, b in res]
        cpu_ratio = statistics.median(b[1] / a[1] for a, b in res)
        a_sps = statistics.median(a[0] for a, _ in res)
        b_sps = statistics.median(b[0] for _, b in res)
        a_cpu = statistics.median(a[1] for a, _ in res)
        b_cpu = statistics.median(b[1] for _, b in res)
        table.append((row, a_sps, other, b_sps, statistics.median(ratios), min(ratios), max(ratios), a_cpu, b_cpu,
                      cpu_ratio))
        summary[row] = {"samples_per_s": round(a_sps), "other": other, "other_samples_per_s": round(b_sps),
                        "ratio_median": round(statistics.median(ratios), 3),
                        "ratios": [round(r, 3) for r in ratios], "cpu_s": round(a_cpu, 2),
                        "other_cpu_s": round(b_cpu, 2), "cpu_ratio_median": round(cpu_ratio, 3)}

    sgemm = None if args.no_sgemm else json.loads(
        run([os.path.join(args.build, "bench", "furnace_bench_sgemm"), "--batch", str(args.batch)])[0])
    summary["sgemm"] = sgemm
    if "fp32" in summary and sgemm:  # the step's GEMM time at the sgemm rate over the whole step's time
        step_s = args.batch / summary["fp32"]["samples_per_s"]
        summary["fp32_step_at_sgemm_rate"] = round(sgemm["gemm_s_per_step"] / step_s, 3)
    summary["load_after"] = round(load(), 2)
    summary["cpu"] = cpu_features()
    summary["openblas_kernel"] = openblas_kernel()
    summary["openblas_coretype"] = os.environ.get("OPENBLAS_CORETYPE")

    print(f"furnace train vs PyTorch {'.'.join(map(str, __import__('torch').__version__.split('.')[:2]))}"
          f" CPU, reference MLP 784-512-512-10, batch {args.batch}, {samples(args)} samples ({args.epochs} epoch(s){f', first {args.steps} steps' if args.steps else ''}), "
          f"median of {args.pairs} alternated pairs"
          f"{f', every command pinned to CPU {ONE_CORE} with one thread' if args.one_core else ''}; "
          f"load average {load_before:.2f} before, {summary['load_after']:.2f} after")
    print(f"{'row':6} {'furnace samples/s':>18}  {'against':24} {'samples/s':>10}  {'ratio':>6} {'(min-max)':>12}"
          f"  loop CPU s: furnace / other = other/furnace")
    for row, a, other, b, med, lo, hi, ac, bc, cr in table:
        print(f"{row:6} {a:18.0f}  {other:24} {b:10.0f}  {med:6.2f} {f'({lo:.2f}-{hi:.2f})':>12}  "
              f"{ac:9.2f} / {bc:.2f} = {cr:.2f}x")
    if sgemm:
        print(f"sgemm at the step's shapes: {sgemm['gflops']:.1f} GFLOP/s ({sgemm['threads']} OpenBLAS threads), "
              f"{sgemm['gemm_s_per_step'] * 1e3:.2f} ms of GEMM per step"
              + (f"; the fp32 step runs its GEMMs at {summary['fp32_step_at_sgemm_rate'] * 100:.0f}% of that rate"
                 if "fp32_step_at_sgemm_rate" in summary else ""))
    cpu = summary["cpu"]
    print(f"CPU: {cpu['model']}, {os.cpu_count()} logical CPUs; "
          + ", ".join(f"{k} {'yes' if cpu[k] else 'no'}" for k in ("avx2", "f16c", "avx512f", "avx512_bf16"))
          + ("" if cpu["avx512_bf16"] else " (PyTorch's CPU bf16 autocast runs without bf16 dot products here)"))
    coretype = summary["openblas_coretype"]
    print(f"OpenBLAS kernel of both sides' fp32 GEMMs: {summary['openblas_kernel']} "
          + (f"(OPENBLAS_CORETYPE={coretype})" if coretype else "(OpenBLAS's pick for this CPU)"))
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
