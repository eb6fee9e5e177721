"""What a profiled call was given, in a few words per argument: `float32[256, 256] cpu`.

The result records it (`settings.arguments`) so that the next result for the function can tell a
code change from an input change: a smaller input is no speedup (`perflsp.comparison`). Tensors
are described by dtype, shape and device, modules by class, parameter count, dtype and device,
containers by their first items, numbers and strings by value; their contents are never read
(no device sync). Duck-typed: no torch import here.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

MAX_ITEMS = 8  # per container: enough to see a change of structure, short enough to read
MAX_DEPTH = 2
MAX_TEXT = 60


def describe_arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> List[str]:
    return [describe(value) for value in args] + [f"{name}={describe(value)}" for name, value in kwargs.items()]


def describe(value: Any, depth: int = 0) -> str:
    if _is_tensor(value):
        return _tensor(value)
    parameters = getattr(value, "parameters", None)
    if callable(parameters) and hasattr(value, "state_dict"):  # an nn.Module
        return _module(value)
    if isinstance(value, (bool, int, float, complex, str, bytes)) or value is None:
        text = repr(value)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."
    if isinstance(value, (list, tuple, dict)):
        return _container(value, depth)
    return type(value).__qualname__


def _is_tensor(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("shape", "dtype", "device", "data_ptr"))


def _tensor(t: Any) -> str:
    dtype = str(t.dtype).replace("torch.", "")
    return f"{dtype}[{', '.join(str(int(n)) for n in t.shape)}] {t.device}"


def _module(module: Any) -> str:
    params = list(module.parameters())
    count = sum(int(p.numel()) for p in params)
    where = f", {str(params[0].dtype).replace('torch.', '')} {params[0].device}" if params else ""
    return f"{type(module).__qualname__}({count} parameters{where})"


def _container(value: Any, depth: int) -> str:
    if depth >= MAX_DEPTH:
        return f"{type(value).__qualname__} of {len(value)}"
    if isinstance(value, dict):
        items = [f"{k!r}: {describe(v, depth + 1)}" for k, v in list(value.items())[:MAX_ITEMS]]
        opening, closing = "{", "}"
    else:
        items = [describe(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    if len(value) > MAX_ITEMS:
        items.append(f"... {len(value)} in all")
    return opening + ", ".join(items) + closing
