#!/usr/bin/python3
"""PyTorch side of bench/train_throughput (CPU) and bench/gpu_throughput (--device cuda): the
reference MLP (784-h-h-10, ReLU, SGD momentum 0.9) trained for a fixed number of steps at a given
batch size, in PyTorch eager mode. Each step gathers a batch from images held in host memory,
moves it to the device (pinned and non_blocking with --pin-memory), runs forward under autocast
(--amp fp16 with a GradScaler, or bf16), reads the loss with .item(), and steps the optimizer.
With --epoch-samples N the loop is instead one epoch over N images in randperm batches (the last
one shorter), as `furnace train --epochs 1` runs. Prints one line: `samples_per_s <float> cpu_s
<float>` (the loop's CPU time, all threads). Needs PyTorch (Debian's python3-torch for the CPU runs:
/usr/bin/python3; a CUDA build of PyTorch for --device cuda).
"""
import argparse
import time

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--amp", default="off", choices=["off", "fp16", "bf16"])
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--tf32", action="store_true", help="torch.backends.cuda.matmul.allow_tf32")
    ap.add_argument("--epoch-samples", type=int, default=0,
                    help="one epoch over this many images in randperm batches instead of --steps")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.tf32  # PyTorch's default is False since 1.12
    model = nn.Sequential(nn.Linear(784, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden),
                          nn.ReLU(), nn.Linear(a.hidden, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    scaler = torch.cuda.amp.GradScaler(enabled=a.amp == "fp16")
    # Images in host memory, batches drawn in a shuffled order, as the Furnace side.
    n = a.epoch_samples or max(2000, 4 * a.batch)
    images = torch.rand(n, 784)
    labels = torch.randint(0, 10, (n,))

    def step(i, idx=None):
        if idx is None:
            idx = torch.randint(0, n, (a.batch,))
        x, y = images[idx], labels[idx]
        if a.pin_memory and dev.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        x = x.to(dev, non_blocking=a.pin_memory)
        y = y.to(dev, non_blocking=a.pin_memory)
        opt.zero_grad()
        with torch.autocast(device_type=dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    samples = 0
    if a.epoch_samples:
        for i, idx in enumerate(torch.randperm(n).split(a.batch)):
            step(i, idx)
            samples += len(idx)
    else:
        for i in range(a.steps):
            step(i)
        samples = a.steps * a.batch
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"samples_per_s {samples / dt:.1f} cpu_s {cpu:.3f}")


if __name__ == "__main__":
    main()
