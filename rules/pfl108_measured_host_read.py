from __future__ import annotations

from typing import Iterator

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule


class MeasuredHostRead(Rule):
    """Reported by `perflsp.rules.evidence` from a recorded run; the text alone never shows it."""

    code = "PFL108"
    name = "measured-host-read"
    summary = "A recorded run read a device-bound tensor on the host on every step, where no other rule looked"
    why = (
        "`perflsp record` ran the program and saw this line read a tensor bound for the compute device "
        "back on the host (`.item()`, `float(t)`, `'%g' % t`, `if t:`, `.tolist()`, a data-dependent shape) "
        "on every step. On a GPU each such read waits until every kernel queued before it has run, so the "
        "host stops queuing work ahead and the GPU idles while Python catches up. The static rules miss "
        "such reads where the tensor's nature does not show in the text: behind a callback, a callable "
        "object, a formatted log line. On a machine without a GPU the record still knows which tensors "
        "were sent to the compute device and reports the reads that would wait on one."
    )
    how_to_fix = (
        "Keep the values on the device and read them every N steps, or accumulate them in a device "
        "tensor and read that once per epoch; log with `.detach()` tensors and format them only when "
        "printing."
    )
    scope = "hot"
    measured = True
    tier_reason = "It reports only what a run observed on every recorded step."
    # The examples are whole programs (what `perflsp record` runs): they run their own steps.
    example_run = "assert step == 39\n"
    valid = [
        "import torch\n\n\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "total = torch.zeros(())\n"
        "for step in range(40):\n"
        "    loss = model(torch.randn(8, 4)).square().mean()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    total += loss.detach()\n"
        "print(f\"mean loss {total.item() / 40:.4f}\")\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\n\n"
            "class Logger:\n"
            "    def __init__(self):\n"
            "        self.history = []\n\n"
            "    def on_batch(self, loss):\n"
            "        self.history.append(loss.item())\n\n\n"
            "device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "model = torch.nn.Linear(4, 1).to(device)\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "logger = Logger()\n"
            "for step in range(40):\n"
            "    loss = model(torch.randn(8, 4, device=device)).square().mean()\n"
            "    opt.zero_grad()\n"
            "    loss.backward()\n"
            "    opt.step()\n"
            "    logger.on_batch(loss)\n",
            flagged="self.history.append(loss.item())",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        return iter(())
