from __future__ import annotations

from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from perflsp.rules.context import ModuleContext
from perflsp.rules.pfl604_debug_api_left_on import is_gradient_call
from perflsp.rules.rule import FixSpec, Invalid, Report, Rule
from perflsp.rules.walk import Frame

_CONVS = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})
_NORMS = frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm"})
_BIAS_POSITION = 7  # `Conv2d(in, out, kernel_size, stride, padding, dilation, groups, bias)`, same for ConvTranspose
# Calls that fill a model with weights trained before: their `...bias` keys must stay loadable.
_LOAD_METHODS = frozenset({"load_state_dict", "from_pretrained", "load_from_checkpoint"})
_LOAD_FUNCTIONS = frozenset({"torch.load", "safetensors.torch.load_file", "safetensors.torch.load_model"})

_Layer = Tuple[cst.Call, Frame]


class ConvBiasBeforeBatchnorm(Rule):
    code = "PFL606"
    name = "conv-bias-before-batchnorm"
    summary = "Convolution with a bias directly followed by batch norm, which cancels the bias"
    why = (
        "Batch norm subtracts each channel's mean before it scales and shifts. A per-channel bias "
        "added by the convolution right before it moves that mean by exactly the bias, so it is "
        "subtracted again with the batch mean while the model trains. The bias still costs an "
        "extra add over the whole activation (or keeps cuDNN from its bias-free kernels), a "
        "parameter, its gradient (a reduction over the batch and spatial dimensions in every "
        "backward, which comes out zero) and optimizer state, for no effect; batch norm's own "
        "shift (`beta`) already provides the offset. In eval mode batch norm subtracts its running "
        "mean instead, a constant learned with the bias in it: there the bias is part of the "
        "trained model (dropping it shifts every output unless the running mean is adjusted) and "
        "costs one add, often fused into the convolution. So the rule says nothing in a module "
        "that only evaluates (it calls `.eval()` and never `backward()` or an optimizer step). The fix is "
        "unsafe: checkpoints saved with the bias hold a `...bias` key that `load_state_dict` "
        "(strict by default) then rejects; in a module that loads one (`load_state_dict`, "
        "`from_pretrained`, `torch.load`, ...) the rule gives advice without a fix."
    )
    how_to_fix = (
        "Pass `bias=False` to a convolution that feeds straight into `BatchNorm`. To keep loading "
        "checkpoints saved with the bias, fold it into the batch norm as you load them (subtract "
        "the convolution's bias from the batch norm's `running_mean` and drop the `...bias` key), "
        "which leaves the model's outputs unchanged."
    )
    scope = "setup"
    preview = True
    tier_reason = (
        "On unseen real code judged by hand (2026-12-01; bench/realworld/) it was right 49 times in "
        "70 decided findings over samples 2 to 7 (0.70), and 28 in 47 on the latest (sample 7, 29 "
        "repositories): it cannot tell a network trained from scratch, where batch norm cancels the "
        "bias, from one only ever loaded from published weights and run in eval mode (an annotator, "
        "weights converted from another framework), nor see classes that nothing builds."
    )
    fix_safety = "unsafe"
    valid = [
        "import torch.nn as nn\n\nblock = nn.Sequential(\n    nn.Conv2d(64, 128, kernel_size=3, padding=1, bias=False),\n"
        "    nn.BatchNorm2d(128),\n    nn.ReLU(inplace=True),\n)\n",
        "import torch.nn as nn\n\nblock = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(128))\n",
        "import torch.nn as nn\n\nhead = nn.Sequential(nn.Conv1d(256, 10, 1), nn.LayerNorm(10))\n",
        "import torch.nn as nn\n\n\nclass Block(nn.Module):\n    def __init__(self, c):\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(c, c, 3, padding=1)\n        self.bn = nn.BatchNorm2d(c)\n\n"
        "    def forward(self, x):\n        return self.bn(x + self.conv(x))\n",
        # Inference with pretrained weights: batch norm's running mean was learned with the bias in it.
        "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.Conv2d(1, 16, 3, padding=1)\n        self.bn = nn.BatchNorm2d(16)\n\n"
        "    def forward(self, x):\n        return self.bn(self.conv(x))\n\n\n"
        "def score(x, path):\n    model = Net()\n    model.load_state_dict(torch.load(path), strict=True)\n"
        "    model.eval()\n    with torch.no_grad():\n        return model(x)\n",
    ]
    invalid = [
        Invalid(
            "import torch.nn as nn\n\nstem = nn.Sequential(\n    nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3),\n"
            "    nn.BatchNorm2d(64),\n    nn.ReLU(inplace=True),\n)\n",
            flagged="nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3)",
            fixed="import torch.nn as nn\n\nstem = nn.Sequential(\n    nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False),\n"
            "    nn.BatchNorm2d(64),\n    nn.ReLU(inplace=True),\n)\n",
        ),
        Invalid(
            "import torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass ConvBlock(nn.Module):\n"
            "    def __init__(self, cin, cout):\n        super().__init__()\n"
            "        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=True)\n        self.bn = nn.BatchNorm2d(cout)\n\n"
            "    def forward(self, x):\n        x = self.conv(x)\n        x = self.bn(x)\n        return F.relu(x)\n",
            flagged="nn.Conv2d(cin, cout, 3, padding=1, bias=True)",
            fixed="import torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass ConvBlock(nn.Module):\n"
            "    def __init__(self, cin, cout):\n        super().__init__()\n"
            "        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)\n        self.bn = nn.BatchNorm2d(cout)\n\n"
            "    def forward(self, x):\n        x = self.conv(x)\n        x = self.bn(x)\n        return F.relu(x)\n",
        ),
        Invalid(
            "import torch.nn as nn\n\n\ndef make_layers(cfg):\n    layers, in_channels = [], 3\n    for v in cfg:\n"
            "        conv = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)\n"
            "        layers += [conv, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]\n        in_channels = v\n"
            "    return nn.Sequential(*layers)\n",
            flagged="nn.Conv2d(in_channels, v, kernel_size=3, padding=1)",
        ),
        Invalid(
            "import torch\nfrom torch import nn\n\n\nclass Stem(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.conv1 = nn.Conv3d(1, 32, kernel_size=3)\n"
            "        self.bn1 = nn.BatchNorm3d(32)\n\n    def forward(self, x):\n"
            "        return torch.relu(self.bn1(self.conv1(x)))\n",
            flagged="nn.Conv3d(1, 32, kernel_size=3)",
        ),
        # Fine-tuning from a checkpoint that holds the bias: advice, no fix.
        Invalid(
            "import torch\nfrom torch import nn\n\nstem = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())\n"
            "stem.load_state_dict(torch.load(\"stem.pt\"))\n\n\ndef finetune(loader, opt):\n"
            "    for x, y in loader:\n        torch.nn.functional.mse_loss(stem(x), y).backward()\n        opt.step()\n",
            flagged="nn.Conv2d(3, 64, 3, padding=1)",
        ),
    ]

    def check(self, ctx: ModuleContext) -> Iterator[Report]:
        pairs = list(self._pairs(ctx))
        if not pairs or ctx.fact(_only_evaluates):
            return
        load = ctx.fact(_checkpoint_load)
        reported: Set[cst.Call] = set()
        for (conv, frame), norm in pairs:
            if conv in reported:
                continue
            reported.add(conv)
            message = (f"`{ctx.code(conv)}` adds a per-channel bias that the following `{ctx.code(norm)}` "
                       "removes again when it subtracts the batch mean in training: an extra add, a "
                       "parameter, its gradient and optimizer state for no effect; pass `bias=False`")
            if load is None:
                yield self.report(conv, frame, message, fix=self._fix(ctx, conv))
            else:
                yield self.report(
                    conv, frame,
                    f"{message} once checkpoints saved with the bias (this module loads one: "
                    f"`{ctx.code(load, 40)}`) need no loading, or subtract the bias from the batch "
                    "norm's `running_mean` as you load them",
                )

    def _pairs(self, ctx: ModuleContext) -> Iterator[Tuple[_Layer, cst.Call]]:
        """(convolution with bias, the batch norm right after it)."""
        for call, frame in ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
                if frame.class_info is not None:
                    found = _applied_pair(ctx, call, frame)  # type: ignore[arg-type]
                    if found is not None:
                        yield found
            elif ctx.last_name(func) == "Sequential" and ctx.qualname(func) == "torch.nn.Sequential":
                yield from _consecutive(ctx, _sequential_layers(ctx, call), frame)  # type: ignore[arg-type]
        for node, frame in ctx.nodes(cst.List):
            # `layers += [conv, nn.BatchNorm2d(v), nn.ReLU()]` before `nn.Sequential(*layers)`
            elements = [e.value for e in node.elements if isinstance(e, cst.Element)]  # type: ignore[attr-defined]
            yield from _consecutive(ctx, elements, frame)

    def _fix(self, ctx: ModuleContext, conv: cst.Call) -> Optional[FixSpec]:
        # Unsafe, and it says why: a pretrained checkpoint loaded elsewhere in the project (a
        # framework's loader) holds the bias.
        message = ("Pass `bias=False` (a checkpoint saved with the bias then fails a strict "
                   "`load_state_dict`, and a non-strict one drops its bias silently)")
        bias = ctx.argument(conv, "bias", _BIAS_POSITION)
        if bias is not None:
            return self.replace(message, "unsafe", (bias.value, "False"))
        last = conv.args[-1].value
        text = ctx.module.code_for_node(last)
        if "\n" in text:  # re-rendered alone, a multi-line argument would lose its indentation
            return None
        return self.replace(message, "unsafe", (last, f"{text}, bias=False"))


