"""Targets for `--compile` and `--graph-breaks`: known graph breaks, and code that cannot compile."""
import torch

import perflsp


def make_inputs():
    torch.manual_seed(0)
    return torch.randn(256, 256), torch.randn(256, 256)


@perflsp.profile(setup=make_inputs)
def pointwise_with_breaks(x, w):
    y = x * w + 1.0
    if y.sum() > 0:  # graph break: data-dependent branch
        y = torch.tanh(y) * 0.5
    scale = y.abs().mean().item()  # graph break: tensor to Python number
    z = (y.sin() + y.cos()) * scale
    return torch.sigmoid(z) * z - 0.25 * z.exp()


@perflsp.profile(setup=make_inputs)
def fuses_cleanly(x, w):
    return torch.sigmoid(x * w + 1.0) * torch.tanh(x - w)


@torch.library.custom_op("perflsp_test::opaque_copy", mutates_args=())
def opaque_copy(a: torch.Tensor) -> torch.Tensor:
    """No fake implementation registered: torch.compile cannot trace it."""
    return a.clone()


@perflsp.profile(setup=make_inputs)
def cannot_compile(x, w):
    return opaque_copy(x) + w
