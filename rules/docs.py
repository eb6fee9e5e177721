"""Rule pages generated from the rules' own declarations (Ruff's five headings).

`python -m perflsp.rules.docs docs/rules` rewrites the pages; a test fails when they drift.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List, Tuple, Type

from perflsp.rules.hotness import CALL_CHAIN, CONTEXTS, ENTRY_POINT, NESTED_LOOP, STEP_LOOP, TRAINING_LOOP
from perflsp.rules.precedence import OUTRANKS
from perflsp.rules.registry import all_rules
from perflsp.rules.removed import REMOVED, Removed
from perflsp.rules.rule import Rule

_SCOPE = {
    "hot": "Reported in per-step code only (see \"Hot code\" in docs/configuration.md: step loops, "
           "framework entry points such as `forward` and `training_step`, what they call across the "
           "project, loops in code not known to run once, and the `hot-functions` list); "
           "`report-cold` extends it to all code.",
    "any": "Reported wherever the code is not known to run once or rarely (setup such as `__init__`, "
           "lazy-init and periodic blocks, and tests are skipped): the cost is paid on every execution.",
    "setup": "Reported anywhere but in tests: the code runs once, but what it sets up costs on every step.",
}
_SAFETY = {
    None: "This rule has no automatic fix.",
    "safe": "The fix is safe: it keeps the program's behaviour and is applied by `perflsp check --fix`.",
    "unsafe": "The fix is unsafe: it can change behaviour in edge cases (see *Why is this bad?*), so it is "
              "applied only with `--fix --unsafe-fixes` and shown as unsafe in the editor.",
    "safe/unsafe": "The fix is safe in some cases and unsafe in others (see *Why is this bad?*); unsafe ones "
                   "need `--unsafe-fixes`.",
}


_PREVIEW_MODE = ("Preview rules run only in preview mode: `preview = true` in `[tool.perflsp]`, "
                 "`perflsp check --preview`, or the editor setting `perflsp.preview`.")


# Where a finding's code is hot, in words, for each context of `perflsp.rules.hotness.CONTEXTS`.
_CONTEXT_WORDS = {
    TRAINING_LOOP: ("training loops", "the body of a training loop, a step loop that calls `backward()`"),
    STEP_LOOP: ("step loops", "the body of another step loop (data, evaluation, decoding)"),
    ENTRY_POINT: ("entry points", "an entry point's own code (a `forward`, a marked or measured function)"),
    CALL_CHAIN: ("call chains", "a function called from per-step code"),
    NESTED_LOOP: ("nested loops", "a loop nested in per-step code"),
}


def _contexts(rule: Type[Rule], long: bool) -> str:
    words = [_CONTEXT_WORDS[c][1 if long else 0] for c in CONTEXTS if c in rule.stable_contexts]
    return "; ".join(words) if long else " and ".join(words)


_EXAMPLES_RUN = ("Each page's *Example* and *Use instead* run in perflsp's tests "
                 "(tests/rules/test_example_pages.py): under real torch on the CPU, `device` standing for a "
                 "GPU (`torch.device(\"cuda\")`), called with the inputs the rule module's `example_run` "
                 "gives them, and failing where they would mix host and GPU tensors.")


def tier(rule: Type[Rule]) -> str:
    if rule.preview:
        return "preview"
    return f"stable in {_contexts(rule, long=False)}" if rule.stable_contexts else "stable"


def _tier_line(rule: Type[Rule]) -> str:
    if rule.measured:
        return (f"Tier: stable (on by default), from a recorded run only (`perflsp record`, see "
                f"[evidence-json.md](../evidence-json.md)). {rule.tier_reason}")
    if rule.preview:
        return f"Tier: preview. {rule.tier_reason} {_PREVIEW_MODE}"
    if rule.stable_contexts:
        return (f"Tier: stable (on by default) in {_contexts(rule, long=True)}; elsewhere in per-step code, "
                f"preview. {rule.tier_reason} {_PREVIEW_MODE}")
    return f"Tier: stable (on by default). {rule.tier_reason}"


def example_pair(rule: Type[Rule]) -> Tuple[str, str]:
    """The page's *Example* (the first flagged example) and *Use instead* (its fixed code, or the
    first clean example)."""
    bad = rule.invalid[0]
    return bad.code, bad.fixed or rule.valid[0]


def render_rule(rule: Type[Rule]) -> str:
    flagged, instead = example_pair(rule)
    lines = [
        f"# {rule.code} {rule.name}",
        "",
        _tier_line(rule),
        "",
        f"Scope: {_SCOPE[rule.scope]}",
        "",
        "## What it does",
        "",
        rule.summary[0].upper() + rule.summary[1:] + ".",
        "",
        "## Why is this bad?",
        "",
        rule.why,
        "",
        "## Example",
        "",
        "```python",
        flagged.rstrip("\n"),
        "```",
        "",
        "## Use instead",
        "",
        rule.how_to_fix,
        "",
        "```python",
        instead.rstrip("\n"),
        "```",
        "",
        "## Fix safety",
        "",
        _SAFETY[rule.fix_safety],
        "",
    ]
    if rule.options:
        lines += ["## Options", ""]
        for name, option in rule.options.items():
            lines.append(f"- `{name}` (default `{option.default!r}`): {option.description}")
            lines.append(f"  Set it in `[tool.perflsp.rules.{rule.code}]`.")
        lines.append("")
    lines += ["## Suppression", "", f"`# noqa: {rule.code}` or `# perflsp: ignore[{rule.code}]` on the line.", ""]
    return "\n".join(lines)


_REMOVED_CODES = ("Configuration that names a removed rule's code is accepted, with a warning that it has no "
                  "effect; a `# noqa` comment that names it does no harm (no finding has the code). The code is "
                  "never given to another rule.")


def render_removed(removed: Removed) -> str:
    """What `perflsp rule` says of a removed rule's code."""
    return "\n".join([f"# {removed.code} {removed.name}", "", f"Removed in {removed.removed_in} because {removed.why}.",
                      "", _REMOVED_CODES, ""])


