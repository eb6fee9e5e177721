"""Terminal table, progress rendering and roofline plots from real results."""
from __future__ import annotations

import io
import json

import pytest

from perflsp.runtime import analysis, plot, report
from perflsp.runtime.session import profile_function
from perflsp.runtime.timing import TimingOptions


@pytest.fixture(scope="module")
def result(ref_cases, cpu_peaks):
    fn = ref_cases.mixed
    return profile_function(fn, fn.__perflsp_profile__.setup(), device="cpu", peaks=cpu_peaks,
                            timing=TimingOptions(min_time_s=0.05, min_iters=5))


def test_table_shows_time_verdict_lines_and_syncs(result):
    text = report.render_result(result, "/w/.perflsp/profiles/ref_cases.mixed.json")
    assert "perflsp profile  mixed" in text
    assert "perf_counter" in text and "median" in text and "p90" in text
    assert result["verdict"]["summary"] in text
    assert "y = a @ a" in text and "compute-bound" in text
    assert "sync       line" in text and "does not block on CPU" in text
    assert "ref_cases.mixed.json" in text


def test_table_for_a_failure_shows_the_traceback():
    base = analysis.new_result({"spec": "t.py:f", "file": None, "module": "t", "qualname": "f", "def_line": None,
                                "source_sha256": None, "file_sha256": None},
                               analysis.settings_block(inputs=None, setup=None, run_command=None, stop_program=True,
                                                       timing=TimingOptions(), timeout_s=5.0, device="auto"))
    failed = analysis.with_error(base, analysis.error_block("target-not-found", "'f' is not defined in t.py; it defines: g",
                                                            defined=["g"]))
    text = report.render_result(failed)
    assert "target-not-found: 'f' is not defined" in text and "defined    g" in text


def test_progress_modes(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")  # the bar's width follows the terminal's
    stream = io.StringIO()
    progress = report.Progress("json", stream)
    progress({"event": "phase", "phase": "timing"})
    progress({"event": "progress", "phase": "timing", "done": 5, "total": 10, "unit": "calls"})
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["phase", "progress"]
    stream = io.StringIO()
    bar = report.Progress("bar", stream)
    bar({"event": "progress", "phase": "timing", "done": 5, "total": 10, "unit": "calls", "fraction": 0.5})
    assert "timing [" in stream.getvalue() and "5/10 calls" in stream.getvalue()
    assert "[" + "#" * 15 + "." * 15 + "]" in stream.getvalue()
    bar.finish()
    assert stream.getvalue().endswith("\r")
    quiet = io.StringIO()
    report.Progress("auto", quiet)({"event": "phase", "phase": "timing"})  # not a terminal: silent
    assert quiet.getvalue() == ""


def test_png_plot(result, tmp_path):
    path = tmp_path / "roofline.png"
    plot.write(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_html_plot_is_self_contained(result, tmp_path):
    path = tmp_path / "roofline.html"
    plot.write(result, str(path))
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</svg>" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "ridge" in page and "mixed" in page and "line " in page


def test_plot_points_cover_the_function_and_its_lines(result):
    points = plot.points(result)
    assert points[0].main and points[0].label == "mixed"
    assert [p.label for p in points[1:]] == [f"line {line['line']}" for line in result["lines"][:5]]


def test_peaks_table(cpu_peaks):
    text = report.render_peaks({"peaks": cpu_peaks, "source": "cache", "cache_path": "/c/p.json"})
    assert "bandwidth DRAM" in text and "float64 matmul" in text and "float32 matmul" in text
    assert "load average" in text and "rounds" in text
    unconverged = dict(cpu_peaks, protocol=dict(cpu_peaks["protocol"], rounds_agree=False))
    assert "not converged" in report.render_peaks({"peaks": unconverged, "source": "cache"})
    assert "cache   /c/p.json" in text
