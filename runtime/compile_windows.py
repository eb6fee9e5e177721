"""What the `--compile` medians were timed in, and whether they can stand beside the eager profile.

The speedup is only as good as the two windows it divides: the compiled and the eager call are
timed in the same process, after compilation, with the same warm-up policy, clock and inputs
(the same `--cold-cache` copies), in alternating rounds. The block's `windows` records each
side's warm-up and timed calls and how many times dynamo compiled during the timed calls, so a
reader can check that. The eager profile was timed earlier in another process: when its figures
and the eager call timed beside the compiled one disagree, a note says so rather than leaving
three medians that do not add up.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from perflsp import units
from perflsp.runtime.timing import percentile


def side(warmup_s: Sequence[float], samples_s: Sequence[float]) -> Dict[str, Any]:
    """One side's window: warm-up calls (not reported), timed calls and their spread."""
    ordered = sorted(samples_s)
    return {"warmup_calls": len(warmup_s), "calls": len(ordered), "median_us": percentile(ordered, 0.5) * 1e6,
            "p10_us": percentile(ordered, 0.1) * 1e6, "p90_us": percentile(ordered, 0.9) * 1e6}


def notes(windows: Mapping[str, Any]) -> List[str]:
    """What the block's windows say about its own speedup."""
    compiled_again = windows.get("compiles_during_timing")
    if not compiled_again:
        return []
    return [f"dynamo compiled {compiled_again} more time(s) during the timed calls (a recompilation: see "
            "`recompiles`): those calls include compile time, so the compiled median is pessimistic"]


def disagreement_note(profile_timing: Optional[Mapping[str, Any]], block: Mapping[str, Any],
                      profile_load: Optional[float] = None) -> Optional[str]:
    """A note when the eager profile's calls and the eager calls timed beside the compiled ones
    do not overlap (p10-p90 ranges apart): the machine's load changed between the two processes."""
    eager = (block.get("windows") or {}).get("eager")
    if not profile_timing or not eager:
        return None
    if eager["p10_us"] <= profile_timing["p90_us"] and profile_timing["p10_us"] <= eager["p90_us"]:
        return None
    ratio = eager["median_us"] / profile_timing["median_us"]
    loads = [load for load in (profile_load, block["windows"].get("load_average_1m")) if load is not None]
    load_text = f" (load average {' then '.join(f'{x:.2f}' for x in loads)})" if len(loads) == 2 else ""
    return (f"the eager calls timed beside the compiled ones ({units.duration_us(eager['median_us'])} median) are "
            f"{ratio:.2g}× the profile's ({units.duration_us(profile_timing['median_us'])}), measured earlier in another process: "
            f"the machine's load changed in between{load_text}. The speedup divides only the two medians timed "
            "together, in alternating rounds; compare absolute times on a quieter machine")
