#!/usr/bin/env python3
"""Writes the small Fashion-MNIST slice committed for tests: the first 2000 training and the first
500 test images and labels, as gzip-compressed IDX files with the standard names.

Source: Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist/). Output is
byte-for-byte reproducible (gzip header mtime 0, no file name stored). Standard library only.

    python3 data/fashion-mnist/make_slice.py [--src DIR] [--out DIR] [--train N] [--test N]
"""

import argparse
import gzip
import os
import struct
import sys

SPLITS = ("train", "t10k")


def read_idx(path):
    """Returns (magic, dims, payload bytes) of a u8 IDX file, gzip or raw."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4:
        sys.exit(f"{path}: truncated header")
    magic = struct.unpack(">I", raw[:4])[0]
    if magic >> 8 != 0x08 or magic & 0xFF not in (1, 3):
        sys.exit(f"{path}: not a u8 IDX file (magic 0x{magic:08x})")
    rank = magic & 0xFF
    dims = list(struct.unpack(f">{rank}I", raw[4:4 + 4 * rank]))
    payload = raw[4 + 4 * rank:]
    size = 1
    for d in dims:
        size *= d
    if len(payload) != size:
        sys.exit(f"{path}: expected {size} bytes of data, found {len(payload)}")
    return magic, dims, payload


def write_idx_gz(path, magic, dims, payload):
    header = struct.pack(">I", magic) + struct.pack(f">{len(dims)}I", *dims)
    data = gzip.compress(header + payload, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(data)


def slice_file(src_dir, out_dir, name, count):
    magic, dims, payload = read_idx(os.path.join(src_dir, name))
    if count > dims[0]:
        sys.exit(f"{name}: asked for {count} items but the source has {dims[0]}")
    item = len(payload) // dims[0]
    out = os.path.join(out_dir, name)
    write_idx_gz(out, magic, [count] + dims[1:], payload[:count * item])
    print(f"wrote {out}: {count} of {dims[0]} items, dims {[count] + dims[1:]}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=here)
    p.add_argument("--train", type=int, default=2000, help="first N training items")
    p.add_argument("--test", type=int, default=500, help="first N test items")
    args = p.parse_args()
    for prefix, count in (("train", args.train), ("t10k", args.test)):
        for kind in ("images-idx3-ubyte.gz", "labels-idx1-ubyte.gz"):
            slice_file(args.src, args.out, f"{prefix}-{kind}", count)


if __name__ == "__main__":
    main()
