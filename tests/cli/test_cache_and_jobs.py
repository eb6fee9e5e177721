"""The findings cache and the process pool, through the runner API the CLI uses."""
from __future__ import annotations

import os
import textwrap

from perflsp.rules import runner

SOURCE = textwrap.dedent(
    """\
    import torch

    def train(model, loader):
        for x, y in loader:
            print(model(x).sum().item())
    """
)


def _files(tmp_path, n=6):
    paths = []
    for i in range(n):
        path = tmp_path / f"m{i}.py"
        path.write_text(SOURCE if i % 2 == 0 else "x = 1\n")
        paths.append(path)
    return paths


def test_cache_hits_until_the_file_or_settings_change(tmp_path):
    files = _files(tmp_path)
    cache_dir = tmp_path / ".perflsp_cache"
    first = runner.check_paths(files, jobs=1, cache=runner.Cache(cache_dir))
    assert not any(r.cached for r in first)
    second = runner.check_paths(files, jobs=1, cache=runner.Cache(cache_dir))
    assert all(r.cached for r in second)
    assert [r.findings for r in second] == [r.findings for r in first]
    files[0].write_text(SOURCE + "\n# edited\n")
    os.utime(files[0], ns=(1, 1))  # a different mtime even on coarse clocks
    third = runner.check_paths(files, jobs=1, cache=runner.Cache(cache_dir))
    assert [r.cached for r in third] == [False] + [True] * 5
    fourth = runner.check_paths(files, {"ignore": ["PFL101"]}, jobs=1, cache=runner.Cache(cache_dir))
    assert not any(r.cached for r in fourth) and not any(r.findings for r in fourth)
    assert (cache_dir / ".gitignore").read_text().endswith("*\n")


def test_a_same_size_edit_with_the_mtime_restored_is_seen(tmp_path):
    # `cp -p`, `rsync -a` and `tar` restore mtimes: the cache keys on content, not on stat().
    [path] = _files(tmp_path, n=1)
    cache_dir = tmp_path / ".perflsp_cache"
    assert runner.check_paths([path], jobs=1, cache=runner.Cache(cache_dir))[0].findings
    stat = path.stat()
    edited = SOURCE.replace("print(model(x).sum().item())", "print(model(x).sum().size())")
    assert len(edited) == len(SOURCE)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    [result] = runner.check_paths([path], jobs=1, cache=runner.Cache(cache_dir))
    assert not result.cached and result.findings == []


def test_pool_gives_the_same_findings_as_one_process(tmp_path):
    files = _files(tmp_path, 8)
    one = runner.check_paths(files, jobs=1)
    two = runner.check_paths(files, jobs=2)
    assert [r.findings for r in one] == [r.findings for r in two]
    assert sum(len(r.findings) for r in one) == 4
