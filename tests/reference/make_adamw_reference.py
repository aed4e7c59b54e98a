#!/usr/bin/python3
"""Writes data/reference/adamw_ref_v1.txt: PyTorch's torch.optim.AdamW on Furnace's reference MLP.

tests/reference/test_reference_adamw.cpp compares the C++ AdamW (furnace/nn.h) with these numbers.
The model, its initial weights and the batch are those of data/reference/mlp_ref_v1.bin (the same
seed and batch as tests/reference/make_reference.py, whose helpers this script imports), so the
test loads the initial weights from that file. Three runs of ten optimizer steps on the one batch:

  plain     AdamW(lr=1e-3) with PyTorch's defaults (betas (0.9, 0.999), eps 1e-8, weight_decay 0.01)
  loss_x4   the same with the loss multiplied by 4 before backward: the gradient of an
            accumulation of 4 micro-batches whose losses were not divided by 4. Adam divides by
            sqrt(v), so the steps barely change (lesson 10)
  skip3     step 3's optimizer.step() is not called (as GradScaler skips a step with inf/NaN
            gradients): every parameter's state["step"] ends at 9, not 10

For each run: the loss before every step, then 4.bias and 4.weight after the steps and the
optimizer state of parameter 5 (4.bias): step, exp_avg, exp_avg_sq. Text, one record a line:
`NAME COUNT v1 v2 ...` with float32 values printed exactly (%.9g). Not part of the build; CI never
runs it. Run with Debian's python3-torch (1.13.1, CPU):
    /usr/bin/python3 tests/reference/make_adamw_reference.py
"""

import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import REPO, build_model, load_batch  # noqa: E402

VERSION = 1
SEED, BATCH, STEPS = 1337, 64, 10
LR = 1e-3
RUNS = {"plain": (1.0, None), "loss_x4": (4.0, None), "skip3": (1.0, 3)}


def run(x, y, loss_factor, skip_step):
    model = build_model(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    criterion = nn.CrossEntropyLoss()
    losses = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = criterion(model(x), y)
        (loss * loss_factor).backward()
        losses.append(loss.item())
        if step != skip_step:
            opt.step()
    params = dict(model.named_parameters())
    state = opt.state[params["4.bias"]]
    return {
        "losses": losses,
        "4.bias": params["4.bias"].detach().flatten().tolist(),
        "4.weight": params["4.weight"].detach().flatten().tolist(),
        "state.5.step": [float(state["step"])],
        "state.5.exp_avg": state["exp_avg"].flatten().tolist(),
        "state.5.exp_avg_sq": state["exp_avg_sq"].flatten().tolist(),
    }


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x, y = load_batch(BATCH)
    out = os.path.join(REPO, "data", "reference", "adamw_ref_v1.txt")
    with open(out, "w") as f:
        f.write(f"# furnace adamw reference v{VERSION}: torch {torch.__version__}, AdamW lr {LR} "
                f"betas (0.9, 0.999) eps 1e-08 weight_decay 0.01, seed {SEED}, batch {BATCH}, "
                f"{STEPS} steps; written by tests/reference/make_adamw_reference.py\n")
        for run_name, (factor, skip) in RUNS.items():
            for name, values in run(x, y, factor, skip).items():
                f.write(f"{run_name}.{name} {len(values)} " + " ".join("%.9g" % v for v in values) + "\n")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
