"""Placing the labels of a plot's points so that none covers another label or another point.

Plain geometry, shared by the matplotlib and the SVG plot: boxes are (x0, y0, x1, y1) with y
growing upwards, in whatever unit the caller measures text in (pixels of the rendered figure for
matplotlib, an estimate for SVG). Each label tries places around its anchor, nearest first: beside
it, then further above or below; it takes the first place inside `bounds` that meets no box taken
before it. Labels are placed in the order given, so the important ones get the nearest places.
"""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

Box = Tuple[float, float, float, float]
_RINGS = 12  # places tried above and below, one label height (and `_SPACE`) apart
# Room left between labels, so that drawing them (a round trip through data coordinates) cannot
# make neighbours touch.
_SPACE = 1.0


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(box: Box, bounds: Box) -> bool:
    return bounds[0] <= box[0] and box[2] <= bounds[2] and bounds[1] <= box[1] and box[3] <= bounds[3]


def _places(anchor: Tuple[float, float], size: Tuple[float, float], gap: float) -> Iterator[Box]:
    (x, y), (w, h) = anchor, size
    for ring in range(_RINGS):
        rise = ring * (h + _SPACE)
        for left in (x + gap, x - gap - w):
            yield (left, y + gap + rise, left + w, y + gap + rise + h)
            yield (left, y - gap - h - rise, left + w, y - gap - rise)


def _grown(box: Box) -> Box:
    return (box[0] - _SPACE, box[1] - _SPACE, box[2] + _SPACE, box[3] + _SPACE)


def place(anchors: Sequence[Tuple[float, float]], sizes: Sequence[Tuple[float, float]], bounds: Box,
          obstacles: Sequence[Box] = (), gap: float = 4.0) -> List[Box]:
    """The box of each label (the nearest free place; where none is free, the nearest place inside
    `bounds`, which then overlaps)."""
    taken: List[Box] = list(obstacles)
    chosen: List[Box] = []
    for anchor, size in zip(anchors, sizes):
        fallback: Optional[Box] = None
        found: Optional[Box] = None
        for box in _places(anchor, size, gap):
            if not _inside(box, bounds):
                continue
            fallback = fallback or box
            if not any(overlaps(_grown(box), other) for other in taken):
                found = box
                break
        box = found or fallback or next(_places(anchor, size, gap))
        chosen.append(box)
        taken.append(box)
    return chosen
