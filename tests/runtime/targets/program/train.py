"""A tiny training-like program: `python train.py STEPS MARKER_FILE`."""
import sys

import torch

from layers import step


def main(steps, marker):
    w = torch.randn(64, 64)
    x = torch.randn(32, 64)
    total = 0.0
    for _ in range(steps):
        total += float(step(w, x))
    with open(marker, "w") as handle:  # only reached if the program runs to its end
        handle.write(f"{steps} {total}\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
