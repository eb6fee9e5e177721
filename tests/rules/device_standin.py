"""CUDA code run on the CPU, with its device placement checked: what lets the rule pages' examples
run in tests on any machine and still fail where they would mix host and device tensors on a GPU.

Inside `StandIn`, a tensor made on CUDA (`device="cuda"`, `device=device` with the examples'
`device = torch.device("cuda")`) or moved there (`.cuda()`, `.to(device)`, a module's `.to`)
is made on the CPU and remembered as on the device, and so is whatever is computed from it; such a
tensor says `device(type='cuda')` and `is_cuda`. An operation that mixes device and host tensors
raises as CUDA would: a host tensor with no dimensions is fine as an input (CUDA kernels take it
as a scalar), but not as the tensor an in-place operation writes to. `.numpy()` of a device tensor
raises too. (`torch.cuda.synchronize()` is not a tensor operation: the examples' test runs it as
`torch.cpu.synchronize()`, there being no queue to wait for.)
"""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

DEVICE = torch.device("cuda")
_HOST = torch.device("cpu")
_TENSOR = torch._C.TensorBase
# Operations that take tensors on different devices on a real GPU too, and the check `Module.to`
# makes of a parameter against its moved copy.
_MIXING = {_TENSOR.copy_, _TENSOR.__getitem__, _TENSOR.__setitem__, torch._has_compatible_shallow_copy_type}


class DeviceMismatch(RuntimeError):
    pass


def _is_device(value: Any) -> bool:
    try:
        return isinstance(value, (str, torch.device)) and torch.device(value).type == "cuda"
    except RuntimeError:  # a string that names no device
        return False


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _accessor(func: Callable[..., Any]) -> Optional[Tuple[str, str]]:
    """("device", "__get__") for reading `t.device`, ("data", "__set__") for `t.data = ...`."""
    owner = getattr(func, "__self__", None)
    return (owner.__name__, func.__name__) if isinstance(owner, types.GetSetDescriptorType) else None


def _name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


class StandIn(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        # id -> the tensor, kept alive for the mode's life so that no other tensor gets its id.
        self.on_device: Dict[int, torch.Tensor] = {}

    def placed(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self.on_device

    def _place(self, value: Any, on_device: bool) -> Any:
        for tensor in _tensors(value):
            if on_device:
                self.on_device[id(tensor)] = tensor
            else:
                self.on_device.pop(id(tensor), None)
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        accessor = _accessor(func)
        if accessor == ("device", "__get__"):
            return DEVICE if self.placed(args[0]) else func(*args)
        if accessor == ("is_cuda", "__get__"):
            return self.placed(args[0])
        if accessor == ("grad", "__get__"):
            return self._place(func(*args), self.placed(args[0]))
        if accessor == ("data", "__set__"):
            func(*args)
            self._place(args[0], self.placed(args[1]))
            return None
        moved = self._move(func, args, kwargs)
        if moved is not None:
            return moved
        wanted = kwargs.get("device")
        if wanted is not None and _is_device(wanted):
            kwargs["device"] = _HOST
            return self._place(func(*args, **kwargs), True)
        inputs = [*_tensors(args), *_tensors(kwargs)]
        on_device = any(self.placed(t) for t in inputs)
        if on_device and func not in _MIXING:
            self._check_mixing(func, args, kwargs, inputs)
        return self._place(func(*args, **kwargs), on_device)

    def _move(self, func, args, kwargs) -> Optional[Any]:
        """`.cuda()`, `.cpu()`, `.to(...)` and `.numpy()` of a tensor; None for anything else."""
        if func is _TENSOR.cuda:
            return args[0] if self.placed(args[0]) else self._place(args[0].clone(), True)
        if func is _TENSOR.cpu:
            return args[0].clone() if self.placed(args[0]) else args[0]
        if func is _TENSOR.numpy and self.placed(args[0]):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        if func is not _TENSOR.to:
            return None
        source, rest = args[0], args[1:]
        if rest and isinstance(rest[0], torch.Tensor):  # `.to(other)`: other's device and dtype
            to_device = self.placed(rest[0])
            rest = (rest[0].dtype, *rest[1:])
        else:
            device = torch._C._nn._parse_to(*rest, **kwargs)[0]
            to_device = None if device is None else _is_device(device)
            rest = tuple(_HOST if _is_device(a) else a for a in rest)
            if _is_device(kwargs.get("device")):
                kwargs["device"] = _HOST
        result = func(source, *rest, **kwargs)
        if to_device is None:
            return self._place(result, self.placed(source))
        if result is source and to_device != self.placed(source):
            result = source.clone()
        return self._place(result, to_device)

    def _check_mixing(self, func, args, kwargs, inputs) -> None:
        name = _name(func)
        short = name.rpartition(".")[2]
        in_place = (short.endswith("_") and not short.startswith("__")) or short.startswith("__i")
        target = args[0] if in_place and args and isinstance(args[0], torch.Tensor) else kwargs.get("out")
        for tensor in inputs:
            if self.placed(tensor):
                continue
            if tensor.dim() > 0 or tensor is target:
                where = "written in place" if tensor is target else f"of shape {tuple(tensor.shape)}"
                raise DeviceMismatch(f"{name}: a host tensor ({where}) meets tensors on {DEVICE}: "
                                     "expected all tensors to be on the same device")
