"""Roofline plots of a result: `--plot roofline.png` (matplotlib) or `--plot roofline.html`.

Log-log: arithmetic intensity (FLOP/byte) across, attained FLOP/s up. The bandwidth roof is
the line bandwidth x AI; each measured compute ceiling is a flat roof; the ridge point is where
the verdict's ceiling meets the bandwidth roof. The function and its top lines are labelled
points. Points with no bytes or no FLOPs cannot sit on log axes and are listed in the legend.
The HTML file is one self-contained page with an inline SVG: no scripts, no network.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from perflsp import units


@dataclass
class Point:
    label: str
    intensity: Optional[float]
    flops_per_s: float
    main: bool = False

    @property
    def plottable(self) -> bool:
        return bool(self.intensity and self.intensity > 0 and self.flops_per_s > 0)


def points(result: Dict[str, Any], top: int = 5) -> List[Point]:
    totals = result["totals"]
    found = [Point(result["target"]["qualname"], totals["intensity_flop_per_byte"], totals["attained_flops_per_s"], True)]
    for line in result["lines"][:top]:
        seconds = max(line["time_us"], line["blocked_us"]) / 1e6
        rate = line["flops"] / seconds if seconds > 0 else 0.0
        found.append(Point(f"line {line['line']}", line["intensity_flop_per_byte"], rate))
    return found


def _axes(result: Dict[str, Any], pts: List[Point]) -> Tuple[float, float, float, float]:
    ceilings = result["ceilings"]
    ridge = ceilings["ridge_flop_per_byte"]
    ais = [p.intensity for p in pts if p.plottable] + [ridge]
    rates = [p.flops_per_s for p in pts if p.plottable] + list(ceilings["compute_flops_per_s"].values())
    x_lo = 10 ** math.floor(math.log10(min(ais)) - 1)
    x_hi = 10 ** math.ceil(math.log10(max(ais)) + 1)
    y_lo = 10 ** math.floor(math.log10(min(min(rates), ceilings["bandwidth_bytes_per_s"] * x_lo)) - 0.5)
    y_hi = 10 ** math.ceil(math.log10(max(rates)) + 0.3)
    return x_lo, x_hi, y_lo, y_hi


def _title(result: Dict[str, Any]) -> str:
    device = result["device"]
    return f"{result['target']['qualname']}: {result['verdict']['regime']} on {device['name']}"


def write_png(result: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display needed; never pops a window
    import matplotlib.pyplot as plt

    pts = points(result)
    ceilings = result["ceilings"]
    bandwidth = ceilings["bandwidth_bytes_per_s"]
    x_lo, x_hi, y_lo, y_hi = _axes(result, pts)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    try:
        ax.set_xscale("log")
        ax.set_yscale("log")
        xs = [x_lo, x_hi]
        ax.plot(xs, [bandwidth * x for x in xs], color="tab:blue", lw=1.5,
                label=f"bandwidth {units.byte_rate(bandwidth)} (measured)")
        for key, peak in sorted(ceilings["compute_flops_per_s"].items(), key=lambda kv: -kv[1]):
            knee = peak / bandwidth
            chosen = key == ceilings["dtype"]
            ax.plot([knee, x_hi], [peak, peak], lw=2 if chosen else 1, ls="-" if chosen else "--",
                    color="tab:red" if chosen else "tab:gray", label=f"{key} {units.flop_rate(peak)}")
        ridge = ceilings["ridge_flop_per_byte"]
        ax.plot([ridge], [ceilings["peak_flops_per_s"]], marker="o", color="tab:red")
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, ceilings["peak_flops_per_s"]), textcoords="offset points",
                    xytext=(6, -14), fontsize=8)
        for p in pts:
            if not p.plottable:
                ax.plot([], [], " ", label=f"{p.label}: not plottable (AI {units.intensity(p.intensity)}, "
                                           f"{units.flop_rate(p.flops_per_s)})")
                continue
            ax.plot([p.intensity], [p.flops_per_s], marker="*" if p.main else "o", ms=12 if p.main else 6,
                    color="black" if p.main else "tab:green", ls="none")
            ax.annotate(p.label, (p.intensity, p.flops_per_s), textcoords="offset points", xytext=(6, 4), fontsize=8)
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, y_hi)
        ax.set_xlabel("arithmetic intensity (FLOP/byte, estimated)")
        ax.set_ylabel("attained FLOP/s")
        ax.set_title(_title(result), fontsize=10)
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def html_page(result: Dict[str, Any]) -> str:
    pts = points(result)
    ceilings = result["ceilings"]
    bandwidth = ceilings["bandwidth_bytes_per_s"]
    x_lo, x_hi, y_lo, y_hi = _axes(result, pts)
    width, height, pad = 720, 480, 60

    def sx(x: float) -> float:
        return pad + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (width - 2 * pad)

    def sy(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return height - pad - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (height - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" fill="none" stroke="#999"/>']
    for exponent in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x = sx(10 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{height - pad}" x2="{x:.1f}" y2="{pad}" stroke="#eee"/>'
                     f'<text x="{x:.1f}" y="{height - pad + 14}" text-anchor="middle">1e{exponent}</text>')
    for exponent in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        y = sy(10 ** exponent)
        parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{width - pad}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{pad - 4}" y="{y + 4:.1f}" text-anchor="end">1e{exponent}</text>')
    # Bandwidth roof, clipped to the plot.
    x_end = min(x_hi, y_hi / bandwidth)
    parts.append(f'<line x1="{sx(x_lo):.1f}" y1="{sy(bandwidth * x_lo):.1f}" x2="{sx(x_end):.1f}" y2="{sy(bandwidth * x_end):.1f}" '
                 f'stroke="#1f77b4" stroke-width="2"><title>bandwidth {html.escape(units.byte_rate(bandwidth))}</title></line>')
    legend = [("#1f77b4", f"bandwidth {units.byte_rate(bandwidth)} (measured)")]
    for key, peak in sorted(ceilings["compute_flops_per_s"].items(), key=lambda kv: -kv[1]):
        chosen = key == ceilings["dtype"]
        color = "#d62728" if chosen else "#888"
        knee = max(peak / bandwidth, x_lo)
        dash = "" if chosen else ' stroke-dasharray="5,4"'
        parts.append(f'<line x1="{sx(knee):.1f}" y1="{sy(peak):.1f}" x2="{sx(x_hi):.1f}" y2="{sy(peak):.1f}" stroke="{color}" '
                     f'stroke-width="{2 if chosen else 1}"{dash}/>')
        legend.append((color, f"{key} {units.flop_rate(peak)}"))
    ridge = ceilings["ridge_flop_per_byte"]
    parts.append(f'<circle cx="{sx(ridge):.1f}" cy="{sy(ceilings["peak_flops_per_s"]):.1f}" r="4" fill="#d62728">'
                 f'<title>ridge {ridge:.3g} FLOP/B</title></circle>'
                 f'<text x="{sx(ridge) + 6:.1f}" y="{sy(ceilings["peak_flops_per_s"]) + 14:.1f}">ridge {ridge:.3g} FLOP/B</text>')
    for p in pts:
        if not p.plottable:
            legend.append(("#000", f"{p.label}: not plottable (AI {units.intensity(p.intensity)})"))
            continue
        radius, color = (7, "#000") if p.main else (4, "#2ca02c")
        label = html.escape(p.label)
        parts.append(f'<circle cx="{sx(p.intensity):.1f}" cy="{sy(p.flops_per_s):.1f}" r="{radius}" fill="{color}">'
                     f'<title>{label}: AI {p.intensity:.3g} FLOP/B, {html.escape(units.flop_rate(p.flops_per_s))}</title></circle>'
                     f'<text x="{sx(p.intensity) + 8:.1f}" y="{sy(p.flops_per_s) - 6:.1f}">{label}</text>')
    for i, (color, text) in enumerate(legend):
        y = pad + 14 + 14 * i
        parts.append(f'<rect x="{pad + 8}" y="{y - 8}" width="10" height="3" fill="{color}"/>'
                     f'<text x="{pad + 22}" y="{y - 4}">{html.escape(text)}</text>')
    parts.append(f'<text x="{width / 2}" y="{height - 16}" text-anchor="middle">arithmetic intensity (FLOP/byte, estimated)</text>'
                 f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">attained FLOP/s</text>'
                 "</svg>")
    verdict = result["verdict"]
    rows = "".join(f"<li>{html.escape(r)}</li>" for r in verdict["reasons"] + verdict["levers"])
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>perflsp roofline: "
            f"{html.escape(result['target']['qualname'])}</title></head><body>"
            f"<h3>{html.escape(_title(result))}</h3><p>{html.escape(verdict['summary'])}</p>"
            + "".join(parts) + f"<ul>{rows}</ul></body></html>\n")


def write(result: Dict[str, Any], path: str) -> str:
    """Write the plot; the format follows the extension (.html, else matplotlib's)."""
    if result.get("status") != "ok":
        raise ValueError("no plot for a failed profile")
    if Path(path).suffix.lower() in (".html", ".htm"):
        Path(path).write_text(html_page(result), encoding="utf-8")
    else:
        write_png(result, path)
    return path
