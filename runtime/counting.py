"""Per-op FLOPs, bytes, device, syncs and source line, from a TorchDispatchMode.

Used only in the attribution pass, never while timing: every op pays a Python round trip here.

Conventions (also in docs/profiling.md):
- FLOPs, 2 per multiply-add. Matmul-family ops (mm, bmm, addmm, baddbmm, convolutions, scaled
  dot-product and flex attention, `_scaled_mm`) use FlopCounterMode's own formula registry, so
  they match `torch.utils.flop_counter.FlopCounterMode` exactly; `mv`, `addmv`, `dot`, `vdot`,
  which it misses, use `compat.missing_flop_formulas`. FlopCounterMode counts nothing else; here pointwise ops count 1 FLOP per output element, reductions and normalizations
  (softmax, layer/batch/group norm) 1 FLOP per input element, and pure data movement (copies,
  clones, fills) 0. Without this, memory-bound code would show an intensity of 0.
- Bytes, an estimate: every distinct storage an op reads plus every distinct storage it writes,
  once each; a broadcast (stride-0) dimension counts once; pure views count 0; in-place ops read
  and write `self`; `out=` buffers and `copy_`/`fill_` destinations are written, not read. No
  cache reuse is modelled, fused kernels (torch.compile) are over-counted, GEMM tiling re-reads
  are not counted: only hardware counters (Nsight Compute `dram__bytes`) measure real traffic.
- Line: the innermost frame in the target's file on the Python stack when the op is
  dispatched. Backward ops that run on autograd's device threads have no user frames; they are
  charged to the line that called `.backward()`.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from perflsp.runtime import compat

RANGE_PREFIX = "perflsp@"

# Ops FlopCounterMode's registry does not know, with the convention above.
NORMALIZATION_OPS = {
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
    "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "native_group_norm", "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
}
# Tagged pointwise by torch but pure data movement: no arithmetic.
DATA_MOVEMENT_OPS = {
    "clone", "_to_copy", "copy_", "copy", "fill", "fill_", "zero_", "zeros_like", "ones_like",
    "full_like", "lift_fresh", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize", "alias_copy",
    "detach_copy", "view_copy", "expand_copy", "permute_copy", "t_copy", "contiguous",
}
# In-place ops that overwrite `self` without reading it.
WRITE_ONLY_SELF_OPS = {
    "copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
    "geometric_", "log_normal_", "cauchy_", "set_", "resize_", "resize_as_", "_copy_from",
}
# Factories that allocate without touching memory.
UNTOUCHED_FACTORY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
# Ops whose output size depends on data: the host must wait for the device to know it.
DATA_DEPENDENT_OPS = {
    "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim",
    "unique_dim_consecutive", "argwhere", "_assert_async",
}
# Metadata queries: no work, not worth a record.
SKIPPED_OPS = {
    "size", "sym_size", "stride", "sym_stride", "storage_offset", "sym_storage_offset", "numel",
    "sym_numel", "dim", "is_contiguous", "sym_is_contiguous", "is_strides_like_format",
    "is_non_overlapping_and_dense", "layout", "device", "_record_function_enter",
    "_record_function_enter_new", "_record_function_exit",
}


@dataclass
class OpRecord:
    index: int
    name: str  # "aten::mm"
    line: Optional[int]
    thread: int
    flops: int = 0
    flop_kind: Optional[str] = None  # matmul | pointwise | reduction | normalization
    bytes_read: int = 0
    bytes_written: int = 0
    device: str = "cpu"  # where the op ran (its outputs' device)
    dtype: Optional[str] = None
    sync_kind: Optional[str] = None  # item | device-to-host | data-dependent-shape | synchronize
    transfer: bool = False  # a copy between host and device
    host_us: float = 0.0  # the op's own host time, when timed directly (CPU attribution)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def range_name(self) -> str:
        return f"{RANGE_PREFIX}{self.line or 0}#{self.index}"


def parse_range_name(name: str) -> Optional[Tuple[int, int]]:
    """(line, op index) from `perflsp@<line>#<index>`, or None for other names."""
    if not name.startswith(RANGE_PREFIX):
        return None
    body = name[len(RANGE_PREFIX):]
    line, sep, index = body.partition("#")
    if not sep or not line.isdigit() or not index.isdigit():
        return None
    return int(line), int(index)


def touched_bytes(tensor: Any) -> int:
    """Bytes of the distinct elements a tensor addresses; stride-0 (broadcast) dims count once."""
    try:
        if tensor.numel() == 0:
            return 0
        elements = 1
        for size, stride in zip(tensor.shape, tensor.stride()):
            if stride != 0:
                elements *= size
        return elements * tensor.element_size()
    except (RuntimeError, NotImplementedError):  # sparse / nested layouts have no strides
        return tensor.numel() * tensor.element_size()


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _storage_bytes(tensors: List[Any]) -> int:
    """Sum over distinct storages of the largest span any of the tensors touches in it."""
    per_storage: Dict[Tuple[str, int], int] = {}
    for tensor in tensors:
        key = compat.storage_key(tensor)
        per_storage[key] = max(per_storage.get(key, 0), touched_bytes(tensor))
    return sum(per_storage.values())


def _bound_arguments(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Iterator[Tuple[Any, Any]]:
    """(schema argument, value) pairs for the values actually passed."""
    arguments = func._schema.arguments
    for schema_arg, value in zip(arguments, args):
        yield schema_arg, value
    for schema_arg in arguments[len(args):]:
        if schema_arg.name in kwargs:
            yield schema_arg, kwargs[schema_arg.name]


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


class TargetFrames:
    """Finds the innermost frame of the target's file on the current Python stack."""

    def __init__(self, target_file: str):
        self._target = os.path.realpath(target_file)
        self._verdicts: Dict[str, bool] = {}

    def is_target(self, filename: str) -> bool:
        verdict = self._verdicts.get(filename)
        if verdict is None:
            verdict = os.path.realpath(filename) == self._target
            self._verdicts[filename] = verdict
        return verdict

    def current_line(self, start_depth: int = 1) -> Optional[int]:
        try:
            frame = sys._getframe(start_depth)
        except ValueError:  # a C++ thread (autograd's device workers) with almost no Python stack
            return None
        while frame is not None:
            if self.is_target(frame.f_code.co_filename):
                return frame.f_lineno
            frame = frame.f_back
        return None


