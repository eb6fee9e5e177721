"""Reference functions with known regimes on a CUDA GPU (tests/runtime/test_runtime_gpu.py and
bench/gpu_check.sh). Inputs are created by the setups, so importing this file needs no GPU."""
import torch

import perflsp

MATMUL_N = 4096
COPY_ELEMENTS = 1 << 28  # 1 GiB of float32: far beyond the 50-60 MB L2
ELEMENTWISE_ELEMENTS = 1 << 27
TINY_OPS = 1000
TINY_KERNELS = 300
SYNC_STEPS = 50


def matmul_inputs():
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    return a, a.clone(), torch.empty_like(a)


@perflsp.profile(setup=matmul_inputs)
def matmul_bf16(a, b, out):
    torch.mm(a, b, out=out)


def big_gemm_inputs():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return a, a.clone()


@perflsp.profile(setup=big_gemm_inputs)
def gemm_then_item(a, b):
    c = a @ b
    return c[0, 0].item()  # one sync at the end: still compute-bound


def copy_inputs():
    return torch.randn(COPY_ELEMENTS, device="cuda"), torch.empty(COPY_ELEMENTS, device="cuda")


@perflsp.profile(setup=copy_inputs)
def copy(src, dst):
    dst.copy_(src)


def elementwise_inputs():
    x = torch.randn(ELEMENTWISE_ELEMENTS, device="cuda")
    return x, torch.randn_like(x), torch.empty_like(x)


@perflsp.profile(setup=elementwise_inputs)
def elementwise(x, y, out):
    torch.add(x, y, out=out)


def tiny_inputs():
    return (torch.ones(16, device="cuda"),)


@perflsp.profile(setup=tiny_inputs)
def tiny_ops(x):
    for _ in range(TINY_OPS):
        x = x + 1
    return x


def chain_inputs():
    return (torch.randn(1024, device="cuda"),)


@perflsp.profile(setup=chain_inputs)
def tiny_kernels(x):
    for _ in range(TINY_KERNELS):
        x = torch.sin(x)
    return x


def sync_inputs():
    # Little device work per step: the step's time is launching and waiting, not computing.
    return torch.randn(1024, 1024, device="cuda") / 32, torch.randn(1024, device="cuda")


@perflsp.profile(setup=sync_inputs)
def item_per_step(w, x):
    total = 0.0
    for _ in range(SYNC_STEPS):
        x = torch.tanh(w @ x)
        total += x.norm().item()
    return total


def transfer_inputs():
    return (torch.randn(1 << 24, device="cuda"),)


@perflsp.profile(setup=transfer_inputs)
def round_trip(x):
    host = x.cpu()
    host = host * 2
    return host.cuda()


def oom_inputs():
    return (torch.ones(4, device="cuda"),)


@perflsp.profile(setup=oom_inputs)
def out_of_memory(x):
    return torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
