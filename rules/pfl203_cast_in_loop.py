from __future__ import annotations

from typing import Dict, Iterator, Set, Tuple

import libcst as cst

from perflsp.rules.context import MODULE, NUMPY, PYTHON, TENSOR, ModuleContext
from perflsp.rules.dtypes import conversion_dtype, known_dtype, target_dtype
from perflsp.rules.pfl202_float64_on_device import calls_before
from perflsp.rules.pfl401_alloc_in_loop import call_is_invariant, calls_in_loops, mutated_in, runs_every_iteration, target_key
from perflsp.rules.pfl402_create_then_move import moves_to_device
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame

_CASTS = frozenset({"float", "half", "bfloat16", "long", "int"})


def _effects(ctx: ModuleContext, loop: cst.CSTNode, frame: Frame,
             cache: Dict[cst.CSTNode, Tuple[bool, Set[str]]]) -> Tuple[bool, Set[str]]:
    """Whether the loop body calls some `.step()` (an optimizer may update parameters in place),
    and the names it calls methods on (`env.step(a)`, `self.update()` for a method of the class),
    which may change the attributes of those objects."""
    found = cache.get(loop)
    if found is None:
        steps, roots = False, set()
        methods = frame.class_info.methods if frame.class_info is not None else {}
        for node in ctx.descendants(loop.body):  # type: ignore[attr-defined]
            if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
                continue
            steps = steps or node.func.attr.value == "step"
            root = node.func.value
            if isinstance(root, cst.Name) and (root.value != "self" or node.func.attr.value in methods):
                roots.add(root.value)
        found = cache[loop] = (steps, roots)
    return found


def _created_here(ctx: ModuleContext, receiver: cst.BaseExpression, frame: Frame) -> bool:
    """A local name only ever assigned a new tensor from a `torch.*` function without
    `requires_grad` (`w = torch.ones(3).cuda()`): no optimizer can be updating it."""
    if not isinstance(receiver, cst.Name):
        return False
    bindings = ctx.bindings_of(receiver.value, frame)
    if not bindings:
        return False
    for binding in bindings:
        if binding.how != "assign" or binding.index is not None:
            return False
        origin = binding.value
        for call in calls_before(ctx, origin):  # type: ignore[arg-type]
            origin = call.func.value  # type: ignore[attr-defined]
        if not isinstance(origin, cst.Call):
            return False
        qualname = ctx.qualname(origin.func) or ""
        if not qualname.startswith("torch.") or qualname.startswith("torch.nn."):
            return False
        if ctx.keyword(origin, "requires_grad") is not None:
            return False
    return True


