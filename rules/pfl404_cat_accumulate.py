from __future__ import annotations

from typing import Iterator, Set

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl401_alloc_in_loop import target_key
from perflsp.rules.rule import Invalid, Report, Rule

_JOINS = frozenset("torch." + name for name in "cat concat concatenate stack hstack vstack".split())


def _assigned_keys(target: cst.BaseExpression) -> Set[str]:
    """The dotted names an assignment target binds (`row`, `self.keys`, both of `row, col`)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return {key for element in target.elements for key in _assigned_keys(element.value)}
    key = target_key(target)
    return {key} if key else set()


def _restarted(ctx: ModuleContext, loop: cst.CSTNode, assign: cst.Assign, target: str) -> bool:
    """Each iteration starts `target` anew, so nothing grows across iterations: the loop body
    assigns it another value too, or the loop binds it, or the object it belongs to
    (`for region in regions: region.emb = torch.cat([pad, region.emb])`)."""
    if isinstance(loop, cst.For) and target.split(".")[0] in _assigned_keys(loop.target):
        return True
    return any(isinstance(node, cst.Assign) and node is not assign
               and any(target in _assigned_keys(t.target) for t in node.targets)
               for node in ctx.descendants(loop.body))  # type: ignore[attr-defined]


def _read_in_loop(ctx: ModuleContext, loop: cst.CSTNode, accumulation: Set[cst.CSTNode], target: str) -> bool:
    """The loop body reads `target` other than to accumulate into it (generation feeds the tokens
    so far back to the model), so the pieces cannot wait in a list."""
    for node in ctx.descendants(loop.body):  # type: ignore[attr-defined]
        if node in accumulation or not isinstance(node, (cst.Name, cst.Attribute)) or target_key(node) != target:
            continue
        parent = ctx.parent(node)
        if not (isinstance(parent, cst.Attribute) and parent.attr is node):  # `x.tokens` is not `tokens`
            return True
    return False


class CatAccumulate(Rule):
    code = "PFL404"
    name = "cat-accumulate"
    summary = "`acc = torch.cat([acc, x])` in a loop copies everything accumulated so far on every iteration"
    why = (
        "`torch.cat` cannot grow a tensor in place: it allocates a new one and copies both inputs "
        "into it. Growing an accumulator this way copies the whole accumulated result again on "
        "every iteration, so n iterations move O(n²) bytes and launch a copy kernel each, and "
        "the caching allocator keeps a new, larger block for every size it has seen."
    )
    how_to_fix = (
        "Append the pieces to a Python list and call `torch.cat` once after the loop, or "
        "preallocate the full result (`out = torch.empty(n, ...)`) and write `out[i] = x`. Where "
        "the loop reads what it has accumulated (generation feeds the tokens so far back to the "
        "model), only preallocation works: fill one column per step and read `out[:, :n]`."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On unseen real code (judged by hand, 2026-12-01; bench/realworld/) none of 12 findings was "
        "worth a change: the loops ran two or three times, not long enough for the quadratic copy to "
        "matter."
    )
    valid = [
        "import torch\n\n@torch.no_grad()\ndef embed_all(model, loader, device):\n    chunks = []\n"
        "    for x in loader:\n        chunks.append(model(x.to(device)))\n    return torch.cat(chunks)\n",
        # Joining fresh pieces, not a growing accumulator.
        "import torch\n\ndef pairs(loader):\n    for a, b in loader:\n        yield torch.cat([a, b], dim=1)\n",
        # Outside any loop: one copy.
        "import torch\n\ndef append_eos(tokens, eos):\n    return torch.cat([tokens, eos], dim=1)\n",
        # Rebuilt on every iteration, then extended once: nothing grows across iterations.
        "import torch\n\ndef graphs(files, n):\n    for f in files:\n        row = torch.load(f)\n"
        "        row = torch.cat([row, torch.arange(n)])\n        yield row\n",
        # A different object on every iteration.
        "import torch\n\ndef pad_all(regions, pad):\n    for region in regions:\n"
        "        region.emb = torch.cat([pad, region.emb])\n",
    ]
    example_run = (
        "embed_all(torch.nn.Linear(16, 768).to(device), [torch.randn(2, 16)] * 3, device)\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef embed_all(model, loader, device):\n"
            "    embeddings = torch.empty(0, 768, device=device)\n"
            "    for x in loader:\n        embeddings = torch.cat([embeddings, model(x.to(device))], dim=0)\n"
            "    return embeddings\n",
            flagged="torch.cat([embeddings, model(x.to(device))], dim=0)",
        ),
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef generate(model, tokens, steps):\n    for _ in range(steps):\n"
            "        logits = model(tokens)[:, -1]\n        next_token = logits.argmax(-1, keepdim=True)\n"
            "        tokens = torch.cat((tokens, next_token), dim=1)\n    return tokens\n",
            flagged="torch.cat((tokens, next_token), dim=1)",
        ),
        Invalid(
            "import torch\n\nclass Memory:\n    def update(self, batches):\n        for keys in batches:\n"
            "            self.keys = torch.cat([self.keys, keys.detach()])\n",
            flagged="torch.cat([self.keys, keys.detach()])",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for assign, frame in ctx.nodes(cst.Assign):
            if not frame.loops or len(assign.targets) != 1:
                continue
            call = assign.value
            if not isinstance(call, cst.Call) or not call.args or ctx.qualname(call.func) not in _JOINS:
                continue
            target = target_key(assign.targets[0].target)
            pieces = call.args[0].value
            if target is None or not isinstance(pieces, (cst.List, cst.Tuple)):
                continue
            accumulated = [e.value for e in pieces.elements if target_key(e.value) == target]
            if not accumulated:
                continue
            loop = frame.loops[-1]
            if _restarted(ctx, loop, assign, target):  # type: ignore[arg-type]
                continue
            # `acc = torch.cat([acc, x])` itself: the target and the piece that is the accumulator.
            accumulation = {node for expr in (assign.targets[0].target, *accumulated)
                            for node in (expr, *ctx.descendants(expr))}
            if _read_in_loop(ctx, loop, accumulation, target):  # type: ignore[arg-type]
                advice = (f"the loop also reads `{target}`, so preallocate the full result once and write each "
                          "piece into its slice, reading the filled part where the loop needs it")
            else:
                advice = "collect the pieces in a list and `torch.cat` once after the loop, or preallocate the result"
            yield self.report(
                call, frame,
                f"`{ctx.code(call)}` copies all of `{target}` into a new tensor to add one piece, "
                f"{{where}}: quadratic copying over the loop; {advice}",
            )
