"""Human-readable numbers shared by the runtime and the editor: decimal SI prefixes (as datasheets
use), µs-based times. Standard library only."""
from __future__ import annotations

from typing import Optional

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: Optional[float], unit: str, digits: int = 3) -> str:
    if value is None:
        return "-"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def flops(value: Optional[float]) -> str:
    return si(value, "FLOP")


def flop_rate(value: Optional[float]) -> str:
    return si(value, "FLOP/s")


def byte_count(value: Optional[float]) -> str:
    return si(value, "B")


def byte_rate(value: Optional[float]) -> str:
    return si(value, "B/s")


def duration_us(value_us: Optional[float]) -> str:
    if value_us is None:
        return "-"
    if value_us >= 1e6:
        return f"{value_us / 1e6:.3g} s"
    if value_us >= 1e3:
        return f"{value_us / 1e3:.3g} ms"
    if value_us >= 1:
        return f"{value_us:.3g} µs"
    return f"{value_us * 1e3:.3g} ns"


def percent(fraction: Optional[float]) -> str:
    if fraction is None:
        return "-"
    return f"{fraction * 100:.0f}%" if fraction >= 0.01 or fraction == 0 else f"{fraction * 100:.1g}%"


def spread(line: dict) -> str:
    """`±12%`: half the range of a result line's profiled calls, of its median ('' for one call)."""
    if (line.get("calls") or 1) < 2 or not line.get("time_us"):
        return ""
    return f"±{(line['time_max_us'] - line['time_min_us']) / 2 / line['time_us'] * 100:.0f}%"


def intensity(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} FLOP/B"
