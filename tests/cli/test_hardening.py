"""Hostile input never costs the rest of a run: files past what the parser takes, a worker that
crashes, symbolic link loops, malformed notebooks, a damaged cache; and --fix / --add-noqa keep
the bytes they do not mean to change."""
from __future__ import annotations

import ast
import ctypes
import faulthandler
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import pytest

from perflsp.rules import runner
from tests.cli.test_check import LOOP_ITEM


def _findings(result):
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def _by_file(findings):
    out = {}
    for finding in findings:
        out.setdefault(os.path.basename(finding["filename"]), []).append(finding)
    return out


# --- items 3 and 4: past what the parser takes ------------------------------------------------------

def test_files_too_deep_or_too_long_for_the_parser_are_one_pfl000_each_and_the_rest_is_checked(perflsp_cli, tmp_path):
    # libcst's native parser kills the process at ~1,300 nested brackets (the pool broke: no findings
    # for any file) and takes minutes on a 20,000-term sum.
    (tmp_path / "deep.py").write_text("x = 1\ny = " + "(" * 3000 + "1" + ")" * 3000 + "\n")
    (tmp_path / "deep_fstring.py").write_text('y = f"{' + "[" * 3000 + "1" + "]" * 3000 + '}"\n')
    (tmp_path / "unclosed.py").write_text("y = " + "f(" * 3000 + "\n")
    (tmp_path / "long.py").write_text("y = " + " + ".join(["a"] * 20_000) + "\n")
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "loop2.py").write_text(LOOP_ITEM)
    started = time.monotonic()
    found = _by_file(_findings(perflsp_cli("check", ".", "--output-format", "json", "--no-cache", "--jobs", "2")))
    assert time.monotonic() - started < 60
    assert [f["code"] for f in found["loop.py"]] == [f["code"] for f in found["loop2.py"]] == ["PFL101"]
    for name in ("deep.py", "deep_fstring.py", "unclosed.py"):
        [finding] = found[name]
        assert finding["code"] == "PFL000" and "too deeply nested to analyse" in finding["message"], finding
    # at the place the limit is passed: the 101st bracket of row 2
    assert found["deep.py"][0]["location"] == {"row": 2, "column": 4 + 100 + 1}
    [long] = found["long.py"]
    assert long["code"] == "PFL000" and long["location"]["row"] == 1
    assert "expression too long to analyse" in long["message"] and "skipped this file" in long["message"]


def _crash_on_marked_files(text, path, settings, facts=None):
    if path.endswith("crash.py"):
        faulthandler.disable()  # pytest's handler would print the worker's stack
        ctypes.string_at(0)  # a segmentation fault, as in native code
    return []


@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="the patch reaches workers by fork")
def test_a_worker_that_crashes_costs_only_its_own_file(tmp_path, monkeypatch):
    files = []
    for name in ("a.py", "crash.py", "b.py", "c.py", "d.py"):
        files.append(tmp_path / name)
        files[-1].write_text(LOOP_ITEM)
    monkeypatch.setattr(runner, "check_text", _crash_on_marked_files)
    results = {os.path.basename(r.path): r for r in runner.check_paths(files, jobs=2)}
    assert results["crash.py"].error == ("skipped: analysing this file crashed perflsp's worker process "
                                         "(killed by SIGSEGV); please report it")
    assert all(r.error is None for name, r in results.items() if name != "crash.py")


# --- item 5: symbolic link loops --------------------------------------------------------------------

@pytest.mark.parametrize("in_git", [False, True], ids=["plain-folder", "git-work-tree"])
def test_symlink_loops_are_skipped_with_a_message(perflsp_cli, tmp_path, in_git):
    if in_git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "loop.py").write_text(LOOP_ITEM)
    os.symlink("self.py", pkg / "self.py")
    os.symlink("b.py", pkg / "a.py")
    os.symlink("a.py", pkg / "b.py")
    result = perflsp_cli("check", "pkg", "--output-format", "json", "--no-cache")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert [f["code"] for f in json.loads(result.stdout)] == ["PFL101"]
    for name in ("a.py", "b.py", "self.py"):
        assert f"perflsp: pkg/{name}: skipped: a symbolic link that loops back on itself" in result.stderr
    named = perflsp_cli("check", "pkg/self.py", "--force-exclude", "--no-cache")
    assert named.returncode == 0 and "pkg/self.py: skipped: a symbolic link that loops" in named.stderr


# --- item 6: malformed notebooks --------------------------------------------------------------------

