from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.rule import Invalid, Report, Rule
from perflsp.rules.walk import Frame


def _sized(ctx: ModuleContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`t` for `len(t)`, `t.shape[k]`, `t.size(k)` or `t.numel()`; else None."""
    if isinstance(expr, cst.Subscript):
        value = expr.value
        if isinstance(value, cst.Attribute) and value.attr.value == "shape":
            return value.value
        return None
    if not isinstance(expr, cst.Call):
        return None
    if ctx.builtin(expr.func) == "len" and len(expr.args) == 1:
        return expr.args[0].value
    method = ctx.method_name(expr)
    if (method == "size" and len(expr.args) == 1) or (method == "numel" and not expr.args):
        return expr.func.value  # type: ignore[attr-defined]
    return None


def _range_bound(ctx: ModuleContext, iterable: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The stop of `range(stop)` or `range(start, stop)` (`range(i + 1, n)` walks pairs)."""
    if not isinstance(iterable, cst.Call) or ctx.builtin(iterable.func) != "range":
        return None
    args = ctx.positional(iterable)
    if len(args) != len(iterable.args) or not 1 <= len(args) <= 2:
        return None
    return args[-1].value


def _indexes_with(subscript: cst.Subscript, index: str) -> bool:
    return any(
        isinstance(element.slice, cst.Index) and isinstance(element.slice.value, cst.Name)
        and element.slice.value.value == index
        for element in subscript.slice
    )


def _is_recurrence(ctx: ModuleContext, assign: cst.Assign) -> bool:
    """`h = cell(x[:, t], h)`: a call that feeds a name its own previous value makes the loop
    inherently sequential (an RNN step), not an element-wise loop."""
    if not isinstance(assign.value, cst.Call):
        return False
    rebound = set()
    for target in assign.targets:
        bound = target.target
        names = [e.value for e in bound.elements] if isinstance(bound, (cst.Tuple, cst.List)) else [bound]
        rebound.update(n.value for n in names if isinstance(n, cst.Name))
    return bool(rebound & ctx.names_in(assign.value))


class ElementwisePythonLoop(Rule):
    code = "PFL405"
    name = "elementwise-python-loop"
    summary = "A Python loop over a tensor's elements (`for i in range(len(t))`: `t[i]`) instead of one vectorised op"
    why = (
        "Every `t[i]` creates a new tensor view and every operation on it is a separate dispatch "
        "through PyTorch and, on the GPU, a separate kernel launch for one element or one row. "
        "That fixed cost of several microseconds per op is paid n times, while a single "
        "vectorised operation over the whole dimension costs one launch and runs at memory speed."
    )
    how_to_fix = (
        "Express the loop as one tensor operation over the whole dimension: arithmetic and "
        "comparisons broadcast, masks replace `if`, `torch.where` replaces per-element choices, "
        "`sum`/`cumsum`/`scatter_add_`/`gather`/`index_select` replace accumulations and lookups, "
        "and `torch.vmap` vectorises a per-sample function."
    )
    scope = "hot"
    preview = True
    tier_reason = (
        "On 13 real repositories nobody tuned the rules on (judged by hand, 2026-12-01; "
        "bench/realworld/) it was right 3 times in 5 decided findings: some loops are sequential "
        "by nature or produce ragged per-item results."
    )
    valid = [
        "import torch\n\ndef accuracy(logits: torch.Tensor, labels: torch.Tensor):\n    preds = logits.argmax(dim=1)\n"
        "    return (preds == labels).float().mean()\n",
        # A recurrence is sequential by nature.
        "import torch\n\ndef unroll(cell, x: torch.Tensor, h: torch.Tensor):\n    outputs = []\n    for t in range(x.size(1)):\n"
        "        h = cell(x[:, t], h)\n        outputs.append(h)\n    return torch.stack(outputs, dim=1)\n",
        # A loop over a short list of settings (three rotary axes), not over a tensor's elements.
        "import torch\n\nclass RopeEmbedder:\n"
        "    def __init__(self, axes_dims, freqs):\n        self.axes_dims = axes_dims\n        self.freqs = freqs\n\n"
        "    def __call__(self, ids: torch.Tensor):\n        parts = []\n"
        "        for i in range(len(self.axes_dims)):\n            parts.append(self.freqs[i][ids[:, i]])\n"
        "        return torch.cat(parts, dim=-1)\n",
        # Indexing a dataset, not a tensor.
        "def first_labels(dataset):\n    labels = []\n    for i in range(len(dataset)):\n"
        "        labels.append(dataset[i][1])\n    return labels\n",
    ]
    example_run = (
        "accuracy(torch.randn(4, 3, device=device), torch.tensor([0, 1, 2, 0], device=device))\n"
    )
    invalid = [
        Invalid(
            "import torch\n\n# perflsp: hot\ndef accuracy(logits: torch.Tensor, labels: torch.Tensor):\n    preds = logits.argmax(dim=1)\n    correct = 0\n"
            "    for i in range(len(preds)):\n        if preds[i] == labels[i]:\n            correct += 1\n"
            "    return correct / len(preds)\n",
            flagged="range(len(preds))",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef pairwise_dist(x: torch.Tensor, y: torch.Tensor):\n"
            "    out = torch.empty(x.shape[0], y.shape[0])\n"
            "    for i in range(x.shape[0]):\n        for j in range(y.shape[0]):\n"
            "            out[i, j] = (x[i] - y[j]).norm()\n    return out\n",
            flagged="range(x.shape[0])",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef dedupe_support(student: torch.Tensor, teacher: torch.Tensor, k: int):\n"
            "    support = torch.cat([student.topk(k, dim=-1)[1], teacher.topk(k, dim=-1)[1]], dim=-1)\n"
            "    keep = torch.ones_like(support, dtype=torch.bool)\n"
            "    for i in range(1, support.shape[-1]):\n"
            "        keep[..., i] &= ~(support[..., i : i + 1] == support[..., :i]).any(dim=-1)\n"
            "    return keep\n",
            flagged="range(1, support.shape[-1])",
        ),
        Invalid(
            "import torch\n\n# perflsp: hot\ndef pair_distances(points: torch.Tensor):\n    dists = []\n"
            "    for i, p in enumerate(points):\n        for j in range(i + 1, len(points)):\n"
            "            dists.append((p - points[j]).norm())\n    return torch.stack(dists)\n",
            flagged="range(i + 1, len(points))",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        for loop, frame in ctx.nodes(cst.For):
            if not isinstance(loop.target, cst.Name):
                continue
            bound = _range_bound(ctx, loop.iter)
            sized = _sized(ctx, bound) if bound is not None else None
            # A tensor's length, not that of a list of config values (`for i in range(len(self.axes))`).
            if sized is None or not ctx.is_tensor(sized, frame):
                continue
            indexed = self._tensor_index(ctx, loop, frame)
            if indexed is not None:
                yield self.report(
                    loop.iter, frame.with_loop(loop),  # the loop itself is what makes this hot
                    f"The body {{where}} runs once per element of `{ctx.code(sized)}`: `{ctx.code(indexed)}` "
                    "and every op on it is its own dispatch and kernel launch; replace the loop with "
                    "one vectorised operation over the whole dimension",
                )

    @staticmethod
    def _tensor_index(ctx: ModuleContext, loop: cst.For, frame: Frame) -> Optional[cst.Subscript]:
        """A tensor indexed with the loop variable in the body; None for a recurrence."""
        index = loop.target.value  # type: ignore[attr-defined]
        found = None
        for node in ctx.descendants(loop.body):
            if isinstance(node, cst.Assign) and _is_recurrence(ctx, node):
                return None
            if (found is None and isinstance(node, cst.Subscript) and _indexes_with(node, index)
                    and ctx.is_tensor(node.value, frame)):
                found = node
        return found
