#!/usr/bin/python3
"""Writes data/reference/mlp_ref_v1.bin: PyTorch's numbers for Furnace's reference MLP.

This is the truth that tests/reference/test_reference_mlp.cpp compares the C++ runtime with:
the reference MLP (torch.nn.Sequential of Linear 784-512-512-10 with ReLUs) on one batch of the
committed Fashion-MNIST slice, its logits, loss and gradients, and ten SGD-with-momentum steps.
It is not part of the build: the .bin is committed and CI never regenerates it. The format is
described byte by byte in data/reference/README.md; change the layout only together with VERSION,
the README and tests/reference/reference_file.h.

Run with Debian's python3-torch (1.13.1, CPU):
    /usr/bin/python3 tests/reference/make_reference.py
"""

import argparse
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

MAGIC = 20261202
VERSION = 1
HEADER_INTS = 256
SIZES = [784, 512, 512, 10]
# Parameters stored after the training steps: the last Linear only ("4.weight", "4.bias"), which
# every earlier layer's update flows into, so the file stays about 5.6 MB instead of 8 MB.
AFTER_STEPS_PARAMS = 2

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLICE_DIR = os.path.join(REPO, "data", "fashion-mnist")
# The committed slice is the first 2000 training images of this dataset, so the first B agree.
SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Reads a gzip IDX file (MNIST format) into a numpy array of its stored shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return body[: int(np.prod(dims))].reshape(dims)


def load_batch(batch):
    """The first `batch` training images (float32 / 255, flattened) and labels (int64)."""
    for d in (SLICE_DIR, SYSTEM_DIR):
        images = os.path.join(d, "train-images-idx3-ubyte.gz")
        labels = os.path.join(d, "train-labels-idx1-ubyte.gz")
        if os.path.exists(images) and os.path.exists(labels):
            break
    else:
        sys.exit(f"no Fashion-MNIST training files in {SLICE_DIR} or {SYSTEM_DIR}")
    print(f"data: {d}")
    x = read_idx(images)[:batch].reshape(batch, -1).astype(np.float32) / np.float32(255.0)
    y = read_idx(labels)[:batch].astype(np.int64)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


def build_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(),
        nn.Linear(SIZES[1], SIZES[2]), nn.ReLU(),
        nn.Linear(SIZES[2], SIZES[3]),
    ).float()


def f32_bits(v):
    return struct.unpack("<i", struct.pack("<f", v))[0]


def write_f32(f, t):
    f.write(t.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "reference", "mlp_ref_v1.bin"))
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x, y = load_batch(args.batch)
    criterion = nn.CrossEntropyLoss()

    # One forward and backward from the initial weights.
    model = build_model(args.seed)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    logits = model(x)
    loss = criterion(logits, y)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}

    # Training steps on the same batch, from the same initial weights.
    model = build_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        step_loss = criterion(model(x), y)
        step_loss.backward()
        losses.append(step_loss.item())  # before the step, so losses[0] == loss
        opt.step()
    after = list(model.state_dict().items())[-AFTER_STEPS_PARAMS:]
    assert losses[0] == loss.item()

    header = [0] * HEADER_INTS
    header[0], header[1], header[2], header[3] = MAGIC, VERSION, args.batch, len(SIZES)
    header[4:4 + len(SIZES)] = SIZES
    header[8], header[9] = args.seed, args.steps
    header[10], header[11] = f32_bits(args.lr), f32_bits(args.momentum)
    header[12] = AFTER_STEPS_PARAMS

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        for name, t in initial.items():    # 0.weight (512, 784), 0.bias, 2.weight, 2.bias, ...
            write_f32(f, t)
        write_f32(f, x)                     # (B, 784)
        f.write(y.numpy().astype("<i4").tobytes())  # (B) int32
        write_f32(f, logits)                # (B, 10)
        write_f32(f, loss.reshape(1))       # (1)
        for name in initial:                # same order and shapes as the parameters
            write_f32(f, grads[name])
        write_f32(f, torch.tensor(losses, dtype=torch.float32))  # (steps)
        for name, t in after:               # 4.weight (10, 512), 4.bias (10)
            write_f32(f, t)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    print(f"loss {loss.item():.6f}; losses[0] {losses[0]:.6f} ... losses[{args.steps - 1}] "
          f"{losses[-1]:.6f}")


if __name__ == "__main__":
    main()
