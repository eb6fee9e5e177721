from __future__ import annotations

from typing import Iterator

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl401_alloc_in_loop import target_key
from perflsp.rules.rule import Invalid, Report, Rule

_JOINS = frozenset("torch." + name for name in "cat concat concatenate stack hstack vstack".split())


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
        "preallocate the full result (`out = torch.empty(n, ...)`) and write `out[i] = x` "
        "(for generation, preallocate the token buffer and fill one column per step)."
    )
    scope = "hot"
    valid = [
        "import torch\n\n@torch.no_grad()\ndef embed_all(model, loader):\n    chunks = []\n"
        "    for x in loader:\n        chunks.append(model(x))\n    return torch.cat(chunks)\n",
        # Joining fresh pieces, not a growing accumulator.
        "import torch\n\ndef pairs(loader):\n    for a, b in loader:\n        yield torch.cat([a, b], dim=1)\n",
        # Outside any loop: one copy.
        "import torch\n\ndef append_eos(tokens, eos):\n    return torch.cat([tokens, eos], dim=1)\n",
    ]
    invalid = [
        Invalid(
            "import torch\n\n@torch.no_grad()\ndef embed_all(model, loader):\n    embeddings = torch.empty(0, 768)\n"
            "    for x in loader:\n        embeddings = torch.cat([embeddings, model(x)], dim=0)\n    return embeddings\n",
            flagged="torch.cat([embeddings, model(x)], dim=0)",
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
            if any(target_key(element.value) == target for element in pieces.elements):
                yield self.report(
                    call, frame,
                    f"`{ctx.code(call)}` copies all of `{target}` into a new tensor to add one piece, "
                    "{where}: quadratic copying over the loop; collect the pieces in a list and "
                    "`torch.cat` once after the loop, or preallocate the result",
                )
