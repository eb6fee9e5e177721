"""A profile result against the previous one for the same function: the re-measure loop.

`compare(result, previous)` builds the result's `comparison` block; `describe` and `short` turn
it into the sentence the CLI prints and the hover shows ("0.41 ms → 0.12 ms since 11:02: 3.42×
faster (95% interval 3.3–3.5×); memory-bound → compute-bound") and the code lens's few words.
Standard library only: the runtime writes the block, the language server only reads it.

What `speedup` holds: the previous median over this median, but only when the two runs timed
the same work on the same machine. When the inputs or the device changed (or the previous result
does not say what they were) the time moved for a reason that is not the code, so `speedup` is
null and the sentence says why: a smaller input is not a speedup. A change of code or of the
ceilings keeps the speedup (the clock does not depend on the ceilings; a code change is the point
of the loop). `significant` says whether the change is more than the runs' noise: with per-call
samples in both results, whether the 95% bootstrap interval of the ratio of medians leaves out 1
(`speedup_interval`, see significance.py); for an older result without them, whether the two
runs' p10-p90 ranges are apart. The sentence gives the ratio and the interval ("2.18× faster
(95% interval 1.9–2.4×)"), or says the runs are too noisy to tell.
"""
from __future__ import annotations

import datetime
from typing import Any, Dict, List, Mapping, Optional

from perflsp import significance, units

DEVICE_KEYS = ("kind", "name", "compute_capability", "threads")


