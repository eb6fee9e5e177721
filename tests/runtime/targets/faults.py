"""Targets that fail in each way the runtime must report."""
import ctypes
import os
import subprocess
import sys

import torch

import perflsp


def one_tensor():
    return (torch.ones(4),)


@perflsp.profile(setup=one_tensor)
def raises(x):
    y = x * 2
    raise ValueError(f"bad value {y.sum().item()}")


@perflsp.profile(setup=one_tensor)
def hangs_in_c(x):
    # A grandchild that must die with us, then a hang inside C code (no Python bytecode runs,
    # so only a signal the process cannot handle ends it).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["PERFLSP_TEST_PIDFILE"], "w") as handle:
        handle.write(str(child.pid))
    ctypes.CDLL(None).sleep(600)


@perflsp.profile(setup=one_tensor)
def out_of_memory(x):
    return torch.empty(2 ** 50, dtype=torch.uint8)


@perflsp.profile
def marker_without_setup(x):
    return x


def plain(x):
    return x * 2


def _spawn_sessions(count):
    """Children in sessions of their own (as some launchers start them): no process group kill reaches them."""
    pids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True).pid
            for _ in range(count)]
    with open(os.environ["PERFLSP_TEST_PIDFILE"], "w") as handle:
        handle.write(" ".join(map(str, pids)))


@perflsp.profile(setup=one_tensor, warmup=1, iters=3)
def leaves_session_children(x):
    if not os.path.exists(os.environ["PERFLSP_TEST_PIDFILE"]):
        _spawn_sessions(3)
    return x * 2


@perflsp.profile(setup=one_tensor)
def hangs_with_session_children(x):
    _spawn_sessions(3)
    ctypes.CDLL(None).sleep(600)


@perflsp.profile(setup=one_tensor)
def fills_memory(x):
    # Meant for a memory cgroup with a small limit (test_runtime_cli.py), whose OOM killer ends it:
    # it stops at 4 GiB where the test could not set one up.
    kept = [torch.ones(2 ** 25) for _ in range(32)]  # 128 MiB each, written
    return x + len(kept)
