from __future__ import annotations

from typing import Iterator, List, Set, Tuple

import libcst as cst

from perflsp.rules.context import CLOCKS, ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame



class ExplicitSynchronize(Rule):
    code = "PFL104"
    name = "explicit-synchronize"
    summary = "`torch.cuda.synchronize()` or `stream/event.synchronize()` inside a loop stalls every iteration"
    why = (
        "`synchronize()` blocks the Python thread until the GPU has finished every kernel queued so far "
        "(on the device, the stream, or up to the event). Inside a loop this empties the GPU's queue "
        "once per iteration: the host stops queuing work ahead, the GPU idles while Python prepares the "
        "next iteration, and launch latency is no longer hidden. Work on one stream is already ordered, "
        "so the call is rarely needed for correctness."
    )
    how_to_fix = (
        "Remove it: kernels on one stream run in order without it. To order work across streams use "
        "`stream.wait_stream(other)` or `stream.wait_event(event)`, which wait on the device without "
        "blocking the host. Synchronize once after the loop when the host needs the results. To time "
        "code, record `torch.cuda.Event(enable_timing=True)` pairs and synchronize once at the end."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 26 repositories nobody tuned it on (judged by hand, 2026-12-01; bench/realworld/) none of 4 "
        "findings was worth a change: the synchronize stood next to a `.item()` that waits for the same "
        "work, or timed the step on purpose."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "    torch.cuda.synchronize()\n",
        "import torch\n\n\ndef train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "    torch.cuda.synchronize()\n",
        # Benchmarks must synchronize before reading the clock.
        "import torch\nfrom time import perf_counter\n\n\ndef bench(model, x, iters=50):\n"
        "    times = []\n"
        "    for _ in range(iters):\n"
        "        torch.cuda.synchronize()\n"
        "        start = perf_counter()\n"
        "        model(x)\n"
        "        torch.cuda.synchronize()\n"
        "        times.append(perf_counter() - start)\n"
        "    return sorted(times)[len(times) // 2]\n",
        "import torch\n\n\ndef time_steps(step_fn, batches):\n"
        "    timings = []\n"
        "    for batch in batches:\n"
        "        start = torch.cuda.Event(enable_timing=True)\n"
        "        end = torch.cuda.Event(enable_timing=True)\n"
        "        start.record()\n"
        "        step_fn(batch)\n"
        "        end.record()\n"
        "        end.synchronize()\n"
        "        timings.append(start.elapsed_time(end))\n"
        "    return timings\n",
    ]
    example_run = (
        "model = torch.nn.Linear(8, 3).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = [(torch.randn(4, 8), torch.tensor([0, 1, 2, 0]))] * 3\n"
        "train(model, loader, opt)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n\ndef train(model, loader, opt):\n"
            "    for x, y in loader:\n"
            "        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)\n"
            "        loss = torch.nn.functional.cross_entropy(model(x), y)\n"
            "        opt.zero_grad()\n"
            "        loss.backward()\n"
            "        opt.step()\n"
            "        torch.cuda.synchronize()\n",
            flagged="torch.cuda.synchronize()",
        ),
        Invalid(
            "import torch\n\n\ndef prefetching_loop(model, loader):\n"
            "    copy_stream = torch.cuda.Stream()\n"
            "    for x in loader:\n"
            "        with torch.cuda.stream(copy_stream):\n"
            "            x = x.cuda(non_blocking=True)\n"
            "        copy_stream.synchronize()\n"
            "        model(x)\n",
            flagged="copy_stream.synchronize()",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        syncs: List[Tuple[cst.Call, Frame]] = []
        timed_loops: Set[cst.CSTNode] = set()
        for call, frame in ctx.nodes(cst.Call):
            if not frame.loops:
                continue
            qualname = ctx.qualname(call.func)  # type: ignore[attr-defined]
            if qualname in CLOCKS or ctx.method_name(call) == "elapsed_time":  # type: ignore[arg-type]
                timed_loops.update(frame.loops)
            elif ctx.is_synchronize(call):  # type: ignore[arg-type]
                syncs.append((call, frame))  # type: ignore[arg-type]
        for call, frame in syncs:
            # Timing code needs the synchronization to measure anything.
            if frame.innermost_loop in timed_loops:
                continue
            how_often = _how_often(ctx, call, frame.innermost_loop)  # type: ignore[arg-type]
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` blocks the host until the GPU has finished the work queued before it, {{where}}: "
                f"the GPU's queue empties {how_often}; remove it (one stream is already ordered), "
                "use `wait_stream`/`wait_event` between streams, or synchronize once after the loop",
            )


def _how_often(ctx: ModuleContext, node: cst.CSTNode, loop: cst.CSTNode) -> str:
    """"on every iteration", or under the innermost `if` between `node` and `loop`, when it holds."""
    child, parent = node, ctx.parent(node)
    while parent is not None and parent is not loop:
        if isinstance(parent, cst.If) and child is not parent.test:
            test = ctx.code(parent.test, 40)
            return f"whenever `{test}` holds" if child is parent.body else f"whenever `{test}` does not hold"
        child, parent = parent, ctx.parent(parent)
    return "on every iteration"
