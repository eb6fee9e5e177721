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


@perflsp.profile(setup=make_inputs)
def item_in_loop(x, w):
    y = x * w
    for _ in range(3):
        if y.abs().max().item() > 1e6:  # graph break inside a loop: torch 2.13 skips the whole frame
            break
        y = torch.tanh(y) + w
    return y


@perflsp.profile(setup=make_inputs)
def while_on_item(x, w):
    y = x.abs() * w.abs() + 1.0
    while y.sum().item() > 1.0:  # breaks, and the loop after it runs eagerly
        y = y * 0.5
    return y


def make_count_and_input():
    return torch.tensor(3), torch.randn(256, 256)


@perflsp.profile(setup=make_count_and_input)
def loop_count_from_item(count, y):
    for _ in range(int(count.item())):  # breaks before any graph: explain gives no reason for it
        y = torch.tanh(y) * 2.0
    return y
