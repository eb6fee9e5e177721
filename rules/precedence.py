"""One cost, one finding: where two rules describe the same cost on the same expression, only the
more specific one reports.

`OUTRANKS` says which rule wins over which, and why. The engine runs the enabled rules and also
the winners over them, enabled or not, and drops a loser's finding when a winner's finding covers
the same expression (the same span, or one inside the other). This happens before selection
(`select`, `ignore`, `per-file-ignores`) and suppression comments are applied, so silencing the
winner (`--ignore PFL403`, `# noqa: PFL403`) silences that cost and never brings the loser back
on the same expression. A preview rule outranks others only in preview mode, the only mode it
runs in.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, NamedTuple, Set

from perflsp.findings import Finding


class Outranks(NamedTuple):
    winner: str
    loser: str
    example: str  # where both fire
    why: str  # why the winner's finding is the one to keep


OUTRANKS = (
    Outranks("PFL402", "PFL106", "`torch.zeros(n).to(device)` in a loop",
             "creating the tensor on the device removes the copy that `non_blocking=True` would only overlap"),
    Outranks("PFL403", "PFL106", "`weights.to(device)` in a loop that never changes `weights`",
             "moving the tensor once before the loop removes the copy that `non_blocking=True` would only overlap"),
    Outranks("PFL107", "PFL401", "`torch.tensor([0.5, 2.0], device=device)` in a loop",
             "both ask to create the tensor once before the loop; PFL107 also names the blocking copy to the device"),
    Outranks("PFL701", "PFL101", "`.item()` in the `forward` of a module passed to `torch.compile`",
             "under torch.compile the call also breaks the graph, the bigger cost; keeping the value a tensor "
             "removes both"),
    Outranks("PFL702", "PFL103", "`if loss > 0:` in a function passed to `torch.compile`",
             "under torch.compile the branch also breaks the graph, the bigger cost; `torch.where` removes both"),
)


def winners_over(codes: Iterable[str]) -> Set[str]:
    """The rules whose findings can silence a finding of one of `codes`."""
    wanted = set(codes)
    return {entry.winner for entry in OUTRANKS if entry.loser in wanted}


def drop_outranked(findings: List[Finding]) -> List[Finding]:
    """`findings` (of one file) without those that a winner's finding on the same expression outranks."""
    winners: Dict[str, List[str]] = {}
    for entry in OUTRANKS:
        winners.setdefault(entry.loser, []).append(entry.winner)
    by_code: Dict[str, List[Finding]] = {}
    for finding in findings:
        by_code.setdefault(finding.code, []).append(finding)
    return [f for f in findings
            if not any(_same_expression(f, w) for code in winners.get(f.code, ()) for w in by_code.get(code, ()))]


def _same_expression(a: Finding, b: Finding) -> bool:
    """One span inside the other: the same node, or a node and one of its parts."""
    return a.start <= b.start and b.end <= a.end or b.start <= a.start and a.end <= b.end