@pytest.mark.parametrize("notebook, reason", [
    ({"cells": 5}, "no list of cells"),
    ({"cells": [None]}, "cell 1 is not an object"),
    ({"cells": [{"cell_type": "code", "source": 7}]}, "the source of cell 1 is not text"),
    ({"cells": [{"cell_type": "code", "source": ["x = 1\n", None]}]}, "the source of cell 1 is not text"),
    ([], "no list of cells"),
])
def test_malformed_notebooks_are_reported_and_the_run_goes_on(perflsp_cli, tmp_path, notebook, reason):
    (tmp_path / "bad.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "loop2.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--output-format", "json", "--no-cache", "--jobs", "2")
    assert [f["code"] for f in _findings(result)] == ["PFL101", "PFL101"]
    assert f"perflsp: bad.ipynb: not a Jupyter notebook: {reason}" in result.stderr


# --- item 7: a damaged cache ------------------------------------------------------------------------

def _damage(cache_file, how):
    if how == "a-list":
        cache_file.write_text("[]")
    elif how == "cut-short":
        cache_file.write_text(cache_file.read_text()[:40])
    elif how == "entry-without-code":
        entries = json.loads(cache_file.read_text())
        for entry in entries.values():
            for finding in entry.get("findings", []):
                del finding["code"]
        cache_file.write_text(json.dumps(entries))
    elif how == "summary-without-its-keys":
        entries = json.loads(cache_file.read_text())
        for entry in entries.values():
            entry["summary"] = {k: entry["summary"][k] for k in ("version", "module")}
        cache_file.write_text(json.dumps(entries))
    elif how == "findings-json-a-folder":
        cache_file.unlink()
        (cache_file / "inside").mkdir(parents=True)
    elif how == "version-folder-a-file":
        for item in cache_file.parent.iterdir():
            item.unlink()
        cache_file.parent.rmdir()
        cache_file.parent.write_text("x")


@pytest.mark.parametrize("how", ["a-list", "cut-short", "entry-without-code", "summary-without-its-keys",
                                 "findings-json-a-folder", "version-folder-a-file"])
def test_a_damaged_cache_is_discarded_rebuilt_and_named_once(perflsp_cli, tmp_path, how):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "loop2.py").write_text(LOOP_ITEM)
    first = perflsp_cli("check", ".", "--output-format", "json")
    cache_file = next((tmp_path / ".perflsp_cache").glob("*/findings.json"))
    _damage(cache_file, how)
    damaged = perflsp_cli("check", ".", "--output-format", "json")
    assert damaged.stdout == first.stdout and damaged.returncode == 1
    [warning] = damaged.stderr.splitlines()
    assert warning.startswith(f"perflsp: warning: {cache_file.relative_to(tmp_path)}: "), warning
    assert warning.endswith("; discarded, and rebuilt as files are checked")
    assert isinstance(json.loads(cache_file.read_text()), dict)
    again = perflsp_cli("check", ".", "--output-format", "json")
    assert again.stdout == first.stdout and again.stderr == ""


def test_the_summary_of_a_file_that_does_not_parse_is_cached_like_any_other(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / "py2.py").write_text('print "a Python 2 script"\n')
    first = perflsp_cli("check", ".", "--output-format", "json")
    assert sorted(f["code"] for f in _findings(first)) == ["PFL000", "PFL101"]
    again = perflsp_cli("check", ".", "--output-format", "json")
    assert again.stdout == first.stdout and again.stderr == ""


