"""Roofline plots of a result: `--plot roofline.png` (matplotlib) or `--plot roofline.html`.

Log-log: arithmetic intensity (FLOP/byte) across, attained FLOP/s up. The bandwidth roof is
the line bandwidth x AI; each measured compute ceiling is a flat roof; the ridge point is where
the verdict's ceiling meets the bandwidth roof. The function and its top lines are labelled
points, and so is the function's previous run (from the profile history) when there is one, as a
hollow mark. Labels are placed where they cover no other label or point (`labels`); the legend
sits outside the axes. Points with no bytes or no FLOPs cannot sit on log axes and are listed in
the legend. The HTML file is one self-contained page with an inline SVG: no scripts, no network.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from perflsp import units
from perflsp.runtime import labels


@dataclass
class Point:
    label: str
    intensity: Optional[float]
    flops_per_s: float
    main: bool = False
    previous: bool = False  # the function's previous run

    @property
    def plottable(self) -> bool:
        return bool(self.intensity and self.intensity > 0 and self.flops_per_s > 0)


def points(result: Dict[str, Any], top: int = 5, previous: Optional[Dict[str, Any]] = None) -> List[Point]:
    """The function, its previous run (`previous`: an earlier successful result of it) and its top lines."""
    totals = result["totals"]
    found = [Point(result["target"]["qualname"], totals["intensity_flop_per_byte"], totals["attained_flops_per_s"], True)]
    if previous is not None and previous.get("status") == "ok":
        before = previous["totals"]
        found.append(Point(f"previous run ({previous['created_at'][:16].replace('T', ' ')})",
                           before["intensity_flop_per_byte"], before["attained_flops_per_s"], previous=True))
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


def figure(result: Dict[str, Any], previous: Optional[Dict[str, Any]] = None):
    """The matplotlib figure of the roofline (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; never pops a window
    import matplotlib.pyplot as plt

    pts = points(result, previous=previous)
    ceilings = result["ceilings"]
    bandwidth = ceilings["bandwidth_bytes_per_s"]
    x_lo, x_hi, y_lo, y_hi = _axes(result, pts)
    fig, ax = plt.subplots(figsize=(10, 5.5))
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
    ridge = (ceilings["ridge_flop_per_byte"], ceilings["peak_flops_per_s"])
    ax.plot([ridge[0]], [ridge[1]], marker="o", color="tab:red")
    marked: List[Tuple[str, Tuple[float, float], float]] = [(f"ridge {ridge[0]:.3g} FLOP/B", ridge, 3.0)]
    for p in pts:
        if not p.plottable:
            ax.plot([], [], " ", label=f"{p.label}: not plottable (AI {units.intensity(p.intensity)}, "
                                       f"{units.flop_rate(p.flops_per_s)})")
            continue
        # The previous run's hollow star is larger: where the runs agree, it rings the new one.
        size = 16 if p.previous else 12 if p.main else 6
        ax.plot([p.intensity], [p.flops_per_s], marker="*" if p.main or p.previous else "o", ms=size,
                color="black" if p.main or p.previous else "tab:green", ls="none",
                fillstyle="none" if p.previous else "full")
        marked.append((p.label, (p.intensity, p.flops_per_s), size / 2))
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, estimated)")
    ax.set_ylabel("attained FLOP/s")
    ax.set_title(_title(result), fontsize=10)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    _label(fig, ax, marked)
    return fig


def _label(fig: Any, ax: Any, marked: List[Tuple[str, Tuple[float, float], float]]) -> None:
    """Write each label where `labels.place` finds room, measured as the figure renders it."""
    renderer = fig.canvas.get_renderer()
    px_per_pt = fig.dpi / 72
    anchors = [tuple(ax.transData.transform(xy)) for _, xy, _ in marked]
    marks = [(x - r * px_per_pt, y - r * px_per_pt, x + r * px_per_pt, y + r * px_per_pt)
             for (x, y), (_, _, r) in zip(anchors, marked)]
    texts = [ax.text(0, 0, text, fontsize=8, ha="left", va="bottom") for text, _, _ in marked]
    sizes = [(box.width, box.height) for box in (t.get_window_extent(renderer) for t in texts)]
    gap = max(r for _, _, r in marked) * px_per_pt + 2
    to_data = ax.transData.inverted()
    for text, box in zip(texts, labels.place(anchors, sizes, tuple(ax.get_window_extent(renderer).extents), marks, gap)):
        text.set_position(tuple(to_data.transform((box[0], box[1]))))


def write_png(result: Dict[str, Any], path: str, previous: Optional[Dict[str, Any]] = None) -> None:
    import matplotlib.pyplot as plt

    fig = figure(result, previous)
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)


# The SVG's text is 11 px sans-serif, measured by no renderer here: a generous estimate per character.
_SVG_FONT_PX = 11
_SVG_CHAR_PX = 0.62 * _SVG_FONT_PX
_SVG_LINE_PX = 1.3 * _SVG_FONT_PX
_SVG_LEGEND_PX = 300  # a column right of the axes


