"""`--cold-cache`: each call gets the next of several copies of its inputs.

A function profiled on the same inputs call after call finds them in cache, which a training
step over fresh batches does not. With enough copies that, between two uses of one copy, the
others have touched more than the measured start of main memory's plateau (`levels[-1]`
`from_bytes` of the ceilings' bandwidth sweep), every call reads its inputs from main memory, and
the verdict is judged against main memory's bandwidth. Tensors are cloned, modules deep-copied,
lists, tuples and dicts copied around them; anything else is shared by every copy.
"""
from __future__ import annotations

import copy
import itertools
import math
from typing import Any, Callable, Dict, List, Tuple

MAX_COPIES = 1024  # tiny inputs are dispatch-bound long before they are cache-bound
MAX_TOTAL_BYTES = 2 * 1024 ** 3


def input_bytes(value: Any, seen: Dict[int, int] | None = None) -> int:
    """Distinct storage bytes of the tensors in `value` (nested containers, module parameters)."""
    seen = {} if seen is None else seen
    if _is_tensor(value):
        storage = value.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    elif callable(getattr(value, "parameters", None)) and hasattr(value, "state_dict"):
        for tensor in itertools.chain(value.parameters(), value.buffers()):
            input_bytes(tensor, seen)
    elif isinstance(value, (list, tuple)):
        for item in value:
            input_bytes(item, seen)
    elif isinstance(value, dict):
        for item in value.values():
            input_bytes(item, seen)
    return sum(seen.values())


def copies_needed(inputs_bytes: int, levels: List[Dict[str, Any]]) -> int:
    """How many copies keep each call's inputs out of every cache level (1: they do not fit)."""
    main = levels[-1]["from_bytes"]
    if inputs_bytes <= 0 or inputs_bytes >= main:
        return 1
    wanted = math.ceil(main / inputs_bytes) + 1
    return max(1, min(wanted, MAX_COPIES, MAX_TOTAL_BYTES // inputs_bytes))


def rotating_call(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any],
                  levels: List[Dict[str, Any]]) -> Tuple[Callable[[], Any], str]:
    """(a zero-argument call that uses the next copy each time, the note saying what it did)."""
    copies, note = input_copies(args, kwargs, levels)
    return rotating(fn, copies), note


def rotating(fn: Callable[..., Any], copies: List[Tuple[Tuple[Any, ...], Dict[str, Any]]]) -> Callable[[], Any]:
    """A zero-argument call of `fn` on the next of `copies` each time (`--compile` gives the eager
    and the compiled function the same copies)."""
    turn = itertools.cycle(copies)

    def call() -> Any:
        call_args, call_kwargs = next(turn)
        return fn(*call_args, **call_kwargs)

    return call


def input_copies(args: Tuple[Any, ...], kwargs: Dict[str, Any],
                 levels: List[Dict[str, Any]]) -> Tuple[List[Tuple[Tuple[Any, ...], Dict[str, Any]]], str]:
    """(the inputs and enough copies of them to keep each call's out of every cache, the note)."""
    size = input_bytes((args, kwargs))
    n = copies_needed(size, levels)
    main = levels[-1]
    copies = [(args, kwargs)] + [_copy((args, kwargs)) for _ in range(n - 1)]

    from perflsp import units

    if n == 1:
        note = (f"cold cache: the inputs ({units.byte_count(size)}) are larger than the caches (main memory's plateau "
                f"starts at {units.byte_count(main['from_bytes'])}), so every call reads them from {main['name']} "
                "without copies")
    else:
        note = (f"cold cache: each call got the next of {n} copies of its inputs ({units.byte_count(size)} each, "
                f"{units.byte_count(size * n)} in all), so its inputs came from {main['name']}: judged against "
                f"{main['name']}'s bandwidth")
        if size * (n - 1) < main["from_bytes"]:
            note += (f"; only partly cold: the copies were capped ({MAX_COPIES} copies, "
                     f"{units.byte_count(MAX_TOTAL_BYTES)}) below main memory's plateau")
    return copies, note


def _copy(value: Any) -> Any:
    if _is_tensor(value):
        return value.clone()
    if callable(getattr(value, "parameters", None)) and hasattr(value, "state_dict"):
        return copy.deepcopy(value)
    if isinstance(value, tuple):
        return tuple(_copy(item) for item in value)
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    return value


def _is_tensor(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("shape", "dtype", "untyped_storage", "clone"))