def test_a_file_where_the_cache_folder_goes_is_left_alone_and_the_run_is_uncached(perflsp_cli, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    (tmp_path / ".perflsp_cache").write_text("someone's notes\n")
    for _ in range(2):
        result = perflsp_cli("check", ".", "--output-format", "json")
        assert [f["code"] for f in _findings(result)] == ["PFL101"]
        assert result.stderr == ("perflsp: warning: .perflsp_cache is not a folder, so the cache is off; "
                                 "remove it to cache again\n")
    assert (tmp_path / ".perflsp_cache").read_text() == "someone's notes\n"


# --- item 9: --fix keeps the bytes it does not fix ----------------------------------------------------

def test_fix_keeps_a_byte_order_mark_and_crlf_line_endings(perflsp_cli, tmp_path):
    source = ("import torch as th\n\ndef fresh_hidden(batch, size):\n"
              "    return th.cuda.FloatTensor(batch, size).zero_()\n")
    target = tmp_path / "hidden.py"
    target.write_bytes(b"\xef\xbb\xbf" + source.replace("\n", "\r\n").encode())
    result = perflsp_cli("check", "hidden.py", "--fix", "--no-cache", "--preview")  # PFL204 is in preview
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = source.replace("th.cuda.FloatTensor(batch, size)", 'th.empty(batch, size, dtype=th.float32, device="cuda")')
    assert target.read_bytes() == b"\xef\xbb\xbf" + fixed.replace("\n", "\r\n").encode()


# --- item 10: --add-noqa ---------------------------------------------------------------------------

NOQA_SOURCE = textwrap.dedent(
    '''\
    import torch

    def train(model, loader):
        for x, y in loader:
            form_feed = "a\x0cb"; separator = "c\u2028d"; print(x.sum().item())
            model.step()  # queues work: the next read is a sync of its own, not one back to back
            print(y.sum().item(), """
    # noqa: PFL101 in a string is text
    """)
            model.step()
            total = x.mean().item() + \\
                1
            model.step()
            note = "# noqa: E501"; print(x.max().item())
    '''
)


def test_add_noqa_puts_each_comment_where_it_silences_and_changes_no_code(perflsp_cli, tmp_path):
    target = tmp_path / "train.py"
    target.write_bytes(NOQA_SOURCE.replace("\n", "\r\n").encode())
    assert len(_findings(perflsp_cli("check", "train.py", "--output-format", "json", "--no-cache"))) == 4
    result = perflsp_cli("check", "train.py", "--add-noqa", "--no-cache")
    assert result.returncode == 0 and "Added 4 noqa directives." in result.stderr
    assert "fixed" not in result.stdout + result.stderr
    new = target.read_bytes().decode()
    assert ast.dump(ast.parse(new)) == ast.dump(ast.parse(NOQA_SOURCE))  # comments only
    assert new.count("\r\n") == NOQA_SOURCE.count("\n") and "\n" not in new.replace("\r\n", "")
    rows = new.split("\r\n")
    assert rows[4].endswith('print(x.sum().item())  # noqa: PFL101')  # not split at \x0c or U+2028
    assert rows[8] == '""")  # noqa: PFL101'  # after the string the finding's row runs into
    assert rows[11] == "            1  # noqa: PFL101"  # after the backslash-continued row
    assert rows[13].endswith('note = "# noqa: E501"; print(x.max().item())  # noqa: PFL101')
    assert _findings(perflsp_cli("check", "train.py", "--output-format", "json", "--no-cache")) == []
    again = perflsp_cli("check", "train.py", "--add-noqa", "--no-cache")
    assert "Added 0 noqa directives." in again.stderr and target.read_bytes().decode() == new


# --- round 3, security: devices, FIFOs and links out of the workspace -----------------------------

def test_devices_and_fifos_are_skipped_without_reading_them(perflsp_cli, tmp_path):
    (tmp_path / "zero.py").symlink_to("/dev/zero")  # read to the end, it never ends
    os.mkfifo(tmp_path / "pipe.py")  # opened for reading, it waits for a writer forever
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    result = perflsp_cli("check", ".", "--output-format", "json", timeout=60)
    assert [f["code"] for f in _findings(result)] == ["PFL101"]
    assert "zero.py: skipped: a character device, not a regular file" in result.stderr
    assert "pipe.py: skipped: a FIFO (named pipe), not a regular file" in result.stderr


@pytest.mark.parametrize("linked", [".perflsp_cache", ".perflsp_cache/0.1.0", ".perflsp_cache/.gitignore"])
def test_a_cache_linked_out_of_the_workspace_gets_nothing_written(perflsp_cli, tmp_path, linked):
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    (workspace / linked).parent.mkdir(parents=True, exist_ok=True)
    # A dangling link too: writing the file would create it outside.
    (workspace / linked).symlink_to(outside / "created" if linked.endswith(".gitignore") else outside)
    (workspace / "loop.py").write_text(LOOP_ITEM)
    (workspace / "perflsp.toml").write_text("preview = true\n")
    for _ in range(2):
        result = perflsp_cli("check", ".", "--output-format", "json", cwd=workspace)
        assert [f["code"] for f in _findings(result)] == ["PFL101"]
        assert "the cache could not be written (a symbolic link leads" in result.stderr
    assert list(outside.iterdir()) == []


# --- round 3: parser limits -------------------------------------------------------------------------

def _check_measured(cwd, *args):
    """`perflsp check --output-format json --no-cache ARGS` in a subprocess, as `perflsp_cli` runs
    it: (exit code, findings by file, what the process and its workers used: `os.wait4`'s rusage)."""
    out, err = cwd / "findings.json", cwd / "stderr.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "perflsp", "check", *args, "--output-format", "json",
                                    "--no-cache"], cwd=cwd, stdout=stdout, stderr=stderr,
                                   env=dict(os.environ, PYTHONIOENCODING="utf-8"))
        _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    assert code in (0, 1), (code, err.read_text())
    return code, _by_file(json.loads(out.read_text())), usage