def _only_evaluates(ctx: ModuleContext) -> bool:
    """The module puts a model in eval mode and never trains one: its batch norms use running
    statistics, which the bias is part of."""
    calls = [call for call, _ in ctx.calls_named("eval", "backward", "step", "grad")]
    evaluates = any(ctx.method_name(c) == "eval" and not c.args and ctx.qualname(c.func) is None for c in calls)  # type: ignore[attr-defined]
    return evaluates and not any(is_gradient_call(ctx, c) for c in calls)  # type: ignore[arg-type]


def _checkpoint_load(ctx: ModuleContext) -> Optional[cst.Call]:
    """The first call in the module that loads trained weights, if any."""
    for call, _ in ctx.calls_named(*_LOAD_METHODS, *(q.rsplit(".", 1)[1] for q in _LOAD_FUNCTIONS)):
        if ctx.method_name(call) in _LOAD_METHODS or ctx.qualname(call.func) in _LOAD_FUNCTIONS:
            return call  # type: ignore[return-value]
    return None


def _layer_call(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame, names: frozenset) -> Optional[_Layer]:
    """`expr` constructs an `nn.<one of names>`, directly or through a name assigned once."""
    if isinstance(expr, cst.Name):
        bindings = ctx.bindings_of(expr.value, frame)
        if len(bindings) != 1 or bindings[0].how != "assign" or not isinstance(bindings[0].value, cst.Call):
            return None
        expr, frame = bindings[0].value, bindings[0].frame
    if not (isinstance(expr, cst.Call) and ctx.last_name(expr.func) in names):
        return None
    return (expr, frame) if (ctx.qualname(expr.func) or "").startswith("torch.nn.") else None


