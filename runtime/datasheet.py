"""Datasheet ceilings of known GPUs, printed beside the measured ones.

Dense figures (NVIDIA quotes tensor-core rates with 2:4 sparsity in many tables: those are
halved here), decimal units: FLOP/s and bytes/s. Matched by a substring of the device name plus
the compute capability, never by the exact name: names differ between drivers and form factors
(`NVIDIA H100 80GB HBM3`, `H100 SXM5`, ...). torch's own `device_info` table is not used: it
keys on exact names and has wrong entries (sparsity divisor on FP32, L4 bandwidth).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

T = 1e12


@dataclass(frozen=True)
class Datasheet:
    name: str
    match: Tuple[str, ...]  # all must appear in the device name (case-insensitive)
    exclude: Tuple[str, ...]  # none may appear
    compute_capability: str
    bandwidth_bytes_per_s: float
    compute_flops_per_s: Dict[str, float]


# More specific entries first: the first match wins.
DATASHEETS = (
    Datasheet("H100 PCIe", ("h100", "pcie"), (), "9.0", 2.0 * T,
              {"float32": 51 * T, "tf32": 378 * T, "bfloat16": 756 * T, "float16": 756 * T, "float8": 1513 * T}),
    Datasheet("H100 SXM", ("h100",), ("pcie", "nvl"), "9.0", 3.35 * T,
              {"float32": 67 * T, "tf32": 494.7 * T, "bfloat16": 989.4 * T, "float16": 989.4 * T, "float8": 1979 * T}),
    Datasheet("H200 SXM", ("h200",), ("nvl",), "9.0", 4.8 * T,
              {"float32": 67 * T, "tf32": 494.7 * T, "bfloat16": 989.4 * T, "float16": 989.4 * T, "float8": 1979 * T}),
    Datasheet("A100 SXM 80GB", ("a100", "80gb"), ("pcie",), "8.0", 2.039 * T,
              {"float32": 19.5 * T, "tf32": 156 * T, "bfloat16": 312 * T, "float16": 312 * T}),
    Datasheet("A100 PCIe 80GB", ("a100", "80gb", "pcie"), (), "8.0", 1.935 * T,
              {"float32": 19.5 * T, "tf32": 156 * T, "bfloat16": 312 * T, "float16": 312 * T}),
    Datasheet("A100 40GB", ("a100",), ("80gb",), "8.0", 1.555 * T,
              {"float32": 19.5 * T, "tf32": 156 * T, "bfloat16": 312 * T, "float16": 312 * T}),
    Datasheet("L40S", ("l40s",), (), "8.9", 0.864 * T,
              {"float32": 91.6 * T, "tf32": 183 * T, "bfloat16": 362 * T, "float16": 362 * T, "float8": 733 * T}),
    Datasheet("L4", ("l4",), ("l40",), "8.9", 0.300 * T,
              {"float32": 30.3 * T, "tf32": 60 * T, "bfloat16": 121 * T, "float16": 121 * T, "float8": 242.5 * T}),
    Datasheet("RTX 4090", ("4090",), (), "8.9", 1.008 * T,
              {"float32": 82.6 * T, "tf32": 82.6 * T, "bfloat16": 165.2 * T, "float16": 165.2 * T, "float8": 330.3 * T}),
)


def lookup(device_name: str, compute_capability: Optional[str]) -> Optional[Datasheet]:
    """The datasheet for a device, or None. A name match with a different compute capability
    (a renamed or different part) is rejected rather than guessed."""
    lowered = device_name.lower()
    for sheet in DATASHEETS:
        if all(m in lowered for m in sheet.match) and not any(x in lowered for x in sheet.exclude):
            if compute_capability is None or compute_capability == sheet.compute_capability:
                return sheet
            return None
    return None


def as_dict(sheet: Datasheet) -> Dict[str, object]:
    return {
        "name": sheet.name,
        "bandwidth_bytes_per_s": sheet.bandwidth_bytes_per_s,
        "compute_flops_per_s": dict(sheet.compute_flops_per_s),
    }