def test_t_strings_too_deep_for_the_parser_are_one_pfl000_each(tmp_path):
    # libcst parses the fields of t-strings (PEP 750) as code: 1,500 brackets there killed the process.
    for name, prefix in [("t.py", "t"), ("raw.py", "rt"), ("upper.py", "Tr")]:
        (tmp_path / name).write_text(f'y = {prefix}"{{' + "(" * 1500 + "1" + ")" * 1500 + '}"\n')
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    _, found, _ = _check_measured(tmp_path, ".", "--jobs", "2")
    assert [f["code"] for f in found.pop("loop.py")] == ["PFL101"]
    for name, [finding] in found.items():
        assert (finding["code"], finding["location"]) == ("PFL000", {"row": 1, "column": 5}), name
        assert finding["message"] == ("too deeply nested to analyse: more than 100 brackets open at once here; "
                                      "perflsp skipped this file")
    assert sorted(found) == ["raw.py", "t.py", "upper.py"]


def _training_loop(elifs):
    chain = "".join(f"        elif cfg.mode == {i}:\n            z = {i}\n" for i in range(elifs))
    return ("import torch\n\n\ndef train(model, loader, opt, cfg):\n    for x, y in loader:\n"
            "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
            "        if cfg.mode < 0:\n            z = -1\n" + chain + "        print(loss.item())\n")


def test_if_statements_with_more_elifs_than_the_parser_takes_are_one_pfl000_never_a_silent_file(tmp_path):
    # 10,000 `elif`s killed the process (SIGSEGV in libcst's parser); with 500, the summary's
    # recursion gave out and the loop's `.item()` went unreported without a word.
    flat = "".join(f"elif a == {i}:\n    pass\n" for i in range(10_000))
    (tmp_path / "flat.py").write_text("if a:\n    pass\n" + flat)
    (tmp_path / "chain300.py").write_text(_training_loop(300))
    (tmp_path / "chain500.py").write_text(_training_loop(500))
    _, found, _ = _check_measured(tmp_path, ".", "--jobs", "2")
    [read] = found["chain300.py"]
    assert (read["code"], read["location"]) == ("PFL101", {"row": 611, "column": 15})
    message = ("`if` statement too long to analyse: more than 300 `elif` branches (the parser nests each one in "
               "the one before); perflsp skipped this file")
    for name, row in [("flat.py", 603), ("chain500.py", 611)]:  # the 301st `elif`
        [finding] = found[name]
        assert (finding["code"], finding["message"], finding["location"]["row"]) == ("PFL000", message, row)


def test_a_file_with_more_tokens_than_the_parser_takes_is_one_pfl000_without_the_memory(tmp_path):
    # A 2.7 MB list literal: libcst took 3.4 GB (and the summary's `ast` 0.9 GB) and aborted.
    (tmp_path / "table.py").write_text("x = [" + "1, " * 900_000 + "]\n")
    (tmp_path / "loop.py").write_text(LOOP_ITEM)
    _, found, usage = _check_measured(tmp_path, ".", "--jobs", "1")
    assert [f["code"] for f in found["loop.py"]] == ["PFL101"]
    [finding] = found["table.py"]
    assert (finding["code"], finding["location"]) == ("PFL000", {"row": 1, "column": 375_001})  # the 250,001st token
    assert finding["message"] == ("file too large to analyse: more than 250,000 tokens (the parser holds 2 to 4 KiB "
                                  "of memory for each); perflsp skipped this file")
    assert usage.ru_maxrss < 250 * 1024, f"peak RSS {usage.ru_maxrss // 1024} MiB"  # about 60 MiB; KiB on Linux


def test_reads_back_to_back_in_a_long_loop_body_cost_linear_time_and_stay_one_finding(tmp_path):
    # Each read looked through every statement of the body (is there a synchronize? a binding of
    # its receiver?): 8,000 reads took 82 s, 4,000 about 20 s of CPU; now about 3.
    reads = 4000
    body = "".join(f"        print(loss{i % 7}.item())\n" for i in range(reads))
    (tmp_path / "train.py").write_text("import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
                                       "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
                                       + body)
    _, found, usage = _check_measured(tmp_path, "train.py", "--jobs", "1")
    [finding] = found["train.py"]
    assert (finding["code"], finding["location"]) == ("PFL101", {"row": 9, "column": 15})
    assert finding["message"] == (
        "`loss0.item()` waits for the GPU to finish all queued work and copies the value to the host, inside the "
        "training loop `for x, y in loader` at line 5; keep it on the device and read it once every N steps (with "
        "`loss1.item()`, `loss2.item()`, `loss3.item()` … right after it, which then wait only for the work queued "
        "since)")
    assert usage.ru_utime + usage.ru_stime < 12, f"{usage.ru_utime + usage.ru_stime:.1f} s of CPU"
