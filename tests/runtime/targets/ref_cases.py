"""Reference functions with known regimes on CPU (and the attribution case).

Sizes are small enough for a 2-core CI machine and large enough to be unambiguous: the matmul's
intensity (n/6 FLOP/B) is far above any CPU's ridge point, the elementwise and copy buffers
(64 MB each) are well beyond a last-level cache (else the "memory" they measure is the cache),
the tiny ops take microseconds each.
The tests look lines up by their text, so editing these files does not break them.
"""
import torch

import perflsp

MATMUL_N = 384
ELEMENTS = 16_000_000
TINY_OPS = 400


def matmul_inputs():
    a = torch.randn(MATMUL_N, MATMUL_N)
    return a, a.clone(), torch.empty(MATMUL_N, MATMUL_N)


@perflsp.profile(setup=matmul_inputs)
def matmul(a, b, out):
    torch.mm(a, b, out=out)


def elementwise_inputs():
    return torch.randn(ELEMENTS), torch.randn(ELEMENTS), torch.empty(ELEMENTS)


@perflsp.profile(setup=elementwise_inputs)
def elementwise(x, y, out):
    torch.add(x, y, out=out)


def copy_inputs():
    return torch.randn(ELEMENTS), torch.empty(ELEMENTS)


@perflsp.profile(setup=copy_inputs)
def copy(src, dst):
    dst.copy_(src)


def tiny_inputs():
    return (torch.ones(16),)


@perflsp.profile(setup=tiny_inputs)
def tiny_ops(x):
    for _ in range(TINY_OPS):
        x = x + 1
    return x


CONV = (8, 16, 32, 32, 3)  # batch, in and out channels, height = width, kernel (padding 1)


def conv_inputs():
    batch, cin, cout, hw, k = CONV
    return torch.randn(batch, cin, hw, hw), torch.randn(cout, cin, k, k)


@perflsp.profile(setup=conv_inputs)
def conv(x, w):
    return torch.nn.functional.conv2d(x, w, padding=1)


def mixed_inputs():
    return torch.randn(256, 256), torch.randn(1000)


def finish(y):
    return y.relu()


@perflsp.profile(setup=mixed_inputs, warmup=2)
def mixed(a, x):
    y = a @ a
    z = x * 2
    total = z.sum().item()
    return finish(y), total


def no_marker(x):
    return x + 1


def setup_for_no_marker():
    return (torch.ones(8),)


class Model:
    def __init__(self):
        self.w = torch.randn(64, 64)

    def forward(self, x):
        return x @ self.w


def model_inputs():
    return Model(), torch.randn(32, 64)
