"""Draw a random sample of `perflsp check` findings from real repositories, for judging by hand.

Each repository (a bare git dir under `--mirrors`, named OWNER+NAME as `fetch` leaves it) is
extracted at its HEAD commit, checked whole with an empty config above it, and the findings of all
repositories are pooled; `--n` of them are drawn uniformly with `--seed`. The sample is written as
JSON lines with the repository, commit, path, line, rule, message, why the code is hot, and the
surrounding source for the judge; judgements go to a file of the same shape as
`shared/realworld/judged-findings.jsonl` (`verdict`, `reason`), and `--score FILE` prints the
precision of such a file.

    python bench/realworld_sample.py --mirrors DIR --repos OWNER/NAME ... --seed 20261201 --n 60 --out FILE
    python bench/realworld_sample.py --mirrors DIR --repos ... --per-rule 12 --preview --out FILE
    python bench/realworld_sample.py --mirrors DIR --repos ... --rules PFL101 --per-rule 40 --preview --out FILE
    python bench/realworld_sample.py --mirrors DIR --repos ... --per-context 15 --preview --out FILE
    python bench/realworld_sample.py --score bench/realworld/judged-2026-12-01.jsonl
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import random
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CONTEXT_LINES = 12


def extract(git_dir: Path, dest: Path) -> str:
    commit = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    # Python files only: snapshots may lack the blobs of large files (notebooks with outputs)
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", commit, "--", "*.py"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, [m for m in tar.getmembers() if m.isfile()])
    return commit


def findings_of(root: Path, perflsp: str, preview: bool):
    (root / "perflsp.toml").write_text("")  # nothing above the checkout changes the result
    out = subprocess.run([*perflsp.split(), "check", "--no-cache", "--exit-zero", "--output-format", "json", "."]
                         + (["--preview"] if preview else []),
                         cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"perflsp failed on {root}: {out.stderr[-500:]}")
    return json.loads(out.stdout)


def legacy_hot_context(hot: str) -> str:
    """The context of a finding judged before `hot.context` was in the JSON (samples 1 to 10),
    told from its hot message."""
    if not hot:
        return "not-hot"
    if hot.startswith("inside the training loop"):
        return "training-loop"
    if hot.startswith("inside the step loop"):
        return "step-loop"
    if "called from" in hot or "called inside a step loop" in hot or "defined in" in hot:
        return "call-chain"
    if hot.startswith("in `"):
        return "entry-point"
    return "loop-in-per-step-code"


def context(root: Path, path: str, row: int) -> str:
    lines = (root / path).read_text(encoding="utf-8", errors="replace").splitlines()
    start = max(row - CONTEXT_LINES, 1)
    return "\n".join(f"{n:5d}{'>' if n == row else ' '} {lines[n - 1]}"
                     for n in range(start, min(row + CONTEXT_LINES, len(lines)) + 1))


def sample(args) -> int:
    pool = []
    with tempfile.TemporaryDirectory() as tmp:
        for repo in args.repos:
            root = Path(tmp) / repo.replace("/", "+")
            base = Path(args.mirrors) / repo.replace("/", "+")
            git_dir = next(p for p in [base, *sorted(base.glob("*")), *sorted(base.glob("*/.git"))] if (p / "HEAD").is_file())
            try:
                commit = extract(git_dir, root)
            except subprocess.CalledProcessError as exc:  # a snapshot without Python files
                print(f"{repo}: skipped, `git archive` failed: {exc.stderr.decode(errors='replace').strip()}")
                continue
            found = findings_of(root, args.perflsp, args.preview)
            lines = sum(p.read_text(encoding="utf-8", errors="replace").count("\n") for p in root.rglob("*.py"))
            print(f"{repo} @ {commit[:12]}: {len(found)} findings, {lines} lines, {1000 * len(found) / max(lines, 1):.2f}/kLOC")
            for f in found:
                if args.rules and f["code"] not in args.rules:
                    continue
                path = str(Path(f["filename"]).as_posix()).lstrip("./")
                hot = f.get("hot") or {}
                pool.append({"repo": repo, "commit": commit, "path": path, "line": f["location"]["row"], "code": f["code"],
                             "message": f["message"], "hot": hot.get("message"), "hot_context": hot.get("context") or "not-hot",
                             "fix": (f.get("fix") or {}).get("message"), "context": context(root, path, f["location"]["row"])})
    rng = random.Random(args.seed)
    if args.per_rule or args.per_context:  # each stratum's precision needs its own judged findings: up to K of each
        strata = collections.defaultdict(list)
        for record in pool:
            strata[(record["code"], record["hot_context"] if args.per_context else "")].append(record)
        k = args.per_context or args.per_rule
        drawn = [r for key in sorted(strata) for r in rng.sample(strata[key], min(k, len(strata[key])))]
    else:
        drawn = rng.sample(pool, min(args.n, len(pool)))
    with open(args.out, "w") as fh:
        for record in drawn:
            fh.write(json.dumps(record) + "\n")
    print(f"drew {len(drawn)} of {len(pool)} findings with seed {args.seed} into {args.out}")
    print("by rule:", dict(collections.Counter(r["code"] for r in drawn).most_common()))
    print("by rule and context:", dict(collections.Counter(f"{r['code']}/{r['hot_context']}" for r in drawn).most_common()))
    return 0


def score(path: str) -> int:
    judged = [json.loads(line) for line in open(path) if line.strip()]
    counts = collections.Counter(j["verdict"] for j in judged)
    tp, fp = counts["true-positive"], counts["false-positive"]
    print(f"{len(judged)} judged: {dict(counts)}; precision TP/(TP+FP) = {tp / max(tp + fp, 1):.2f}")
    by_rule = collections.defaultdict(collections.Counter)
    for j in judged:
        by_rule[j["code"]][j["verdict"]] += 1
        by_rule[f"{j['code']}/{j.get('hot_context') or legacy_hot_context(j.get('hot') or '')}"][j["verdict"]] += 1
    for key, c in sorted(by_rule.items()):
        tp, fp = c["true-positive"], c["false-positive"]
        print(f"  {key}: {dict(c)}" + (f" precision {tp / (tp + fp):.2f}" if tp + fp else ""))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors")
    parser.add_argument("--repos", nargs="+", default=[])
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--n", type=int, default=60, help="findings drawn uniformly from all repositories")
    parser.add_argument("--per-rule", type=int, default=0, metavar="K", help="instead, up to K findings of each rule")
    parser.add_argument("--per-context", type=int, default=0, metavar="K",
                        help="instead, up to K findings of each (rule, hot context) pair")
    parser.add_argument("--preview", action="store_true", help="check with preview rules on")
    parser.add_argument("--rules", nargs="+", default=[], metavar="CODE", help="draw only findings of these rules")
    parser.add_argument("--out", default="sample.jsonl")
    parser.add_argument("--perflsp", default=f"{sys.executable} -m perflsp")
    parser.add_argument("--score", metavar="FILE", help="print the precision of a judged file")
    args = parser.parse_args()
    return score(args.score) if args.score else sample(args)


if __name__ == "__main__":
    sys.exit(main())
