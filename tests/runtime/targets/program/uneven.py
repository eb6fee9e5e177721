"""A program whose steps alternate between a small and a large batch (as variable-length batches
do): `python uneven.py STEPS`."""
import sys

import torch

from layers import step


def main(steps):
    w = torch.randn(256, 256)
    batches = [torch.randn(4, 256), torch.randn(2048, 256)]
    for i in range(steps):
        step(w, batches[i % 2])


if __name__ == "__main__":
    main(int(sys.argv[1]))
