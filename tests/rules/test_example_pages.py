"""The rule pages' examples run: the flagged code (*Example*) and what the page says to write
instead (*Use instead*), each followed by the rule's `example_run` code, under real torch on the
CPU with `device` standing for a GPU (`device_standin`): an example that would mix host and device
tensors on a GPU fails here."""
from __future__ import annotations

import ast

import pytest

torch = pytest.importorskip("torch")

from perflsp.rules.docs import example_pair
from perflsp.rules.pfl101_item_in_hot_code import ItemInHotCode
from perflsp.rules.registry import all_rules
from tests.rules.device_standin import DEVICE, DeviceMismatch, StandIn


def _cases():
    for rule in all_rules():
        flagged, instead = example_pair(rule)
        yield pytest.param(rule, flagged, id=f"{rule.code}-example")
        yield pytest.param(rule, instead, id=f"{rule.code}-use-instead")


@pytest.mark.parametrize("rule, source", list(_cases()))
def test_the_page_example_runs_with_its_tensors_on_one_device(rule, source, monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", torch.cpu.synchronize)
    namespace = {"__name__": f"example_{rule.code}", "device": DEVICE}
    torch.manual_seed(0)
    anomaly = torch.is_anomaly_enabled()  # PFL604's example switches it on for the whole process
    try:
        with StandIn():
            exec(compile(source + rule.example_run, f"<{rule.code} page>", "exec"), namespace)
    finally:
        torch.autograd.set_detect_anomaly(anomaly)


# PFL101's *Use instead* until issue 20: a loss on the GPU added into a host tensor.
CPU_TOTAL = """\
import torch

def train(model, loader, opt):
    total = torch.zeros(())
    for x, y in loader:
        loss = model(x).sum()
        total += loss.detach()
    return total.item()
"""


def test_the_stand_in_fails_where_a_gpu_would():
    namespace = {"device": DEVICE}
    with StandIn(), pytest.raises(DeviceMismatch, match="written in place"):
        exec(CPU_TOTAL + ItemInHotCode.example_run, namespace)
    with StandIn(), pytest.raises(TypeError, match="numpy"):
        torch.ones(2, device=DEVICE).numpy()
    with StandIn():  # a host scalar is fine as an input, as CUDA kernels take it
        assert (torch.ones(2, device=DEVICE) + torch.tensor(1.0)).device == DEVICE


def test_an_example_that_defines_code_declares_how_to_run_it():
    for rule in all_rules():
        defines = any(isinstance(node, (ast.FunctionDef, ast.ClassDef))
                      for source in example_pair(rule) for node in ast.parse(source).body)
        assert rule.example_run or not defines, f"{rule.code}: its page examples define code that nothing runs"