_MODE_CLASSES: Dict[type, type] = {}


def _counter_class() -> type:
    """The dispatch-mode class, built on first use (see compat.dispatch_mode_base for why)."""
    base = compat.dispatch_mode_base()
    if base not in _MODE_CLASSES:
        _MODE_CLASSES[base] = type("OpCounterMode", (base,), {"__torch_dispatch__": _torch_dispatch})
    return _MODE_CLASSES[base]


def _torch_dispatch(self, func, types, args=(), kwargs=None):
    return self.owner.dispatch(func, args, kwargs or {})


class OpCounter:
    """Counts and attributes every op dispatched while active (`with counter:`).

    With `ranges=True` each op runs inside `record_function("perflsp@<line>#<index>")`, placed
    around the op itself (after this class's own bookkeeping) so a profiler sees the op's real
    duration and the kernels it launched under a name that joins back to `records[index]`.
    With `time_ops=True` each op is timed with `perf_counter` instead (enough on a CPU, where
    the op's host time is its cost, and it spares parsing a trace of every op).
    """

    def __init__(self, target_file: str, ranges: bool = True, time_ops: bool = False):
        from torch.utils.flop_counter import flop_registry

        self.frames = TargetFrames(target_file)
        self.ranges = ranges
        self.time_ops = time_ops
        self.records: List[OpRecord] = []
        self.backward_line: Optional[int] = None
        self._flop_registry = {**flop_registry, **compat.missing_flop_formulas()}
        self._storages: Dict[Tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._mode = None
        self._patches: List[Tuple[Any, str, Any]] = []

    @property
    def working_set_bytes(self) -> int:
        """Distinct storage bytes the counted ops touched (a buffer freed and reallocated at the
        same address counts once): what must fit in a cache level for the call to run from it."""
        return sum(self._storages.values())

    # --- activation ---------------------------------------------------------------------------

    def __enter__(self) -> "OpCounter":
        self._install_patches()
        mode = _counter_class()()
        mode.owner = self
        self._mode = mode
        mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            self._mode = None
            self._remove_patches()

    def _install_patches(self) -> None:
        """Remember the line of `.backward()` calls and count explicit `torch.cuda.synchronize()`."""
        import torch

        counter = self

        def backward_wrapper(original):
            def wrapper(*args, **kwargs):
                counter.backward_line = counter.frames.current_line(2)
                try:
                    return original(*args, **kwargs)
                finally:
                    counter.backward_line = None
            return wrapper

        def synchronize_wrapper(original):
            def wrapper(*args, **kwargs):
                record = counter._new_record("cuda::synchronize", counter.frames.current_line(2))
                record.sync_kind, record.device = "synchronize", "cuda"
                return counter._run_in_range(record, original, args, kwargs)
            return wrapper

        self._patch(torch.Tensor, "backward", backward_wrapper)
        self._patch(torch.autograd, "backward", backward_wrapper)
        if torch.cuda.is_available():
            self._patch(torch.cuda, "synchronize", synchronize_wrapper)

    def _patch(self, owner: Any, name: str, make: Any) -> None:
        original = getattr(owner, name)
        self._patches.append((owner, name, original))
        setattr(owner, name, make(original))

    def _remove_patches(self) -> None:
        while self._patches:
            owner, name, original = self._patches.pop()
            setattr(owner, name, original)

    # --- per op -----------------------------------------------------------------------------

    def _new_record(self, name: str, line: Optional[int]) -> OpRecord:
        with self._lock:
            record = OpRecord(index=len(self.records), name=name, line=line, thread=threading.get_ident())
            self.records.append(record)
        return record

    def _run_in_range(self, record: OpRecord, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        if self.time_ops:
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                record.host_us = (time.perf_counter() - start) * 1e6
        if not self.ranges:
            return func(*args, **kwargs)
        from torch.autograd.profiler import record_function

        with record_function(record.range_name):
            return func(*args, **kwargs)

    def dispatch(self, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        packet = compat.overload_packet(func)
        short_name = getattr(packet, "__name__", str(packet)).split(".")[-1]
        if short_name in SKIPPED_OPS or getattr(func, "namespace", "aten") == "prim":
            return func(*args, **kwargs)
        line = self.frames.current_line(3)  # skip dispatch(), _torch_dispatch and torch's caller
        if line is None:
            line = self.backward_line
        record = self._new_record(f"{getattr(func, 'namespace', 'aten')}::{short_name}", line)
        out = self._run_in_range(record, func, args, kwargs)
        try:
            self._describe(record, func, packet, short_name, args, kwargs, out)
        except Exception as exc:  # an exotic op must never break the user's function
            record.flop_kind = None
            record.dtype = record.dtype or f"unknown ({type(exc).__name__})"
        return out

    def _remember_storages(self, tensors: List[Any]) -> None:
        for tensor in tensors:
            key = compat.storage_key(tensor)
            self._storages[key] = max(self._storages.get(key, 0), touched_bytes(tensor))

    def _describe(self, record: OpRecord, func: Any, packet: Any, short_name: str,
                  args: Tuple[Any, ...], kwargs: Dict[str, Any], out: Any) -> None:
        import torch

        outputs = list(_tensors(out))
        inputs = [t for _, value in _bound_arguments(func, args, kwargs) for t in _tensors(value)]
        main = outputs[0] if outputs else (inputs[0] if inputs else None)
        if main is not None:
            record.device = main.device.type
            record.dtype = str(main.dtype).replace("torch.", "")

        # FLOPs
        if packet in self._flop_registry:
            record.flops = compat.call_flop_formula(self._flop_registry[packet], args, kwargs, out)
            record.flop_kind = "matmul"
            if inputs:  # a matmul's dtype is its operands' (the output may be upcast)
                record.dtype = str(inputs[0].dtype).replace("torch.", "")
        elif short_name in NORMALIZATION_OPS and inputs:
            record.flops, record.flop_kind = inputs[0].numel(), "normalization"
        elif short_name not in DATA_MOVEMENT_OPS and not _is_view(func):
            tags = getattr(func, "tags", ())
            if torch.Tag.pointwise in tags and main is not None:
                record.flops, record.flop_kind = main.numel(), "pointwise"
            elif getattr(torch.Tag, "reduction", None) in tags and inputs:
                record.flops, record.flop_kind = inputs[0].numel(), "reduction"

        # Bytes
        if not _is_view(func):
            reads = []
            for schema_arg, value in _bound_arguments(func, args, kwargs):
                alias = schema_arg.alias_info
                written = alias is not None and alias.is_write
                if written and (schema_arg.kwarg_only or short_name in WRITE_ONLY_SELF_OPS):
                    continue  # an out= buffer or an overwritten destination: written, not read
                reads.extend(_tensors(value))
            record.bytes_read = _storage_bytes(reads)
            if short_name not in UNTOUCHED_FACTORY_OPS:
                record.bytes_written = _storage_bytes(outputs)
                self._remember_storages(reads + outputs)
            if short_name == "_local_scalar_dense" and inputs:
                record.bytes_read = inputs[0].element_size()

        # Syncs and transfers
        in_devices: Set[str] = {t.device.type for t in inputs if t.dim() > 0 or t.device.type != "cpu"}
        out_devices: Set[str] = {t.device.type for t in outputs}
        if short_name == "_local_scalar_dense":
            record.sync_kind = "item"
            record.device = inputs[0].device.type if inputs else record.device
        elif short_name in ("_to_copy", "copy_", "_copy_from") and in_devices and out_devices and in_devices != out_devices:
            record.transfer = True
            if "cpu" in out_devices and in_devices - {"cpu"}:
                record.sync_kind = "device-to-host"
                record.device = next(iter(in_devices - {"cpu"}))
        elif short_name in DATA_DEPENDENT_OPS or _is_data_dependent(short_name, func, args, kwargs):
            record.sync_kind = "data-dependent-shape"


def flops_uncounted(record: OpRecord) -> bool:
    """An op that does arithmetic no formula or convention here counts (sort, cumsum, gather, ...)."""
    short_name = record.name.split("::")[-1]
    return (record.flop_kind is None and record.bytes > 0 and not record.transfer and record.sync_kind is None
            and short_name not in DATA_MOVEMENT_OPS and short_name not in WRITE_ONLY_SELF_OPS)


def _is_data_dependent(short_name: str, func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """Boolean-mask indexing and `repeat_interleave` without `output_size` size their output
    from the data, which needs the device's values on the host."""
    import torch

    if short_name in ("index", "index_put", "index_put_"):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())
    if short_name == "repeat_interleave":
        return func._schema.overload_name in ("Tensor", "self_Tensor") and kwargs.get("output_size") is None
    return False