def _biased_conv(ctx: ModuleContext, expr: cst.BaseExpression, frame: Frame) -> Optional[_Layer]:
    layer = _layer_call(ctx, expr, frame, _CONVS)
    if layer is None or any(arg.star for arg in layer[0].args):
        return None
    bias = ctx.argument(layer[0], "bias", _BIAS_POSITION)
    return layer if bias is None or ctx.literal(bias.value) is True else None


def _consecutive(ctx: ModuleContext, layers: List[cst.BaseExpression],
                 frame: Frame) -> Iterator[Tuple[_Layer, cst.Call]]:
    for first, second in zip(layers, layers[1:]):
        norm = _layer_call(ctx, second, frame, _NORMS)
        conv = _biased_conv(ctx, first, frame) if norm is not None else None
        if conv is not None and norm is not None:
            yield conv, norm[0]


def _sequential_layers(ctx: ModuleContext, call: cst.Call) -> List[cst.BaseExpression]:
    """The modules in `nn.Sequential(a, b, ...)` or `nn.Sequential(OrderedDict([("a", a), ...]))`."""
    args = [a.value for a in ctx.positional(call)]
    if len(args) == 1 and isinstance(args[0], cst.Call) and ctx.qualname(args[0].func) == "collections.OrderedDict":
        items = ctx.positional(args[0])
        pairs = items[0].value if items else None
        if isinstance(pairs, (cst.List, cst.Tuple)):
            return [e.value.elements[1].value for e in pairs.elements
                    if isinstance(e.value, cst.Tuple) and len(e.value.elements) == 2]
    return args


def _self_layer(expr: cst.BaseExpression, frame: Frame) -> Optional[Tuple[cst.BaseExpression, Frame]]:
    """What `self.<attr>` was bound to, when the class binds it exactly once (in `__init__`)."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self"):
        return None
    bound = frame.class_info.attr_bindings.get(expr.attr.value, [])  # type: ignore[union-attr]
    return bound[0] if len(bound) == 1 else None


def _applied_pair(ctx: ModuleContext, call: cst.Call, frame: Frame) -> Optional[Tuple[_Layer, cst.Call]]:
    """`self.bn(self.conv(x))`, or `x = self.conv(x)` then `x = self.bn(x)` on the next line."""
    bound = _self_layer(call.func, frame)
    norm = _layer_call(ctx, bound[0], bound[1], _NORMS) if bound is not None else None
    args = ctx.positional(call)
    if norm is None or len(args) != 1:
        return None
    inner = args[0].value
    if isinstance(inner, cst.Name):
        inner = _assigned_just_before(ctx, call, inner.value)
    if not (isinstance(inner, cst.Call) and len(ctx.positional(inner)) == 1):
        return None
    bound = _self_layer(inner.func, frame)
    conv = _biased_conv(ctx, bound[0], bound[1]) if bound is not None else None
    return (conv, norm[0]) if conv is not None else None


def _assigned_just_before(ctx: ModuleContext, node: cst.CSTNode, name: str) -> Optional[cst.BaseExpression]:
    """The value of `name = <value>` when it is the statement right before the one holding `node`."""
    statement: Optional[cst.CSTNode] = node
    while statement is not None and not isinstance(statement, cst.SimpleStatementLine):
        statement = ctx.parent(statement)
    block = ctx.parent(statement) if statement is not None else None
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return None
    body = list(ctx.top_level() if isinstance(block, cst.Module) else block.body)
    index = body.index(statement)
    previous = body[index - 1] if index > 0 else None
    if not (isinstance(previous, cst.SimpleStatementLine) and len(previous.body) == 1):
        return None
    assign = previous.body[0]
    if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name) and assign.targets[0].target.value == name):
        return assign.value
    return None
