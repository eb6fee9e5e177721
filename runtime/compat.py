"""The torch APIs whose names or calling conventions changed across versions, in one place.

- Profiler event times: `cuda_time_total` / `self_cuda_time_total` / `cuda_time` became
  `device_time_total` / `self_device_time_total` / `device_time` in the 2.4 cycle. torch 2.13
  keeps the old names on `FunctionEvent` (with a FutureWarning) but `FunctionEventAvg`, what
  `key_averages()` returns, has only the new ones; torch < 2.4 has only the old ones.
- `torch.autograd.profiler.profile(use_device="cuda")` replaced `use_cuda=True`.
- FlopCounterMode's formulas take the output as `out_val=` (it was `out=`, which clashed with
  the `out=` argument of `*.out` overloads).
- `torch.OutOfMemoryError` is the newer spelling of `torch.cuda.OutOfMemoryError`.
- `Tensor.untyped_storage()` replaced `Tensor.storage()`.

Everything else in the runtime goes through these helpers, so a rename is one edit here.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

DEVICE_TIME_TOTAL = ("device_time_total", "cuda_time_total")
SELF_DEVICE_TIME_TOTAL = ("self_device_time_total", "self_cuda_time_total")
DEVICE_TIME = ("device_time", "cuda_time")


def _first_number(obj: Any, names: Sequence[str]) -> float:
    """The first of `names` that `obj` has, as a float; 0.0 when it has none of them.

    The newer spelling comes first, so torch versions that have both never hit the deprecated
    property (and its FutureWarning).
    """
    for name in names:
        try:
            value = getattr(obj, name)
        except AttributeError:
            continue
        return float(value or 0.0)
    return 0.0


def device_time_total_us(event: Any) -> float:
    return _first_number(event, DEVICE_TIME_TOTAL)


def self_device_time_total_us(event: Any) -> float:
    return _first_number(event, SELF_DEVICE_TIME_TOTAL)


def device_time_us(event: Any) -> float:
    return _first_number(event, DEVICE_TIME)


def self_cpu_time_total_us(event: Any) -> float:
    return float(getattr(event, "self_cpu_time_total", 0.0) or 0.0)


def event_device_name(event: Any) -> str:
    """'CPU', 'CUDA', ... for a profiler event (its `device_type` enum's name)."""
    device_type = getattr(event, "device_type", None)
    if device_type is None:
        return "CPU"
    return getattr(device_type, "name", None) or str(device_type).rsplit(".", 1)[-1]


def is_device_event(event: Any) -> bool:
    """A kernel, memcpy or memset on the accelerator's timeline (not a host-side event)."""
    return event_device_name(event) != "CPU"


def is_user_annotation(event: Any) -> bool:
    """A `record_function` range (host or its mirror on the device timeline), not real work."""
    if getattr(event, "is_user_annotation", False):
        return True
    name = getattr(event, "name", "")
    return name.startswith("perflsp@") or name.startswith("ProfilerStep")


def kernel_time_us(event: Any) -> float:
    """Device time of the kernels launched directly by this host event (not its children).

    Kernel entries that are the device-side mirror of a user annotation are skipped: they span
    the real kernels and would count them twice.
    """
    total = 0.0
    for kernel in getattr(event, "kernels", ()) or ():
        name = getattr(kernel, "name", "")
        if name.startswith("perflsp@") or name.startswith("ProfilerStep"):
            continue
        total += float(getattr(kernel, "duration", 0.0) or 0.0)
    return total


def open_profiler(use_cuda: bool, record_shapes: bool = False, profile_cls: Optional[type] = None):
    """A `torch.autograd.profiler.profile` context for CPU (+ CUDA) activities.

    The lower-level class is used on purpose: `torch.profiler.profile.start()` evaluates
    `hasattr(torch, "_inductor")`, which imports inductor and dynamo (2-7 s on a small CI
    machine) on the first profile of every process.
    """
    if profile_cls is None:
        from torch.autograd.profiler import profile as profile_cls  # type: ignore[no-redef]
    return QuietProfiler(profile_cls(**profiler_kwargs(profile_cls, use_cuda, record_shapes)))


# Lines kineto prints on every start/stop in some builds (not controlled by KINETO_LOG_LEVEL).
_KINETO_NOISE = ("USDT:", "STAGE:")


class QuietProfiler:
    """Wraps a profiler so kineto's start/stop chatter on fd 2 is dropped; anything else it
    prints there (a CUPTI permission error, say) is passed on."""

    def __init__(self, prof: Any):
        self.prof = prof

    def __enter__(self) -> Any:
        with _filtered_stderr():
            self.prof.__enter__()
        return self.prof

    def __exit__(self, *exc: Any) -> Any:
        with _filtered_stderr():
            return self.prof.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.prof, name)


