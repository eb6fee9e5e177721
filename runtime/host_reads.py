"""Which tensors a program sends to its compute device, and where it reads them back on the host.

A `TorchFunctionMode` sees every torch call the program makes, above dispatch: there `.cpu()`,
`.item()` or `float(t)` are calls of their own even when every tensor lives on the CPU (below
dispatch a `.cpu()` of a CPU tensor is no op at all), so the record tells, on a machine without
an accelerator, which reads would wait for one.

Bound tensors. A tensor is bound for the compute device when it lives on an accelerator, or was
sent to the device the program computes on although that device is the CPU here: the result of
`.to(device)` or `.cuda()`, of a factory called with `device=`, and the parameters and buffers of
a module moved with `.to(device)`. A move whose line spells the CPU (`.to("cpu")`,
`torch.device("cpu")`) is a move to the host, not to the compute device. The mark travels: every
tensor a torch call returns is bound when one of its tensor arguments is; so a bound parameter's
gradient is, as reading `p.grad` is a torch call on the parameter (no hook per parameter runs in
the backward pass).

Reads. Per line of workspace code (the innermost frame of the user's own files that made the
call): host reads by kind (`HOST_READ_KINDS`) of bound tensors and of host tensors, host-to-device
copies, and for lines that hold a static candidate, what the tensors were (device, bound, dtype,
numel). On an accelerator a read's wall time is the stall it caused.
"""
from __future__ import annotations

import functools
import linecache
import re
import sys
import time
import weakref
from types import CodeType, FrameType
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

Line = Tuple[str, int]

_READS = {"item": "item", "tolist": "tolist", "numpy": "numpy", "cpu": "cpu", "__bool__": "bool",
          "__int__": "int", "__float__": "float", "__index__": "index", "__format__": "format",
          "__repr__": "format", "__str__": "format", "equal": "equal"}
# Calls whose result's size depends on the data: the host must learn it before anything continues.
_DATA_SHAPED = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere", "bincount"}
_MOVES = {"to", "cuda"}
_HOST_COPIES = {"tensor", "as_tensor"}  # factories that copy host data into a new tensor
_SEQUENCES = (list, tuple)
_SPELLS_CPU = re.compile(r"""(['"])cpu\1""")
_ASKS_TO_MOVE = re.compile(r"\.(to|cuda)\(|device")


class Tally:
    """Per line, named counters for the step under way, and totals over whole steps."""

    def __init__(self) -> None:
        self.step: Dict[Tuple[Line, str], float] = {}
        self.totals: Dict[Tuple[Line, str], float] = {}
        self.steps_seen: Dict[Tuple[Line, str], int] = {}

    def add(self, line: Line, counter: str, amount: float = 1) -> None:
        key = (line, counter)
        self.step[key] = self.step.get(key, 0) + amount

    def end_step(self) -> None:
        for key, amount in self.step.items():
            self.totals[key] = self.totals.get(key, 0) + amount
            self.steps_seen[key] = self.steps_seen.get(key, 0) + 1
        self.step = {}

    def forget_step(self) -> None:
        self.step = {}


class Bound:
    """The tensors bound for the compute device, by id (a tensor's own attributes would travel
    with it into checkpoints). A weak reference per id tells a live tensor from a freed one whose
    id was reused (cheaper than a callback per tensor); freed ones are swept whenever the table
    has doubled."""

    def __init__(self) -> None:
        self.refs: Dict[int, Any] = {}
        self.accelerated = torch.cuda.is_available()  # else every tensor is on the CPU: ids decide
        self.sweep_at = 4096

    def sweep(self) -> None:
        """Forget the freed tensors, in place (callers hold the table); whenever it has doubled."""
        for key in [key for key, ref in self.refs.items() if ref() is None]:
            del self.refs[key]
        self.sweep_at = max(4096, 2 * len(self.refs))

    def __contains__(self, tensor: Any) -> bool:
        ref = self.refs.get(id(tensor))
        return (ref is not None and ref() is tensor) or (self.accelerated and not tensor.is_cpu)

    def add(self, tensor: Any) -> None:
        ref = self.refs.get(id(tensor))
        if ref is not None and ref() is tensor or self.accelerated and not tensor.is_cpu:
            return
        self.refs[id(tensor)] = weakref.ref(tensor)
        if len(self.refs) > self.sweep_at:
            self.sweep()


