"""A tiny training loop: `python train.py STEPS`. Setup work runs once, `log` every 10 steps."""
import sys

import torch

from model import build, loss_fn


def make_data(n):
    return [torch.randn(8, 16) for _ in range(n)]


def log(step, loss):
    print(step, float(loss))


def main(steps):
    net = build()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    data = make_data(steps)
    for step, x in enumerate(data):
        loss = loss_fn(net(x))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            log(step, loss)


if __name__ == "__main__":
    main(int(sys.argv[1]))
