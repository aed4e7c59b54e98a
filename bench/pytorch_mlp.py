#!/usr/bin/python3
"""PyTorch side of bench/train_throughput (CPU) and bench/gpu_throughput (--device cuda): the
reference MLP (784-h-h-10, ReLU, SGD momentum 0.9) trained for a fixed number of steps at a given
batch size, in PyTorch eager mode. Each step gathers a batch from images held in host memory,
moves it to the device (pinned and non_blocking with --pin-memory), runs forward under autocast
(--amp fp16 with a GradScaler, or bf16), reads the loss with .item(), and steps the optimizer.
Prints one line: `samples_per_s <float>`. Needs PyTorch (Debian's python3-torch for the CPU runs:
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
    n = max(2000, 4 * a.batch)
    images = torch.rand(n, 784)
    labels = torch.randint(0, 10, (n,))

    def step(i):
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
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"samples_per_s {a.steps * a.batch / dt:.1f}")


if __name__ == "__main__":
    main()