def svg_label_boxes(anchors: List[Tuple[float, float]], texts: List[str], bounds: labels.Box,
                    marks: List[labels.Box], gap: float) -> List[labels.Box]:
    """Where the SVG's labels go (y upwards), from the estimated size of their text."""
    sizes = [(len(text) * _SVG_CHAR_PX, _SVG_LINE_PX) for text in texts]
    return labels.place(anchors, sizes, bounds, marks, gap)


def html_page(result: Dict[str, Any], previous: Optional[Dict[str, Any]] = None) -> str:
    pts = points(result, previous=previous)
    ceilings = result["ceilings"]
    bandwidth = ceilings["bandwidth_bytes_per_s"]
    x_lo, x_hi, y_lo, y_hi = _axes(result, pts)
    plot_width, height, pad = 720, 480, 60
    width = plot_width + _SVG_LEGEND_PX

    def sx(x: float) -> float:
        return pad + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (plot_width - 2 * pad)

    def sy(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return height - pad - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (height - 2 * pad)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="{_SVG_FONT_PX}">',
             f'<rect x="{pad}" y="{pad}" width="{plot_width - 2 * pad}" height="{height - 2 * pad}" fill="none" stroke="#999"/>']
    for exponent in range(int(math.log10(x_lo)), int(math.log10(x_hi)) + 1):
        x = sx(10 ** exponent)
        parts.append(f'<line x1="{x:.1f}" y1="{height - pad}" x2="{x:.1f}" y2="{pad}" stroke="#eee"/>'
                     f'<text x="{x:.1f}" y="{height - pad + 14}" text-anchor="middle">1e{exponent}</text>')
    for exponent in range(int(math.log10(y_lo)), int(math.log10(y_hi)) + 1):
        y = sy(10 ** exponent)
        parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{plot_width - pad}" y2="{y:.1f}" stroke="#eee"/>'
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
    ridge_text = f"ridge {ridge:.3g} FLOP/B"
    parts.append(f'<circle cx="{sx(ridge):.1f}" cy="{sy(ceilings["peak_flops_per_s"]):.1f}" r="4" fill="#d62728">'
                 f'<title>{ridge_text}</title></circle>')
    marked = [(ridge_text, (sx(ridge), sy(ceilings["peak_flops_per_s"])), 4)]
    for p in pts:
        if not p.plottable:
            legend.append(("#000", f"{p.label}: not plottable (AI {units.intensity(p.intensity)})"))
            continue
        radius = 10 if p.previous else 7 if p.main else 4  # a larger hollow ring, as in `figure`
        fill = 'fill="none" stroke="#000" stroke-width="2"' if p.previous else f'fill="{"#000" if p.main else "#2ca02c"}"'
        parts.append(f'<circle cx="{sx(p.intensity):.1f}" cy="{sy(p.flops_per_s):.1f}" r="{radius}" {fill}>'
                     f'<title>{html.escape(p.label)}: AI {p.intensity:.3g} FLOP/B, '
                     f'{html.escape(units.flop_rate(p.flops_per_s))}</title></circle>')
        marked.append((p.label, (sx(p.intensity), sy(p.flops_per_s)), radius))
    anchors = [(x, height - y) for _, (x, y), _ in marked]  # y upwards, as `labels` measures
    marks = [(x - r, y - r, x + r, y + r) for (x, y), (_, _, r) in zip(anchors, marked)]
    boxes = svg_label_boxes(anchors, [text for text, _, _ in marked], (pad, pad, plot_width - pad, height - pad),
                            marks, max(r for _, _, r in marked) + 2)
    for (text, _, _), box in zip(marked, boxes):
        # `box` is y-up; SVG text sits on its baseline, a little above the box's bottom.
        parts.append(f'<text x="{box[0]:.1f}" y="{height - box[1] - 0.25 * _SVG_LINE_PX:.1f}">{html.escape(text)}</text>')
    for i, (color, text) in enumerate(legend):
        y = pad + 14 + 14 * i
        parts.append(f'<rect x="{plot_width - pad + 16}" y="{y - 8}" width="10" height="3" fill="{color}"/>'
                     f'<text x="{plot_width - pad + 30}" y="{y - 4}">{html.escape(text)}</text>')
    parts.append(f'<text x="{plot_width / 2}" y="{height - 16}" text-anchor="middle">arithmetic intensity (FLOP/byte, estimated)</text>'
                 f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle">attained FLOP/s</text>'
                 "</svg>")
    verdict = result["verdict"]
    rows = "".join(f"<li>{html.escape(r)}</li>" for r in verdict["reasons"] + verdict["levers"])
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>perflsp roofline: "
            f"{html.escape(result['target']['qualname'])}</title></head><body>"
            f"<h3>{html.escape(_title(result))}</h3><p>{html.escape(verdict['summary'])}</p>"
            + "".join(parts) + f"<ul>{rows}</ul></body></html>\n")


def write(result: Dict[str, Any], path: str, previous: Optional[Dict[str, Any]] = None) -> str:
    """Write the plot; the format follows the extension (.html, else matplotlib's). `previous`:
    the function's previous successful result, shown beside this one."""
    if result.get("status") != "ok":
        raise ValueError("no plot for a failed profile")
    if Path(path).suffix.lower() in (".html", ".htm"):
        Path(path).write_text(html_page(result, previous), encoding="utf-8")
    else:
        write_png(result, path, previous)
    return path