def _get(data: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _changed(now: Any, before: Any) -> Optional[bool]:
    """None when either side was not recorded: unknown is not the same as unchanged."""
    if now is None or before is None:
        return None
    return now != before


def _device_identity(result: Mapping[str, Any]) -> Optional[tuple]:
    device = result.get("device")
    if not isinstance(device, Mapping) or not device.get("kind"):
        return None
    return tuple(device.get(key) for key in DEVICE_KEYS)


def _inputs(result: Mapping[str, Any]) -> Optional[tuple]:
    """What the calls were given: the arguments, and warm or cold cache (`--cold-cache`; results
    from before the option were warm)."""
    arguments = _get(result, "settings", "arguments")
    if not isinstance(arguments, list):
        return None
    return tuple(arguments), _get(result, "settings", "cache") or "warm"


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def compare(result: Mapping[str, Any], previous: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The `comparison` block of `result` against `previous` (None when there is no usable
    previous result: none, or it failed). Fields the previous result lacks (it was written by an
    older perflsp, or by hand) come out as null with a note naming them, never as an error."""
    if result.get("status") != "ok" or not isinstance(previous, Mapping) or previous.get("status") != "ok":
        return None
    notes: List[str] = []
    before_median = _number(_get(previous, "timing", "median_us"))
    now_median = _number(_get(result, "timing", "median_us"))
    block: Dict[str, Any] = {
        "previous_created_at": str(previous.get("created_at") or "?"),
        "previous_median_us": before_median,
        "speedup": None,
        "significant": None,
        "speedup_interval": None,
        "significance_test": None,
        "previous_regime": _get(previous, "verdict", "regime"),
        "source_changed": _changed(_get(result, "target", "source_sha256"), _get(previous, "target", "source_sha256")),
        "ceilings_changed": _changed(_get(result, "ceilings", "id"), _get(previous, "ceilings", "id")),
        "inputs_changed": _changed(_inputs(result), _inputs(previous)),
        "device_changed": _changed(_device_identity(result), _device_identity(previous)),
        "notes": notes,
    }
    missing = [name for name, value in (("timing.median_us", before_median),
                                        ("verdict.regime", block["previous_regime"]),
                                        ("target.source_sha256", _get(previous, "target", "source_sha256")),
                                        ("ceilings.id", _get(previous, "ceilings", "id")),
                                        ("settings.arguments", _get(previous, "settings", "arguments")),
                                        ("device", _device_identity(previous)))
               if value is None]
    if missing:
        notes.append(f"the previous result (schema_version {previous.get('schema_version', '?')}) does not record "
                     f"{', '.join(missing)}: what depends on them is unknown")
    if block["inputs_changed"]:
        notes.append(f"the inputs changed ({_arguments_text(previous)} → {_arguments_text(result)}): the time moved "
                     "with them, not with the code, so it is no speedup")
    if block["device_changed"]:
        notes.append("measured on another device (or thread count): the times are not comparable")
    comparable = block["inputs_changed"] is False and block["device_changed"] is False
    if comparable and before_median and now_median:
        block["speedup"] = before_median / now_median
        interval = significance.median_ratio_interval(_samples(previous), _samples(result))
        if interval is not None:
            block["speedup_interval"] = list(interval)
            block["significant"] = not interval[0] <= 1.0 <= interval[1]
            block["significance_test"] = "bootstrap"
        else:
            block["significant"] = _apart(result, previous)
            block["significance_test"] = None if block["significant"] is None else "p10-p90"
    return block


def _samples(result: Mapping[str, Any]) -> List[float]:
    samples = _get(result, "timing", "samples_us")
    return [float(t) for t in samples if _number(t)] if isinstance(samples, list) else []


def _apart(result: Mapping[str, Any], previous: Mapping[str, Any]) -> Optional[bool]:
    """Whether the two runs' p10-p90 ranges do not overlap."""
    lo_now, hi_now = _get(result, "timing", "p10_us"), _get(result, "timing", "p90_us")
    lo_before, hi_before = _get(previous, "timing", "p10_us"), _get(previous, "timing", "p90_us")
    if None in (lo_now, hi_now, lo_before, hi_before):
        return None
    return hi_now < lo_before or lo_now > hi_before


def _arguments_text(result: Mapping[str, Any]) -> str:
    arguments, cache = _inputs(result) or ((), "warm")
    return (", ".join(arguments) if arguments else "no arguments") + (", cold cache" if cache == "cold" else "")


def since(created_at: str, now: Optional[datetime.datetime] = None) -> str:
    """`11:02` for earlier today (local time), else `2026-11-30 11:02`; the text itself if it is
    not a time."""
    try:
        when = datetime.datetime.fromisoformat(created_at).astimezone()
    except (TypeError, ValueError):
        return created_at
    today = (now or datetime.datetime.now().astimezone()).date()
    return when.strftime("%H:%M") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")


def _factor(ratio: float, digits: int) -> str:
    return f"{ratio:.{digits}g}" if ratio < 10 ** digits else f"{ratio:.0f}"


def _headline(speedup: float) -> str:
    """`2.18× faster`, `1.5× slower`."""
    return f"{_factor(speedup, 3)}× faster" if speedup >= 1 else f"{_factor(1 / speedup, 3)}× slower"


def _change(block: Mapping[str, Any]) -> str:
    """`2.18× faster (95% interval 1.9–2.4×)`, `2.18× faster, but the runs are too noisy to tell
    (95% interval 0.8–3.1×)`, `1.5× slower`, or '' (no speedup)."""
    speedup = block.get("speedup")
    if not speedup:
        return ""
    faster = speedup >= 1
    text = _headline(speedup)
    interval = block.get("speedup_interval")
    if interval:
        low, high = interval if faster else (1 / interval[1], 1 / interval[0])
        why = f"95% interval {_factor(low, 2)}–{_factor(high, 2)}×"
    else:
        why = "their p10–p90 ranges overlap"
    if block.get("significant") is False:
        return f"{text}, but the runs are too noisy to tell ({why})"
    return f"{text} ({why})" if interval else text


def describe(result: Mapping[str, Any]) -> Optional[str]:
    """One sentence for a person, or None when the result has no comparison."""
    block = result.get("comparison")
    if not isinstance(block, Mapping):
        return None
    now_median = _get(result, "timing", "median_us")
    text = (f"{units.duration_us(block.get('previous_median_us'))} → {units.duration_us(now_median)} "
            f"since {since(str(block.get('previous_created_at')))}")
    change = _change(block)
    if change:
        text += f": {change}"
    regime_now, regime_before = _get(result, "verdict", "regime"), block.get("previous_regime")
    if regime_before and regime_now and regime_before != regime_now:
        text += f"; {regime_before} → {regime_now}"
    if block.get("inputs_changed"):
        text += "; not a speedup: the inputs changed"
    elif block.get("device_changed"):
        text += "; not comparable: another device"
    elif block.get("inputs_changed") is None or block.get("device_changed") is None:
        text += "; not comparable: the previous result does not say which inputs or device it used"
    elif block.get("source_changed") is False:
        text += "; same code"
    if block.get("ceilings_changed"):
        text += "; other ceilings"
    return text


def short(result: Mapping[str, Any]) -> Optional[str]:
    """The code lens's words: `3.4× faster since 11:02`, `inputs changed since 11:02`."""
    block = result.get("comparison")
    if not isinstance(block, Mapping):
        return None
    when = since(str(block.get("previous_created_at")))
    if block.get("inputs_changed"):
        return f"inputs changed since {when}"
    if block.get("device_changed"):
        return f"other device since {when}"
    if block.get("significant") is False:
        return f"no clear change since {when}"
    return f"{_headline(block['speedup'])} since {when}" if block.get("speedup") else None
