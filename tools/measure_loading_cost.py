#!/usr/bin/python3
"""Measures what the host spends per sample in PyTorch's DataLoader: the figures behind
runtime/src/data/loading_cost.cpp and docs/host-loading.md.

CPU time (time.process_time, one thread), so other work on the machine does not inflate it. Two
datasets over the committed Fashion-MNIST slice:
  tensors      TensorDataset(images, labels)[i]: two tensor indexing ops in Python
  torchvision  what torchvision.datasets.FashionMNIST(transform=Compose([ToTensor(),
               Normalize((0.2860,), (0.3530,))]))[i] does, without PIL (not installed on the build
               machines): img.numpy(), np.array(copy), view/permute, float()/255, sub_/div_
and default_collate of a batch of 256 of each. Run with Debian's python3-torch (1.13):
    /usr/bin/python3 tools/measure_loading_cost.py
"""

import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import TensorDataset
from torch.utils.data._utils.collate import default_collate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
from make_reference import read_idx  # noqa: E402

SLICE = os.path.join(REPO, "data", "fashion-mnist")


def per_call_us(fn, calls):
    fn(min(calls, 1000))  # warm up
    t0 = time.process_time()
    fn(calls)
    return (time.process_time() - t0) / calls * 1e6


def main():
    torch.set_num_threads(1)
    images = torch.from_numpy(read_idx(os.path.join(SLICE, "train-images-idx3-ubyte.gz")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(SLICE, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    n = len(images)
    flat = TensorDataset(images.reshape(n, -1).float().div(255), labels)

    def torchvision_like(i):
        a = images[i].numpy()
        t = torch.from_numpy(np.array(a, np.uint8, copy=True)).view(28, 28, 1).permute((2, 0, 1)).contiguous()
        t = t.to(dtype=torch.get_default_dtype()).div(255)
        return t.sub_(0.2860).div_(0.3530), int(labels[i])

    for name, get in (("tensors", lambda i: flat[i]), ("torchvision", torchvision_like)):
        fetch = per_call_us(lambda k: [get(i % n) for i in range(k)], 20000)
        batch = [get(i) for i in range(256)]
        collate = per_call_us(lambda k: [default_collate(batch) for _ in range(k)], 200) / 256
        print(f"{name:12s} fetch {fetch:6.2f} us/sample   collate {collate:5.2f} us/sample")


if __name__ == "__main__":
    main()