class HostReadMode(TorchFunctionMode):
    """See the module docstring. `armed`: the program is inside the recorded steps. `lines`:
    the line recorder's counts, whose `active` is the candidate line running now (None when
    none is): what a torch call made from there ran on is that line's operands."""

    def __init__(self, relative_path: Callable[[str], Optional[str]], candidates: Iterable[Line],
                 lines: Any = None):
        super().__init__()
        self.relative_path = relative_path
        self.candidates: FrozenSet[Line] = frozenset(candidates)
        self.lines = lines
        self.bound = Bound()
        self.tally = Tally()
        self.operands: Dict[Line, Dict[Tuple[str, bool, str], int]] = {}
        self.armed = False
        self.reading = False  # inside a read this mode counts: a sync warning from it is counted already
        self._where: Dict[CodeType, Optional[str]] = {}
        self._says: Dict[Line, Tuple[bool, bool]] = {}
        self._kinds: Dict[Any, str] = {}  # torch function -> its kind of call (`_kind_of`)

    # --- attribution ---------------------------------------------------------------------------

    def where(self, frame: Optional[FrameType]) -> Optional[Line]:
        """The innermost frame of workspace code, as (file, line); None when there is none."""
        found = self._frame_of_workspace(frame)
        return (self._where[found.f_code], found.f_lineno) if found is not None else None  # type: ignore[return-value]

    def _frame_of_workspace(self, frame: Optional[FrameType]) -> Optional[FrameType]:
        cache, relative = self._where, self.relative_path
        while frame is not None:
            code = frame.f_code
            try:
                path = cache[code]
            except KeyError:
                path = cache[code] = relative(code.co_filename)
            if path is not None:
                return frame
            frame = frame.f_back
        return None

    def _line_says(self, frame: FrameType) -> Tuple[bool, bool]:
        """Whether the workspace line that made a move names the CPU (`.to("cpu")`: a move to the
        host), and whether it asks for a move at all (`.to(`, `.cuda(`, `device`)."""
        found = self._frame_of_workspace(frame)
        if found is None:
            return False, False
        line = (self._where[found.f_code], found.f_lineno)  # type: ignore[assignment]
        says = self._says.get(line)  # type: ignore[arg-type]
        if says is None:
            text = linecache.getline(found.f_code.co_filename, found.f_lineno)
            says = self._says[line] = (bool(_SPELLS_CPU.search(text)), bool(_ASKS_TO_MOVE.search(text)))  # type: ignore[index]
        return says

    # --- the mode --------------------------------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        # Every torch call of the program comes through here: the common case stays short.
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _kind_of(func)
        if kind or kwargs and "device" in kwargs:
            return self._special(func, kind, args, kwargs or {})
        out = func(*args, **kwargs) if kwargs else func(*args)
        bound = self.bound
        refs = bound.refs
        if refs or bound.accelerated:
            # Inlined, not `arg in bound` / `bound.add(out)`: on Python 3.11 the line recorder's
            # trace function runs at every Python call, and this runs at every torch call.
            hit = False
            for arg in args:
                if isinstance(arg, torch.Tensor):
                    ref = refs.get(id(arg))
                    if ref is not None and ref() is arg or bound.accelerated and not arg.is_cpu:
                        hit = True
                        break
                elif type(arg) in _SEQUENCES and _any_bound(arg, bound):
                    hit = True
                    break
            if not hit and kwargs:
                hit = _any_bound(kwargs.values(), bound)
            if hit:
                if isinstance(out, torch.Tensor) and out.is_cpu:
                    ref = refs.get(id(out))
                    if ref is None or ref() is not out:
                        refs[id(out)] = weakref.ref(out)
                        if len(refs) > bound.sweep_at:
                            bound.sweep()
                else:
                    _tag(out, bound)
        if self.armed:
            active = self.lines.active if self.lines is not None else None
            if active is not None:
                self._operand_of(active, args, out)
        return out

    def _special(self, func: Any, kind: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        name = func.__name__
        if kind == "read":
            return self._read(func, _READS[name], args, kwargs)
        if kind == "shape" or (name == "__getitem__" and _bool_index(args)) or (
                name == "repeat_interleave" and "output_size" not in kwargs) or (name == "where" and len(args) == 1):
            return self._read(func, "data-dependent-shape", args, kwargs)
        if kind == "move" or "device" in kwargs:
            return self._move(func, name, args, kwargs)
        out = func(*args, **kwargs)
        if _any_bound(args, self.bound) or _any_bound(kwargs.values(), self.bound):
            _tag(out, self.bound)
        if self.armed and self.lines is not None and self.lines.active is not None:
            self._operand_of(self.lines.active, args, out)
        return out

    def _read(self, func: Any, kind: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        tensor = _first_tensor(args)
        on_device = tensor is not None and tensor in self.bound
        if not self.armed:
            out = func(*args, **kwargs)
        else:
            self.reading = True
            started = time.perf_counter()
            try:
                out = func(*args, **kwargs)
            finally:
                self.reading = False
            line = self.where(sys._getframe(1))
            if line is not None and tensor is not None:
                if on_device:
                    self.tally.add(line, "read:" + kind)
                    if not tensor.is_cpu:  # a real accelerator: the call waited for it
                        self.tally.add(line, "stall_us", (time.perf_counter() - started) * 1e6)
                else:
                    self.tally.add(line, "host-read")
                self._operand(line, tensor)
        if on_device and kind == "data-dependent-shape":
            _tag(out, self.bound)
        return out

    def _move(self, func: Any, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        source = args[0] if name in _MOVES and args and isinstance(args[0], torch.Tensor) else None
        frame = sys._getframe(1)
        to_device = True if name == "cuda" else self._to_compute_device(name, args, kwargs, frame)
        source_bound = source is not None and source in self.bound
        active = self.lines.active if self.armed and self.lines is not None else None
        if active is not None and source is not None and not (to_device is False and source_bound):
            # Before the result is marked: a move within the CPU returns its source itself.
            self._operand_of(active, args, out)
        if to_device is None:  # `.to(dtype)`: the data stays where it is
            if source_bound:
                _tag(out, self.bound)
        elif to_device:
            _tag(out, self.bound)
            from_host = not source_bound if source is not None else name in _HOST_COPIES
            line = self.where(frame) if from_host and self.armed else None
            if line is not None:
                self.tally.add(line, "h2d")
        elif source_bound and self.armed:
            line = self.where(frame)
            if line is not None:
                self.tally.add(line, "read:to-host")
                self._operand(line, source)
        if active is not None and source is None:  # a factory: what it made, once marked
            self._operand_of(active, args, out)
        return out

    def _to_compute_device(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                           frame: FrameType) -> Optional[bool]:
        """True: the call sends its result to the compute device; False: to the host; None: it
        names no device."""
        if name == "to":
            other = next((a for a in list(args[1:]) + list(kwargs.values()) if isinstance(a, torch.Tensor)), None)
            if other is not None:
                return other in self.bound
            try:
                device = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            except (TypeError, RuntimeError):
                return None
        else:
            device = kwargs.get("device")
        if device is None:
            return None
        if torch.device(device).type != "cpu":
            return True
        spells_cpu, moves = self._line_says(frame)
        if not self._called_by_workspace(frame) and not moves:
            # A library's own move or `device=` (torch rebuilding a DataLoader worker's batch with
            # `empty(..., device=storage.device)`) is not the program choosing its device, unless
            # the program's line asks for one (`model.to(device)`, `batch.to(device)`).
            return None
        return not spells_cpu

    def _called_by_workspace(self, frame: Optional[FrameType]) -> bool:
        """The torch call came straight from workspace code (this module's frames aside)."""
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        return frame is not None and self._frame_of_workspace(frame) is frame

    def _operand_of(self, line: Line, args: Tuple[Any, ...], out: Any) -> None:
        """On a candidate line: the call's first tensor argument, else the tensor it made."""
        tensor = _first_tensor(args)
        if tensor is None:
            tensor = out if isinstance(out, torch.Tensor) else None
        if tensor is not None:
            self.tally.add(line, "tensor-op")
            self._operand(line, tensor)

    def _operand(self, line: Line, tensor: Any) -> None:
        key = (str(tensor.device), tensor in self.bound, str(tensor.dtype).replace("torch.", ""))
        seen = self.operands.setdefault(line, {})
        seen[key] = max(seen.get(key, 0), tensor.numel())

    def end_step(self) -> None:
        self.tally.end_step()


class QuietOptimizer:
    """No torch-function handling inside `Optimizer.step()` and the `zero_grad()` of optimizers
    and modules: most of the torch calls of a small step are theirs (a `p.grad` read and write per
    parameter, the update), yet none of them is the user's line and none reads on the host. The
    parameters it updates in place stay marked; syncs inside it still reach `cuda_syncs`. The
    post-hook must run before any hook that may stop the program: `install` registers both
    before the step counter's."""

    def __init__(self) -> None:
        self._off: Any = None
        self._handles: List[Any] = []
        self._replaced: List[Tuple[type, Any]] = []

    def install(self) -> "QuietOptimizer":
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles = [register_optimizer_step_pre_hook(self._before),
                         register_optimizer_step_post_hook(self._after)]
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            self._replaced.append((owner, owner.__dict__["zero_grad"]))
            owner.zero_grad = _quiet(owner.__dict__["zero_grad"])  # type: ignore[method-assign]
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        for owner, original in self._replaced:
            owner.zero_grad = original  # type: ignore[method-assign]
        self._replaced = []
        self._after()

    def _before(self, *hook_args: Any) -> None:
        if self._off is None:
            self._off = torch._C.DisableTorchFunction()
            self._off.__enter__()

    def _after(self, *hook_args: Any) -> None:
        if self._off is not None:
            self._off.__exit__(None, None, None)
            self._off = None


def _quiet(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def quiet(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return method(*args, **kwargs)
    return quiet


def _kind_of(func: Any) -> str:
    """"read", "shape" (a data-dependent size: a read), "maybe-shape" (one for some arguments),
    "move", or "" for the calls that only compute."""
    name = getattr(func, "__name__", "")
    if name in _READS:
        return "read"
    if name in _DATA_SHAPED:
        return "shape"
    if name in ("__getitem__", "repeat_interleave", "where"):
        return "maybe-shape"
    return "move" if name in _MOVES or name in _HOST_COPIES else ""


def _first_tensor(args: Tuple[Any, ...]) -> Any:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg
        if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], torch.Tensor):
            return arg[0]
    return None


def _any_bound(values: Iterable[Any], bound: Bound) -> bool:
    for value in values:
        if isinstance(value, torch.Tensor):
            if value in bound:
                return True
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor) and item in bound:
                    return True
    return False


def _tag(out: Any, bound: Bound) -> None:
    if isinstance(out, torch.Tensor):
        bound.add(out)
    elif isinstance(out, (list, tuple)):
        for item in out:
            if isinstance(item, torch.Tensor):
                bound.add(item)


def _bool_index(args: Tuple[Any, ...]) -> bool:
    if len(args) < 2:
        return False
    index = args[1]
    items: List[Any] = list(index) if isinstance(index, tuple) else [index]
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items)
