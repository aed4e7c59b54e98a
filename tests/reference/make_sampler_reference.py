#!/usr/bin/python3
"""Writes data/reference/distributed_sampler_v1.txt: PyTorch's DistributedSampler indices.

The truth tests/data/test_distributed_sampler.cpp compares furnace::DistributedSampler with: for
every case, each rank's len(sampler) and list(iter(sampler)) from torch's own class (constructed
with num_replicas and rank, so no process group is needed), and torch.randperm checksums for sizes
the size of a dataset. Not part of the build: the file is committed and CI never regenerates it.

One line per case and rank:
    sampler N WORLD RANK SHUFFLE DROP_LAST SEED EPOCH : NUM_SAMPLES : INDEX...
and one per randperm:
    randperm N SEED : SUM(i * perm[i]) mod 1000000007 : FIRST_TEN...

Run with Debian's python3-torch (1.13.1, CPU):
    /usr/bin/python3 tests/reference/make_sampler_reference.py
"""

import os

import torch
from torch.utils.data.distributed import DistributedSampler

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "data", "reference", "distributed_sampler_v1.txt")


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def main():
    lines = ["# PyTorch " + torch.__version__ + ": tests/reference/make_sampler_reference.py"]
    for n in [0, 1, 3, 10, 11, 17, 100, 257]:
        for world in [1, 2, 3, 4, 8]:
            for drop_last in [False, True]:
                configs = [(False, 0, 0)] + [(True, seed, epoch) for seed in [0, 42] for epoch in [0, 1, 5]]
                for shuffle, seed, epoch in configs:
                    for rank in range(world):
                        s = DistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=shuffle,
                                               seed=seed, drop_last=drop_last)
                        s.set_epoch(epoch)
                        idx = list(iter(s))
                        assert len(idx) == len(s)
                        lines.append("sampler %d %d %d %d %d %d %d : %d : %s" % (
                            n, world, rank, int(shuffle), int(drop_last), seed, epoch, len(s),
                            " ".join(str(i) for i in idx)))
    for n, seed in [(60000, 0), (60000, 3), (10000, 42), (1000003, 10)]:
        g = torch.Generator()
        g.manual_seed(seed)
        p = torch.randperm(n, generator=g)
        checksum = int((p * torch.arange(n)).sum()) % 1000000007
        lines.append("randperm %d %d : %d : %s" % (n, seed, checksum, " ".join(str(int(i)) for i in p[:10])))
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "lines")


if __name__ == "__main__":
    main()
