"""Roofline plots: labels that cover no other label or point, measured as matplotlib renders them;
the function's previous run (its profile history) drawn beside the new one."""
from __future__ import annotations

import copy
import itertools

import pytest

from perflsp.runtime import labels, plot
from perflsp.runtime.session import profile_function
from perflsp.runtime.timing import TimingOptions


@pytest.fixture(scope="module")
def result(ref_cases, cpu_peaks):
    fn = ref_cases.mixed
    return profile_function(fn, fn.__perflsp_profile__.setup(), device="cpu", peaks=cpu_peaks,
                            timing=TimingOptions(min_time_s=0.05, min_iters=5))


def _crowded(result):
    """The measured result with its top lines and a previous run all where the function is: one
    fixed offset per label would print them on top of each other."""
    crowded = copy.deepcopy(result)
    totals = crowded["totals"]
    for line in crowded["lines"][:5]:
        line["intensity_flop_per_byte"] = totals["intensity_flop_per_byte"]
        line["flops"] = totals["attained_flops_per_s"] * max(line["time_us"], line["blocked_us"]) / 1e6
    previous = copy.deepcopy(crowded)
    previous["totals"]["attained_flops_per_s"] *= 1.05
    return crowded, previous


def test_png_labels_cover_no_other_label_and_stay_inside_the_axes(result):
    crowded, previous = _crowded(result)
    assert len(crowded["lines"]) >= 2
    fig = plot.figure(crowded, previous)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        [ax] = fig.axes
        boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
        assert "mixed" in boxes and any(text.startswith("previous run (") for text in boxes)
        assert len(boxes) == len(ax.texts) == 2 + min(5, len(crowded["lines"])) + 1  # + the ridge
        for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2):
            assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
        frame = ax.get_window_extent(renderer)
        legend = ax.get_legend().get_window_extent(renderer)
        for text, box in boxes.items():
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, text
            assert not box.overlaps(legend), text
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_html_shows_the_previous_run_as_a_hollow_mark(result):
    crowded, previous = _crowded(result)
    page = plot.html_page(crowded, previous)
    assert 'fill="none" stroke="#000"' in page and "previous run (" in page
    assert "previous run" not in plot.html_page(crowded)


def test_places_leave_crowded_labels_apart():
    anchors = [(100.0, 100.0)] * 6 + [(104.0, 98.0)] * 3
    sizes = [(60.0, 12.0)] * 9
    marks = [(x - 5, y - 5, x + 5, y + 5) for x, y in anchors]
    bounds = (0.0, 0.0, 400.0, 300.0)
    boxes = labels.place(anchors, sizes, bounds, marks, gap=7)
    assert not any(labels.overlaps(a, b) for a, b in itertools.combinations(boxes, 2))
    assert not any(labels.overlaps(box, mark) for box in boxes for mark in marks)
    assert all(0 <= box[0] and box[2] <= 400 and 0 <= box[1] and box[3] <= 300 for box in boxes)


def test_profiling_twice_plots_the_previous_run(run_runtime, targets_dir, tmp_path):
    page = tmp_path / "roofline.html"
    for run in ("first", "second"):
        out = run_runtime("profile", f"{targets_dir / 'ref_cases.py'}:matmul", "--min-time", "0.05",
                          "--workspace", str(tmp_path), "--plot", str(page))
        assert out.returncode == 0, out.stderr
        assert ("previous run (" in page.read_text()) == (run == "second")
