"""Device and dtype knowledge (`perflsp.rules.devices`, `perflsp.rules.dtypes`) and the messages
built on it: what the code shows about where a tensor lives, and claims only what is true."""
from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from perflsp.config import Settings
from perflsp.rules.context import ModuleContext
from perflsp.rules.devices import ACCELERATOR, HOST, placement
from perflsp.rules.dtypes import known_dtype
from perflsp.rules.engine import check_source


def _last_assigned(source: str, question):
    """`question(ctx, value, frame)` for the value of the last assignment in `source`."""
    ctx = ModuleContext(cst.parse_module(textwrap.dedent(source)), Settings())
    assign, frame = ctx.nodes(cst.Assign)[-1]
    return question(ctx, assign.value, frame)  # type: ignore[attr-defined]


@pytest.mark.parametrize("source, where", [
    ("import torch\nx = torch.zeros(4)\n", HOST),
    ("import torch\nx = torch.tensor([1, 2])\n", HOST),
    ("import torch\nx = torch.zeros(4, device='cuda:0')\n", ACCELERATOR),
    ("import torch\nwith torch.device('cuda'):\n    x = torch.zeros(4)\n", ACCELERATOR),
    ("import torch\nwith torch.device('cpu'):\n    x = torch.zeros(4, device=None)\n", HOST),
    ("import torch\ntorch.set_default_device('cuda')\nx = torch.zeros(4)\n", None),
    ("import torch\ndef f(t):\n    x = t.cpu().float()\n", HOST),
    ("import torch\ndef f(t, device):\n    y = t.to(device)\n    x = y.sum()\n", ACCELERATOR),
    ("import torch\ndef f(t):\n    x = torch.tensor(t)\n", None),  # t may be a GPU tensor
    # Only 0-dim CPU tensors mix with GPU ones: a CPU range keeps the result on the CPU...
    ("import torch\ndef f(d):\n    x = torch.arange(8) / d\n", HOST),
    # ... a CPU scalar does not.
    ("import torch\ndef f(d):\n    x = torch.tensor(2.0) * d\n", None),
    ("import torch\ndef f(g, d):\n    x = g.cuda() * torch.arange(3)\n", None),  # fails at run time
    ("import torch\nfrom torch.utils.data import DataLoader\ndef f(ds):\n"
     "    for x, y in DataLoader(ds):\n        z = x\n", HOST),
    # `accelerator.prepare` hands out batches already on the device.
    ("import torch\nfrom torch.utils.data import DataLoader\ndef f(ds, accelerator):\n"
     "    loader = DataLoader(ds)\n    loader = accelerator.prepare(loader)\n"
     "    for x, y in loader:\n        z = x\n", None),
    ("import torch\ndef collate_fn(samples):\n    x = samples[0]\n", HOST),
    ("import torch\nclass Tokens(torch.utils.data.Dataset):\n    def __getitem__(self, i):\n"
     "        x = self.data[i]\n", HOST),
    # A module's `.to(device)` and what it returns say nothing about tensors.
    ("import torch\ndef f(device):\n    model = Net().to(device)\n    x = model.loader()\n", None),
    # Module attributes move with the module (buffers).
    ("import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        self.count = torch.tensor(0)\n"
     "    def forward(self):\n        x = self.count\n", None),
    # The loop moves `image` to the device, not `image_id`: the batch came in host memory.
    ("import torch\ndef f(loader, device):\n    for image, image_id in loader:\n        image = image.to(device)\n"
     "        x = image_id\n", HOST),
    ("import torch\ndef f(loader, device):\n    for image, ids in loader:\n        image = image.cuda()\n"
     "        for caption, i in zip(image, ids):\n            x = i\n", HOST),
    ("import torch\ndef f(loader, device):\n    for image, label in loader:\n"
     "        image, label = image.to(device), label.to(device)\n        x = label\n", None),  # moved too
    # A cast moves nothing: where the batch is stays unknown.
    ("import torch\ndef f(loader):\n    for image, label in loader:\n        image = image.to(torch.float16)\n"
     "        x = label\n", None),
])
def test_placement(source, where):
    assert _last_assigned(source, placement) == where


@pytest.mark.parametrize("source, dtype", [
    ("import torch\nx = torch.randn(3)\n", "float32"),
    ("import torch\ndef f(t, device):\n    x = t.half().expand(2, -1).to(device)\n", "float16"),
    ("import torch\nx = torch.zeros(3, dtype=torch.long)\n", "int64"),
    ("import torch\ntorch.set_default_dtype(torch.float64)\nx = torch.randn(3)\n", None),
    ("import torch\ndef f(t, other):\n    x = t.float().to(other.dtype)\n", None),
])
def test_known_dtype(source, dtype):
    assert _last_assigned(source, known_dtype) == dtype


def _findings(source, code):
    return [f for f in check_source(textwrap.dedent(source), "m.py", Settings(preview=True)) if f.code == code]


def test_blocking_transfer_claims_host_to_device_and_fixes_only_pinned_sources():
    unpinned = _findings(
        """
        import torch

        def train(model, loader, opt, device):
            for x, y in loader:
                model(x.to(device)).backward()
        """, "PFL106")
    assert [f.fix for f in unpinned] == [None]
    assert "host-to-device" not in unpinned[0].message and "pinned memory" in unpinned[0].message
    made_here = _findings(
        """
        import torch

        def train(model, batches, device):
            for array in batches:
                model(torch.from_numpy(array).to(device))
        """, "PFL106")
    assert "host-to-device" in made_here[0].message and made_here[0].fix is None


def test_explicit_synchronize_says_how_often_it_drains_the_queue():
    messages = [f.message for f in _findings(
        """
        import torch

        # perflsp: hot
        def fetch(events, params, limit):
            for p in params:
                if len(events) > limit:
                    events.popleft().synchronize()
                else:
                    torch.cuda.synchronize()
        """, "PFL104")]
    assert "whenever `len(events) > limit` holds" in messages[0]
    assert "whenever `len(events) > limit` does not hold" in messages[1]
    assert not any("every iteration" in m for m in messages)


def test_cast_in_loop_does_not_claim_an_allocation_it_cannot_know():
    [finding] = _findings(
        """
        import torch

        def generate(model, tokens, mask, steps):
            for _ in range(steps):
                tokens = model(tokens, mask.float())
        """, "PFL203")
    assert "unless it already has that dtype" in finding.message


def test_a_string_keyed_slot_lives_where_every_store_under_its_key_puts_it():
    source = """
        import torch

        class MadGrad(torch.optim.Optimizer):
            def __init__(self, params):
                super().__init__(params, {})
                self.state["k"] = torch.tensor([0], dtype=torch.long)

            def step(self):
                k = self.state["k"].item()
                for group in self.param_groups:
                    for p in group["params"]:
                        state = self.state[p]
                        if len(state) == 0:
                            state["step"] = torch.zeros((), device="cuda")
                        print(state["step"].item())
        """
    # The counter on the host syncs nothing; the one on the GPU is reported even in a loop nested
    # in the step (where an unplaced tensor would need stronger evidence, see `direct_evidence`).
    assert [f.start.row for f in _findings(source, "PFL101")] == [16]
