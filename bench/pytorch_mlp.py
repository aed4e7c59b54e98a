#!/usr/bin/python3
"""PyTorch side of bench/train_throughput: the reference MLP (784-512-512-10, ReLU, SGD momentum
0.9) trained for a fixed number of steps at a given batch size and thread count, on the CPU.
Prints one line: `samples_per_s <float>`. Needs Debian's python3-torch (run with /usr/bin/python3).
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
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, a.hidden), nn.ReLU(), nn.Linear(a.hidden, a.hidden),
                          nn.ReLU(), nn.Linear(a.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # A dataset of 2000 images in memory, batches drawn in a shuffled order, as the Furnace side.
    images = torch.rand(2000, 784)
    labels = torch.randint(0, 10, (2000,))

    def step(i):
        idx = torch.randint(0, 2000, (a.batch,))
        x, y = images[idx], labels[idx]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    dt = time.perf_counter() - t0
    print(f"samples_per_s {a.steps * a.batch / dt:.1f}")


if __name__ == "__main__":
    main()
