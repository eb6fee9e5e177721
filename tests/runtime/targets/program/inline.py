"""The target lives in the script that runs: `python inline.py STEPS`."""
import sys

import torch


def step(x):
    return (x * 2).sum()


if __name__ == "__main__":
    x = torch.randn(1000)
    for _ in range(int(sys.argv[1])):
        step(x)
