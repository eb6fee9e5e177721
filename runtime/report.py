"""Terminal output: the progress bar while measuring, then a readable table. No torch here."""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any, Dict, IO, List, Optional

from perflsp import comparison, units
from perflsp.profile_result import compile_summary

PHASE_TEXT = {
    "start": "starting",
    "import": "importing the target",
    "peaks": "measuring device ceilings (cached afterwards)",
    "setup": "building inputs",
    "program": "running the program",
    "warm-up": "warming up",
    "timing": "timing",
    "profile": "profiling",
    "attribution": "attributing ops to lines",
    "analysis": "analysing",
    "explain": "finding graph breaks (torch._dynamo.explain)",
    "compile": "compiling (torch.compile)",
}


class Progress:
    """Renders the child's messages: a one-line bar on a terminal, JSON lines, or nothing."""

    def __init__(self, mode: str, stream: Optional[IO[str]] = None):
        self.stream = stream if stream is not None else sys.stderr  # the current one, not the one at import
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "none"
        self.mode = mode
        self._drawn = False

    def __call__(self, message: Dict[str, Any]) -> None:
        if self.mode == "json":
            self.stream.write(json.dumps(message) + "\n")
            self.stream.flush()
        elif self.mode == "bar":
            self._draw(message)

    def _draw(self, message: Dict[str, Any]) -> None:
        width = shutil.get_terminal_size((80, 20)).columns
        event = message.get("event")
        if event == "phase":
            text = PHASE_TEXT.get(message.get("phase", ""), message.get("phase", ""))
            detail = message.get("detail")
            line = f"perflsp: {text}" + (f" ({detail})" if detail else "")
        elif event == "progress":
            done, total, fraction = message.get("done", 0), message.get("total"), message.get("fraction")
            phase = PHASE_TEXT.get(message.get("phase", ""), message.get("phase", ""))
            count = f"{done}/{total}" if total else f"{done}"
            if fraction is not None:
                bar_width = max(10, min(30, width - 40))
                filled = int(bar_width * min(max(fraction, 0.0), 1.0))
                line = f"perflsp: {phase} [{'#' * filled}{'.' * (bar_width - filled)}] {count} {message.get('unit', '')}"
            else:
                line = f"perflsp: {phase} {count} {message.get('unit', '')}"
        else:
            return
        self.stream.write("\r" + line[: width - 1].ljust(width - 1))
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            width = shutil.get_terminal_size((80, 20)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")
            self.stream.flush()
            self._drawn = False


def _row(label: str, text: str) -> str:
    return f"{label:<10} {text}"


def hot_row(document: Dict[str, Any], path: str) -> str:
    """The line naming the measured-hotness file a program run wrote."""
    step = "one optimizer.step()" if document["step_source"] == "optimizer.step" else "one call of the target"
    return _row("hot", f"{_relative(path)}: {len(document['functions'])} functions over {document['steps']} steps "
                       f"(a step: {step})")


def _relative(path: Optional[str]) -> str:
    if not path:
        return ""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def render_result(result: Dict[str, Any], written_to: Optional[str] = None) -> str:
    out: List[str] = []
    target = result["target"]
    where = f"{_relative(target.get('file'))}:{target.get('def_line')}" if target.get("file") and target.get("def_line") else target["spec"]
    out.append(f"perflsp profile  {target['qualname']}  ({where})")
    device = result.get("device")
    if device:
        extra = f"cc {device['compute_capability']}" if device.get("compute_capability") else f"{device.get('threads')} threads"
        out.append(_row("device", f"{device['kind']}: {device['name']} ({extra})"))
    if result["status"] == "error":
        error = result["error"]
        out.append(_row("error", f"{error['kind']}: {error['message']}"))
        if error.get("defined"):
            out.append(_row("defined", ", ".join(error["defined"])))
        if error.get("traceback"):
            out.append("")
            out.append(error["traceback"].rstrip())
        if written_to:
            out.append(_row("result", _relative(written_to)))
        return "\n".join(out) + "\n"

    timing, totals, verdict, ceilings = result["timing"], result["totals"], result["verdict"], result["ceilings"]
    out.append(_row("time", f"median {units.duration_us(timing['median_us'])}  p10 {units.duration_us(timing['p10_us'])}  "
                            f"p90 {units.duration_us(timing['p90_us'])}   {timing['clock']}, {timing['calls']} calls "
                            f"after {timing['warmup_calls']} warm-up"))
    change = comparison.describe(result)
    if change:
        out.append(_row("change", change))
        for note in result["comparison"]["notes"]:
            out.append(_row("  note", note))
    out.append(_row("work", f"{units.flops(totals['flops'])}, {units.byte_count(totals['bytes'])} per call   "
                            f"AI {units.intensity(totals['intensity_flop_per_byte'])}   ridge "
                            f"{units.intensity(ceilings['ridge_flop_per_byte'])} ({ceilings['dtype']}, ceilings from "
                            f"{ceilings['source']})"))
    attained = []
    if totals["flops_fraction"] is not None:
        attained.append(f"{units.flop_rate(totals['attained_flops_per_s'])} = {units.percent(totals['flops_fraction'])} "
                        f"of {units.flop_rate(ceilings['peak_flops_per_s'])}")
    if totals["bandwidth_fraction"] is not None:
        attained.append(f"{units.byte_rate(totals['attained_bytes_per_s'])} = {units.percent(totals['bandwidth_fraction'])} "
                        f"of {units.byte_rate(ceilings['bandwidth_bytes_per_s'])}")
    out.append(_row("attained", "   ".join(attained) or "no FLOPs or bytes counted"))
    out.append(_row("verdict", verdict["summary"]))
    for reason in verdict["reasons"]:
        out.append(_row("  because", reason))
    for lever in verdict["levers"]:
        out.append(_row("  lever", lever))
    for note in verdict["notes"]:
        out.append(_row("  note", note))
    kernels = result["kernels"]
    if kernels["device"] == "cuda":
        out.append(_row("kernels", f"{kernels['per_call']:.0f} per call, median {units.duration_us(kernels['median_us'])}, "
                                   f"{units.percent(kernels['short_fraction'])} under 10 µs; GPU busy "
                                   f"{units.percent(kernels['busy_fraction'])}, {kernels['gaps']['count']:.0f} idle gaps "
                                   f"({units.duration_us(kernels['gaps']['total_us'])})"))
    else:
        out.append(_row("ops", f"{kernels['ops_per_call']:.0f} per call, median {units.duration_us(kernels['median_op_us'])}; "
                               f"{units.percent(kernels['busy_fraction'])} of the call inside ops"))
    if result["lines"]:
        out.append(_row("lines", f"{'line':>5}  {'time':>9}  {'spread':>6}  {'share':>5}  {'FLOPs':>9}  {'bytes':>9}  "
                                 f"{'regime':<15} code"))
        for line in result["lines"]:
            code = line["code"] if len(line["code"]) <= 60 else line["code"][:57] + "..."
            out.append(_row("", f"{line['line']:>5}  {units.duration_us(max(line['time_us'], line['blocked_us'])):>9}  "
                                f"{units.spread(line):>6}  {units.percent(line['share']):>5}  {units.si(line['flops'], ''):>9}  "
                                f"{units.si(line['bytes'], 'B'):>9}  {line['regime']:<15} {code}"))
    for sync in result["syncs"][:5]:
        blocked = (f"blocks {units.duration_us(sync['blocked_us'])} ({units.percent(sync['share'])})"
                   if sync["blocking"] else "does not block on CPU")
        out.append(_row("sync", f"line {sync['line']}: {sync['kind']} ({sync['op']}) x{sync['count']:.0f} per call, {blocked}"))
    if result.get("compile"):
        out.extend(_compile_rows(result["compile"]))
    if result.get("program"):
        program = result["program"]
        out.append(_row("program", f"{program['command']}: {program['calls_seen']} calls seen"
                                   + (", stopped once measured" if program["stopped_early"] else "")))
    if written_to:
        out.append(_row("result", _relative(written_to)))
    return "\n".join(out) + "\n"


def _compile_rows(block: Dict[str, Any]) -> List[str]:
    mode = "" if block["explain_only"] else f" (mode {block['mode']})"
    rows = [_row("compile", compile_summary(block) + mode)]
    for item in block["graph_breaks"]:
        rows.append(_row("  break", f"{_relative(item['file'])}:{item['line']}: {item['explanation']}"))
    for item in block["recompiles"]:
        rows.append(_row("  recompile", item["reason"]))
    for note in block["notes"]:
        rows.append(_row("  note", note))
    return rows


def render_graph_breaks(target: Dict[str, Any], block: Dict[str, Any]) -> str:
    """`--graph-breaks`: the function, then one `file:line: what to do` per break."""
    where = f"{_relative(target.get('file'))}:{target.get('def_line')}" if target.get("file") else target["spec"]
    out = [f"perflsp graph breaks  {target['qualname']}  ({where})"]
    return "\n".join(out + _compile_rows(block)) + "\n"


def render_peaks(payload: Dict[str, Any]) -> str:
    from perflsp.runtime import datasheet as sheets

    peaks = payload["peaks"]
    device = peaks["device"]
    sheet = sheets.lookup(device["name"], device.get("compute_capability")) if device["kind"] == "cuda" else None
    header = f"perflsp peaks  {device['kind']}: {device['name']}"
    if device.get("compute_capability"):
        header += f" (cc {device['compute_capability']})"
    else:
        header += f" ({device.get('threads')} threads)"
    header += f", torch {peaks['torch']}" + (f", CUDA {peaks['cuda']}" if peaks.get("cuda") else "")
    source = "cached" if payload.get("source") == "cache" else f"measured in {peaks['duration_s']:.1f} s"
    out = [header + f"   ({source}, {peaks['measured_at']}, {peaks['clock']}, best converged sample)"]
    sheet_name = f"datasheet ({sheet.name})" if sheet else "datasheet"
    out.append(f"{'ceiling':<22} {'measured':>14}  {sheet_name:>24}  {'of datasheet':>12}")

    def row(label: str, measured: float, sheet_value: Optional[float], rate, detail: str) -> None:
        sheet_text = rate(sheet_value) if sheet_value else "-"
        ratio = units.percent(measured / sheet_value) if sheet_value else "-"
        out.append(f"{label:<22} {rate(measured):>14}  {sheet_text:>24}  {ratio:>12}  {detail}")

    for level in peaks["levels"]:
        label = f"bandwidth {level['name']}"
        sheet_value = sheet.bandwidth_bytes_per_s if sheet and level is peaks["levels"][-1] else None
        row(label, level["bandwidth_bytes_per_s"], sheet_value, units.byte_rate,
            f"±{units.percent(peaks['bandwidth_spread'].get(level['name'], level['spread']))}, working sets {units.byte_count(level['from_bytes'])}"
            f"-{units.byte_count(level['to_bytes'])}")
    for key, rate_value in peaks["compute_flops_per_s"].items():
        label = f"{key} matmul"
        row(label, rate_value, sheet.compute_flops_per_s.get(key) if sheet else None, units.flop_rate,
            f"±{units.percent(peaks['compute_spread'][key])}, n={peaks['matmul_n'][key]}")
    for key, why in peaks.get("skipped_dtypes", {}).items():
        out.append(f"{key + ' matmul':<22} {'not supported':>14}   ({why})")
    fp32 = peaks["compute_flops_per_s"].get("float32")
    if fp32:
        out.append(f"{'ridge (float32, DRAM)':<22} {units.intensity(fp32 / peaks['bandwidth_bytes_per_s']):>14}")
    load = peaks["load_average_1m"]
    if load.get("before") is not None:
        out.append(f"load average {load['before']:.2f} before, {load['after']:.2f} after; budget {peaks['budget_s']:g} s; "
                   f"{peaks['protocol']['rounds']} rounds; ± = how far the next-best round fell short of the best")
    if not peaks["protocol"]["rounds_agree"]:
        out.append("not converged: the rounds disagree by more than "
                   f"{units.percent(2 * peaks['protocol']['converged_spread'])} (something else used the machine); "
                   "the best figures are kept, re-run `perflsp peaks` on a quieter machine to confirm them")
    if payload.get("cache_path"):
        out.append(f"cache   {payload['cache_path']}")
    return "\n".join(out) + "\n"
