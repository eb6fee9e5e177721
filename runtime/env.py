"""What we ran on: the device and the software around it (recorded in every result)."""
from __future__ import annotations

import os
import platform
import sys
from typing import Any, Dict, Optional, Tuple

RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def library_dirs() -> Tuple[str, ...]:
    """Where the standard library and installed packages (torch among them) live: not user code."""
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key))


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def physical_memory_bytes() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def last_level_cache_bytes() -> Optional[int]:
    """Size of the largest CPU cache Linux reports (sysfs), or None elsewhere."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "size"), encoding="utf-8") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
        digits = text[:-1] if text[-1:].isalpha() else text
        if digits.isdigit():
            size = int(digits) * scale
            best = size if best is None or size > best else best
    return best


def choose_device(requested: str) -> str:
    """'cuda' or 'cpu' for --device auto|cpu|cuda. Asking for CUDA without one, or profiling in
    an interpreter without torch, is a usage error that names the interpreter."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(f"torch cannot be imported in {sys.executable} ({exc}); install it there "
                           f"(`{sys.executable} -m pip install torch`) or profile with the interpreter "
                           "of your training environment") from None

    if requested == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device "
                           f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})")
    return "cuda" if available else "cpu"


def describe_device(device: str) -> Dict[str, Any]:
    import torch

    cuda_available = bool(torch.cuda.is_available())
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        return {
            "kind": "cuda",
            "name": props.name,
            "index": index,
            "compute_capability": f"{props.major}.{props.minor}",
            "total_memory_bytes": int(props.total_memory),
            "threads": None,
            "cuda_available": cuda_available,
        }
    return {
        "kind": "cpu",
        "name": cpu_model() or "unknown CPU",
        "index": None,
        "compute_capability": None,
        "total_memory_bytes": physical_memory_bytes(),
        "threads": int(torch.get_num_threads()),
        "cuda_available": cuda_available,
    }


def driver_version() -> Optional[str]:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            first = handle.readline()
    except OSError:
        return None
    for token in first.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit():
            return token
    return None


def environment() -> Dict[str, Any]:
    import torch

    try:
        import numpy

        numpy_version: Optional[str] = numpy.__version__
    except ImportError:
        numpy_version = None
    cudnn = None
    if torch.backends.cudnn.is_available():
        cudnn = str(torch.backends.cudnn.version())
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "driver": driver_version(),
        "numpy": numpy_version,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": load_average_1m(),  # how busy the machine was (this process included)
    }


def load_average_1m() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        return None
