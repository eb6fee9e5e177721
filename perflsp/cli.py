"""`perflsp` command line: `check`, `rule`, `serve`, `profile`, `peaks`.

Ruff's conventions: exit 0 when clean, 1 when findings remain, 2 on a usage or config error.
Heavy imports (libcst, pygls, torch) happen inside the subcommand that needs them.
"""
from __future__ import annotations

import argparse
import difflib
import gc
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from perflsp import __version__, output
from perflsp.config import ConfigError, Settings

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
OUTPUT_FORMATS = ("text", "concise", "json", "json-lines", "sarif", "github", "junit")
RUNTIME_COMMANDS = ("profile", "peaks")


def _codes(value: str) -> List[str]:
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def _jobs(value: str) -> int:
    jobs = int(value)
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (one per core) or more, got {value}")
    return jobs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perflsp", description="A performance linter for PyTorch.")
    # Not argparse's "version" action: it ignores a failed write, and `perflsp --version | ...` must not.
    parser.add_argument("--version", action="store_true", help="show perflsp's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="check files and folders for performance bugs")
    check.add_argument("paths", nargs="*", default=["."], help="files, folders, or - for stdin")
    check.add_argument("--select", type=_codes, help="rule codes or prefixes to enable (replaces the config's)")
    check.add_argument("--extend-select", type=_codes, help="rule codes or prefixes to enable in addition")
    check.add_argument("--ignore", type=_codes, help="rule codes or prefixes to disable")
    check.add_argument("--per-file-ignores", action="append", metavar="GLOB:CODES",
                       help="ignore codes in files matching GLOB (repeatable)")
    check.add_argument("--preview", action="store_true", default=None,
                       help="run the preview rules too (overrides `preview` of the config)")
    check.add_argument("--no-preview", action="store_false", dest="preview", help="run the stable rules only")
    check.add_argument("--output-format", choices=OUTPUT_FORMATS, default="text")
    check.add_argument("--statistics", action="store_true", help="count findings per rule")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    check.add_argument("--fix", action="store_true", help="apply safe fixes")
    check.add_argument("--unsafe-fixes", action="store_true", help="also apply (with --fix) or show unsafe fixes")
    check.add_argument("--diff", action="store_true", help="print the fixes as a diff instead of writing them")
    check.add_argument("--show-fixes", action="store_true", help="list the fixes that were applied")
    check.add_argument("--add-noqa", action="store_true", help="add `# noqa: CODE` to every line with a finding")
    check.add_argument("--no-cache", action="store_true", help="do not read or write .perflsp_cache")
    check.add_argument("--cache-dir", default=".perflsp_cache", help="cache folder (default: .perflsp_cache)")
    check.add_argument("--jobs", "-j", type=_jobs, default=0, help="worker processes (default: one per core)")
    check.add_argument("--force-exclude", action="store_true", help="apply `exclude` to files named on the command line too")
    check.add_argument("--stdin-filename", help="the name of the file read from stdin (for config and output)")
    check.add_argument("--quiet", "-q", action="store_true", help="print findings only, no summary")
    check.add_argument("--show-refuted", action="store_true",
                       help="also list the findings a recorded run refuted (`perflsp record`), which are not reported")

    rule = sub.add_parser("rule", help="explain a rule (or list them all)")
    rule.add_argument("code", nargs="?")
    rule.add_argument("--all", action="store_true", help="list every rule")

    serve = sub.add_parser("serve", help="run the language server")
    serve.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    serve.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP address instead")

    sub.add_parser("record", help="run the program for a few steps to confirm or refute the findings "
                                  "(see `perflsp record --help`)", add_help=False)
    for name in RUNTIME_COMMANDS:
        sub.add_parser(name, help=f"{'measure a function on the device' if name == 'profile' else 'measure the device ceilings'} "
                                  f"(see `perflsp {name} --help`)", add_help=False)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            output.flush()
    except output.OutputError as exc:
        return output.failed(exc)


def _main(argv: Optional[Sequence[str]]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "record":
        from perflsp.record_command import main as record_main

        return record_main(argv[1:])
    if argv and argv[0] in RUNTIME_COMMANDS:
        from perflsp.runtime.cli import main as runtime_main  # torch is imported only here

        return runtime_main(argv)
    args = _parser().parse_args(argv)
    if args.version:
        output.write(f"perflsp {__version__}\n")
        return EXIT_CLEAN
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "rule":
            return _rule(args)
        if args.command == "serve":
            from perflsp.server import main as serve

            return serve(tcp=args.tcp)
    except ConfigError as exc:
        print(f"perflsp: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _parser().print_help()
    return EXIT_USAGE


# --- rule ----------------------------------------------------------------------------------------

def _rule(args: argparse.Namespace) -> int:
    from perflsp.rules.docs import render_removed, render_rule, tier
    from perflsp.rules.registry import all_rules, rule_by_code
    from perflsp.rules.removed import removed_rule

    if args.all or not args.code:
        output.write("".join(f"{rule.code}  {rule.name:<30} {tier(rule):<24} {rule.scope:<4} {rule.summary}\n"
                             for rule in all_rules()))
        return EXIT_CLEAN
    rule, removed = rule_by_code(args.code), removed_rule(args.code)
    if rule is None and removed is None:
        print(f"perflsp: error: no rule {args.code!r}; `perflsp rule --all` lists them", file=sys.stderr)
        return EXIT_USAGE
    # As `ruff rule` does, a removed rule's code gets its removal notice, and success.
    output.write((render_rule(rule) if rule is not None else render_removed(removed)) + "\n")
    return EXIT_CLEAN


# --- check ---------------------------------------------------------------------------------------

def _overrides(args: argparse.Namespace) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key in ("select", "extend_select", "ignore"):
        if getattr(args, key):
            out[key.replace("_", "-")] = getattr(args, key)
    if args.preview is not None:
        out["preview"] = args.preview
    if args.per_file_ignores:
        table: Dict[str, List[str]] = {}
        for item in args.per_file_ignores:
            glob, sep, codes = item.rpartition(":")
            if not sep or not glob:
                raise ConfigError(f"--per-file-ignores expects GLOB:CODES, got {item!r}")
            table.setdefault(glob, []).extend(_codes(codes))
        out["per-file-ignores"] = table
    return out


def _check(args: argparse.Namespace) -> int:
    from perflsp.report import render
    from perflsp.rules import runner

    # A check allocates libcst and ast nodes by the hundred thousand, nearly all freed by their
    # reference counts once their file is done: collecting the youngest generation every 10,000
    # allocations instead of 700 saves a tenth of the run's CPU for 2 MiB more at the peak
    # (Lightning's src/, bench/README.md). Forked workers inherit it.
    gc.set_threshold(10_000)
    overrides = _overrides(args)
    if args.paths == ["-"]:
        return _check_stdin(args, overrides)
    skipped: List[runner.FileResult] = []
    try:
        files = runner.discover(args.paths, overrides, force_exclude=args.force_exclude, skipped=skipped)
    except FileNotFoundError as exc:
        print(f"perflsp: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not args.quiet:
        _warn_about_settings({f.parent for f in files}, overrides)

    modifying = args.fix or args.diff or args.add_noqa
    cache = None if (args.no_cache or modifying) else runner.Cache(Path(args.cache_dir), warn=_warn)
    results = skipped + runner.check_paths(files, overrides, jobs=args.jobs, cache=cache)
    for result in results:
        if result.error:
            print(f"perflsp: {result.path}: {result.error}", file=sys.stderr)

    fixed_count, would_change = 0, False
    if modifying:
        fixed_count, would_change = _modify(results, overrides, args)
    findings = [f for r in results for f in r.findings]
    unsafe_hidden = sum(1 for f in findings if f.fix is not None and f.fix.applicability == "unsafe" and not args.unsafe_fixes)
    if not args.diff:
        summaries = None
        if args.output_format == "sarif":
            from perflsp.rules.registry import all_rules

            summaries = {rule.code: rule.summary for rule in all_rules()}
        text = render(findings, args.output_format, show_fixes=args.show_fixes, statistics=args.statistics,
                      fixed_count=fixed_count, unsafe_hidden=unsafe_hidden, rule_summaries=summaries,
                      sources=_sources(findings) if args.output_format == "text" else None,
                      color=sys.stdout.isatty())
        if text and not (args.quiet and not findings):
            output.write(text if text.endswith("\n") else text + "\n")
        if args.show_refuted:
            from perflsp.record_command import refuted_listing

            output.write(refuted_listing([f for r in results for f in r.refuted]))
    if args.exit_zero:
        return EXIT_CLEAN
    return EXIT_FINDINGS if findings or would_change else EXIT_CLEAN


def _check_stdin(args: argparse.Namespace, overrides: Dict[str, Any]) -> int:
    from perflsp.report import render
    from perflsp.rules import registry, runner
    from perflsp.rules.fixes import fix_text

    name = args.stdin_filename or "-"
    settings_path = Path(name if args.stdin_filename else "stdin.py").absolute()
    settings = runner.file_settings(settings_path, overrides)
    registry.validate(settings)
    if not args.quiet:
        _warn_about_settings({settings_path}, overrides)
    try:
        text, encoding = runner.decode_source(sys.stdin.buffer.read())
        if args.fix:
            new, _, remaining = fix_text(text, name, settings, unsafe=args.unsafe_fixes)
        else:
            findings = runner.check_text(text, name, settings)
    except ValueError as exc:  # not text Python reads, or (named .ipynb) not a notebook
        print(f"perflsp: error: {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.fix:
        # Ruff's convention: the fixed source on stdout, in the encoding it came in; findings on stderr.
        output.write(new.encode(encoding))
        if remaining:
            print(render(remaining, "concise"), file=sys.stderr)
        return EXIT_FINDINGS if remaining and not args.exit_zero else EXIT_CLEAN
    output.write(render(findings, args.output_format, statistics=args.statistics, sources={name: text}))
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_CLEAN


def _warn_about_settings(paths: Iterable[Path], overrides: Dict[str, Any]) -> None:
    """Ruff's warnings about settings that work, but not as written: a selection of preview rules
    only, without preview mode, and codes of removed rules, blamed on the config file or the
    command line that names them."""
    from perflsp.rules.removed import removed_warnings
    from perflsp.rules.runner import file_settings

    files = [file_settings(path) for path in paths]
    written = files + [Settings(source="command line").with_overrides(overrides, "command line")] if overrides else files
    messages = [m for s in written for m in removed_warnings(s)]
    # Only a selection narrower than the catch-all `PFL` can name preview rules alone: the common
    # case skips importing every rule (and libcst), most of a warm check's CPU time.
    merged = [s.with_overrides(overrides, "command line") if overrides else s for s in files]
    merged = [s for s in merged if not s.preview and any(c != "PFL" for c in s.select + s.extend_select)]
    if merged:
        from perflsp.rules.registry import preview_warnings

        messages += [m for s in merged for m in preview_warnings(s)]
    for message in dict.fromkeys(messages):
        _warn(message)


def _warn(message: str) -> None:
    print(f"perflsp: warning: {message}", file=sys.stderr)


def _modify(results, overrides: Dict[str, Any], args: argparse.Namespace):
    """--fix / --diff / --add-noqa on each file with findings; updates `results` in place.

    Returns (number of fixes applied, whether --diff found changes)."""
    from perflsp.rules import runner
    from perflsp.rules.fixes import add_noqa, fix_text

    fixed_count, directives, would_change = 0, 0, False
    for result in results:
        if not result.findings or result.error:
            continue
        path = Path(result.path)
        settings = runner.file_settings(path, overrides)
        old = runner.read_text(path)
        if args.add_noqa:
            if result.path.endswith(".ipynb"):
                print(f"perflsp: {result.path}: --add-noqa does not edit notebooks", file=sys.stderr)
                continue
            (new, added), remaining, fixed = add_noqa(old, result.findings), [], []
        else:
            new, fixed, remaining = fix_text(old, result.path, settings, unsafe=args.unsafe_fixes,
                                             facts_of=result.facts_of)
            added = 0
            if args.show_fixes:
                for finding in fixed:
                    print(f"{result.path}:{finding.start.row}: fixed {finding.code} ({finding.fix.message})", file=sys.stderr)
        if new == old:
            continue
        fixed_count += len(fixed)
        directives += added
        if args.diff:
            would_change = True
            output.write(unified_diff(old, new, result.path))
            continue
        runner.write_text(path, new)
        result.findings = remaining
    if args.add_noqa and not args.diff:
        print(f"Added {directives} noqa directive{'' if directives == 1 else 's'}.", file=sys.stderr)
    return fixed_count, would_change


def _sources(findings) -> Dict[str, str]:
    from perflsp.rules.runner import read_text

    out: Dict[str, str] = {}
    for finding in findings:
        if finding.filename not in out and not finding.filename.endswith(".ipynb"):
            try:
                out[finding.filename] = read_text(Path(finding.filename))
            except (OSError, ValueError):
                pass
    return out


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