class _filtered_stderr:
    def __enter__(self) -> None:
        import os
        import sys
        import tempfile

        self._saved = None
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            self._capture = tempfile.TemporaryFile()
            os.dup2(self._capture.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no real fd 2 (embedded, some IDEs)
            self._saved = None

    def __exit__(self, *exc: Any) -> None:
        import os

        if self._saved is None:
            return
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._capture.seek(0)
        kept = [line for line in self._capture.read().decode(errors="replace").splitlines(keepends=True)
                if not line.startswith(_KINETO_NOISE)]
        self._capture.close()
        if kept:
            os.write(2, "".join(kept).encode())


def profiler_kwargs(profile_cls: type, use_cuda: bool, record_shapes: bool) -> Dict[str, Any]:
    params = inspect.signature(profile_cls.__init__).parameters
    kwargs: Dict[str, Any] = {}
    if "use_device" in params:
        kwargs["use_device"] = "cuda" if use_cuda else None
    elif use_cuda:
        kwargs["use_cuda"] = True
    if "record_shapes" in params:
        kwargs["record_shapes"] = record_shapes
    return kwargs


def profiler_events(prof: Any) -> Iterable[Any]:
    """The FunctionEvents of a finished profile, whichever accessor this torch has."""
    events = getattr(prof, "function_events", None)
    if events is None:
        events = prof.events()
    return events


@functools.lru_cache(maxsize=None)
def _output_keyword(formula: Callable[..., Any]) -> str:
    try:
        params = inspect.signature(formula).parameters
    except (TypeError, ValueError):
        return "out_val"
    if "out_val" in params:
        return "out_val"
    if "out" in params:
        return "out"
    return "out_val"


def call_flop_formula(formula: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], out: Any) -> int:
    """Call one of FlopCounterMode's registry formulas the way this torch expects."""
    keyword = _output_keyword(formula)
    kwargs = {k: v for k, v in kwargs.items() if k != keyword}
    return int(formula(*args, **kwargs, **{keyword: out}))


def out_of_memory_types() -> Tuple[type, ...]:
    # Only a torch that is already imported can have raised its OOM error; importing it here would
    # turn "torch is not installed" into a crash inside the error handler.
    torch = sys.modules.get("torch")
    found: List[type] = [MemoryError]
    if torch is None:
        return tuple(found)
    for owner, name in ((torch, "OutOfMemoryError"), (getattr(torch, "cuda", None), "OutOfMemoryError")):
        cls = getattr(owner, name, None) if owner is not None else None
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory", "failed to allocate")


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, out_of_memory_types()):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc).lower() for text in _OOM_TEXT)


def storage_key(tensor: Any) -> Tuple[str, int]:
    """(device, address) of a tensor's storage: two views of one buffer share it."""
    try:
        ptr = tensor.untyped_storage().data_ptr()
    except (AttributeError, RuntimeError, NotImplementedError):
        try:
            ptr = tensor.storage().data_ptr()
        except Exception:  # sparse, nested, or exotic subclass: no storage to share
            ptr = id(tensor)
    return str(tensor.device), int(ptr)


def overload_packet(func: Any) -> Any:
    packet = getattr(func, "overloadpacket", None)
    return packet if packet is not None else getattr(func, "_overloadpacket", func)


def dispatch_mode_base() -> type:
    """`TorchDispatchMode`, subclassed so that defining a mode does not import dynamo.

    torch >= 2.10 wraps every subclass's `__torch_dispatch__` in `torch._disable_dynamo`, which
    imports `torch._dynamo` on the first op (seconds). The wrapper only matters while dynamo is
    tracing; if dynamo was never imported nothing can be tracing, so the wrapper is skipped. If
    the user's code already imported dynamo (torch.compile), torch's default is kept.
    """
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    if "torch._dynamo" in sys.modules:
        return TorchDispatchMode

    class _NoDynamoDispatchMode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

    return _NoDynamoDispatchMode


def _matrix_vector_flops(matrix: Any) -> int:
    return 2 * int(matrix.shape[0]) * int(matrix.shape[1])


def _mv_flops(matrix: Any, vector: Any, **_: Any) -> int:
    return _matrix_vector_flops(matrix)


def _addmv_flops(bias: Any, matrix: Any, vector: Any, *_: Any, **__: Any) -> int:
    return _matrix_vector_flops(matrix)  # the bias add is lower order, as FlopCounterMode does for addmm


def _dot_flops(left: Any, right: Any, **_: Any) -> int:
    return 2 * int(left.shape[0])


def missing_flop_formulas() -> Dict[Any, Callable[..., int]]:
    """FLOP formulas FlopCounterMode lacks (torch 2.13: `mv`, `addmv`, `dot`, `vdot`, so `W @ x`
    with a 1-D `x` counted 0), 2 per multiply-add like its own, keyed like its registry.

    Kept beside its registry rather than registered into it (`register_flop_formula`): the
    profiler runs inside the user's interpreter and must not change what their own
    FlopCounterMode reports. An op a later torch counts itself keeps torch's formula."""
    import torch
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    ours = {aten.mv: _mv_flops, aten.addmv: _addmv_flops, aten.dot: _dot_flops, aten.vdot: _dot_flops}
    return {packet: formula for packet, formula in ours.items() if packet not in flop_registry}