def render_index() -> str:
    lines = ["# Rules", "", "Generated from the rule modules; do not edit by hand.", "", _PREVIEW_MODE, "",
             _EXAMPLES_RUN, "",
             "| code | name | tier | scope | fix | what it flags |", "| --- | --- | --- | --- | --- | --- |"]
    for rule in all_rules():
        fix = rule.fix_safety or ""
        lines.append(f"| [{rule.code}]({rule.code}.md) | {rule.name} | {tier(rule)} | {rule.scope} | {fix} | {rule.summary} |")
    lines += ["", *_precedence_section(), "", *_removed_section()]
    return "\n".join(lines) + "\n"


def _removed_section() -> List[str]:
    lines = ["## Removed rules", "", _REMOVED_CODES, "", "| code | name | removed in | why |", "| --- | --- | --- | --- |"]
    return lines + [f"| {r.code} | {r.name} | {r.removed_in} | {r.why[0].upper() + r.why[1:]} |" for r in REMOVED]


def _precedence_section() -> List[str]:
    lines = [
        "## One cost, one finding",
        "",
        "Where two rules describe the same cost on the same expression (the same span, or one inside "
        "the other), only the more specific one reports. The winner runs even when it is not selected, "
        "and the loser's finding is dropped before `select`, `ignore`, `per-file-ignores` and "
        "suppression comments apply: ignoring or silencing the winner silences that cost and does not "
        "bring the loser back. A preview rule wins only in preview mode, the only mode it runs in.",
        "",
        "| wins | over | where both fire | why |",
        "| --- | --- | --- | --- |",
    ]
    for entry in OUTRANKS:
        lines.append(f"| [{entry.winner}]({entry.winner}.md) | [{entry.loser}]({entry.loser}.md) | {entry.example} | {entry.why} |")
    return lines


def pages() -> Dict[str, str]:
    out = {f"{rule.code}.md": render_rule(rule) for rule in all_rules()}
    out["README.md"] = render_index()
    return out


def main(argv=None) -> int:
    target = Path((argv or sys.argv[1:] or ["docs/rules"])[0])
    target.mkdir(parents=True, exist_ok=True)
    wanted = pages()
    for stale in target.glob("PFL*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for name, text in wanted.items():
        (target / name).write_text(text)
    print(f"wrote {len(wanted)} pages to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