class CastInLoop(Rule):
    code = "PFL203"
    name = "cast-in-loop"
    summary = "A dtype conversion of a tensor the loop never changes is recomputed on every iteration"
    why = (
        "`.float()`, `.half()`, `.to(dtype)` and friends allocate a new tensor and launch a kernel "
        "that reads and writes every element whenever the dtype actually changes. When the loop "
        "never reassigns or modifies the tensor, every iteration produces the very same result "
        "again: wasted memory bandwidth, an extra allocation and a kernel launch per step, and "
        "for a weight, a second copy of it in memory each time."
    )
    how_to_fix = (
        "Convert once before the loop (`mask_f = mask.float()`) and use the converted tensor "
        "inside it. A tensor an optimizer updates in place is left alone by this rule; for those, "
        "keep a low-precision copy in sync explicitly or use `torch.autocast`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "Too little evidence: one finding on 26 unseen repositories (judged by hand, 2026-12-01; "
        "bench/realworld/), judged minor (a batch-size mask)."
    )
    valid = [
        # The page's *Use instead*: the flagged example, fixed.
        "import torch\n"
        "\n"
        "@torch.no_grad()\n"
        "def generate(model, tokens, pad_mask, steps):\n"
        "    attn_bias = pad_mask.float()\n"
        "    for _ in range(steps):\n"
        "        logits = model(tokens, attn_bias=attn_bias)\n"
        "        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)\n"
        "    return tokens\n",
        "import torch\n\ndef decode(model, tokens, mask, steps):\n    mask = mask.float()\n"
        "    for _ in range(steps):\n        tokens = model(tokens, mask)\n    return tokens\n",
        # The tensor changes on every iteration.
        "import torch\n\ndef train(model, loader):\n    for x, y in loader:\n        out = model(x.float())\n",
        # Parameters change at every optimizer step, so their conversion must be redone.
        "import torch\n\ndef train(w, loader, opt):\n    for x, y in loader:\n"
        "        loss = ((x.half() @ w.half()).float() - y).pow(2).mean()\n"
        "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
        # `self.advance()` may change `self.state`.
        "import torch\n\nclass Simulation:\n    def advance(self):\n        self.state = self.state + self.velocity\n\n"
        "    def run(self, steps):\n        frames = []\n"
        "        for _ in range(steps):\n            self.advance()\n            frames.append(self.state.half())\n"
        "        return frames\n",
        # Already float32: `.float()` returns the tensor itself.
        "import torch\n\ndef rope(inv_freq, positions, device):\n"
        "    inv = inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1).to(device)\n"
        "    outs = []\n"
        "    for i in range(2):\n"
        "        pos = positions[:, :, i][:, None, :].float()\n"
        "        outs.append((inv.float() @ pos).transpose(1, 2))\n"
        "    return torch.cat(outs, dim=-1)\n",
        "import torch\n\ndef add_noise(model, loader):\n    noise = torch.randn(3, 224, 224)\n"
        "    for x, y in loader:\n        model(x + noise.float())\n",
        # Filled in place on every iteration.
        "import torch\n\ndef collect(model, loader, n):\n    hits = torch.zeros(n, dtype=torch.bool)\n"
        "    for i, (x, y) in enumerate(loader):\n        hits[i] = model(x).argmax() == y\n"
        "        rate = hits.float().mean()\n",
    ]
    example_run = (
        "class LM(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embed = torch.nn.Embedding(10, 10)\n"
        "\n"
        "    def forward(self, tokens, *masks, **more_masks):\n"
        "        return self.embed(tokens)\n"
        "\n"
        "\n"
        "tokens = torch.zeros(2, 4, dtype=torch.long, device=device)\n"
        "generate(LM().to(device), tokens, torch.ones(2, 4, dtype=torch.bool, device=device), steps=3)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef generate(model, tokens, pad_mask, steps):\n"
            "    for _ in range(steps):\n        logits = model(tokens, attn_bias=pad_mask.float())\n"
            "        tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], dim=1)\n    return tokens\n",
            flagged="pad_mask.float()",
        ),
        Invalid(
            "import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, opt):\n"
            "    class_weights = torch.tensor([1.0, 3.0, 0.5]).cuda()\n"
            "    for x, y in loader:\n"
            "        with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
            "            loss = F.cross_entropy(model(x), y, weight=class_weights.to(torch.bfloat16))\n"
            "        opt.zero_grad()\n        loss.backward()\n        opt.step()\n",
            flagged="class_weights.to(torch.bfloat16)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        mutated: Dict[cst.CSTNode, Set[str]] = {}
        effects: Dict[cst.CSTNode, Tuple[bool, Set[str]]] = {}
        for call, frame, loop in calls_in_loops(ctx):
            method = ctx.method_name(call)
            if not (method in _CASTS and not call.args or method == "to" and target_dtype(ctx, call) is not None):
                continue
            if method == "to" and moves_to_device(ctx, call, frame):
                continue  # a transfer as well: PFL403 reports it
            receiver = call.func.value
            key = target_key(receiver)
            if key is None or not call_is_invariant(ctx, call, loop) or not runs_every_iteration(ctx, call, loop):
                continue
            kind = ctx.kind(receiver, frame) if method != "to" else ctx.kind(call, frame)
            if kind in (NUMPY, PYTHON, MODULE) or (method == "to" and kind != TENSOR):
                continue
            if key in mutated_in(ctx, loop, mutated):
                continue
            steps, method_roots = _effects(ctx, loop, frame, effects)
            if "." in key and key.split(".")[0] in method_roots:
                continue
            if steps and not _created_here(ctx, receiver, frame):
                continue
            target = conversion_dtype(ctx, call)
            if target is not None and known_dtype(ctx, receiver, frame) == target:
                continue  # already that dtype: the conversion returns the tensor itself
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` converts `{key}` again on every iteration {{where}}, though the loop "
                "never changes it: unless it already has that dtype, each time a new tensor is allocated "
                "and every element cast; convert it once before the loop",
            )
