"""Is the code at a position hot, and why: the engine's view of the project's per-step model.

The innermost region around a position decides first: a step loop makes it hot, a lazy-init or
periodic block makes it rare (not reported). Otherwise the function's own status from the project
graph decides; a plain loop inside a per-step function is named in the reason, a loop in code not
known to run per step does not make it hot. Test files are never hot.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from perflsp.rules import summary as S
from perflsp.config import Settings
from perflsp.rules.project import COLD, SCRIPT_REASON, STEP, single_file_facts

Position = Tuple[int, int]

# The kind of evidence that makes code hot: rules are stable (on by default) per context, each
# measured on unseen real code judged by hand (`Rule.stable_contexts`).
TRAINING_LOOP = "training-loop"  # the body of a step loop that calls `backward()`
STEP_LOOP = "step-loop"  # the body of another step loop (data, evaluation, decoding)
ENTRY_POINT = "entry-point"  # an entry point's own code: a `forward`, a marked or measured function
CALL_CHAIN = "call-chain"  # a function reached through calls from per-step code
NESTED_LOOP = "loop-in-per-step-code"  # a loop or comprehension inside per-step code
CONTEXTS = (TRAINING_LOOP, STEP_LOOP, ENTRY_POINT, CALL_CHAIN, NESTED_LOOP)
_DIRECT = frozenset({TRAINING_LOOP, STEP_LOOP, ENTRY_POINT})


class Hot(NamedTuple):
    message: str  # "inside `for batch in loader` at line 4", "in `Net.forward`, which ..."
    row: int  # the line that makes it hot: a loop header or a def
    context: str  # one of CONTEXTS

    @property
    def direct(self) -> bool:
        """In a step loop's body or an entry point's own code (a `forward`, a measured function),
        not in a function reached through calls or in a loop nested in per-step code: the strongest
        evidence, which the sync rules need when nothing shows the tensor is on the accelerator."""
        return self.context in _DIRECT


COLD_CODE = "cold"


class HotMap:
    def __init__(self, facts: Dict[str, Any], lines: List[str], line_label: Callable[[int], str]):
        summary = facts["summary"]
        self.test = summary["test"]
        self.module = summary["module"]
        self.status: Dict[str, list] = facts["functions"]  # key -> [STEP, why, call row or None] | [COLD, why]
        self.functions = sorted(summary["functions"], key=lambda f: (f["start"], -f["end"]))
        self._starts = [f["start"] for f in self.functions]
        self._by_key = {f["key"]: f for f in self.functions}
        self.regions: Dict[str, List[list]] = {}
        for region in summary["regions"]:
            self.regions.setdefault(region[6], []).append(region)
        self.lines = lines
        self.statement_rows: Optional[List[int]] = summary["statement_rows"]  # where positions start
        self.line_label = line_label
        self._per_step: Optional[set] = None  # labels of per-step functions and their dotted tails
        # Nothing in the file can be hot without a step loop or a per-step function in it.
        self.may_be_hot = not self.test and (any(r[0] == S.STEP_LOOP for r in summary["regions"])
                                             or any(state[0] == STEP for state in self.status.values()))
        self.has_training_loop = not self.test and any(r[0] == S.STEP_LOOP and r[8] for r in summary["regions"])

    @classmethod
    def for_source(cls, source: str, path: str, settings: Settings, line_label: Callable[[int], str]) -> "HotMap":
        """The map of a file judged alone (stdin, an editor buffer with no project graph, a test)."""
        return cls(single_file_facts(source, path, settings.hot_functions, line_label), S.source_lines(source), line_label)

    def is_one_off(self, position: Position) -> bool:
        """In tests, or in a function (or a closure of one) named for one-off work such as dataset
        processing or debugging output: even what such code sets up does not run per step."""
        if self.test:
            return True
        function = self._function_at(position[0])
        while function is not None:
            if S.is_one_off(function["name"]) and self.status.get(function["key"], ("",))[0] != STEP:
                return True
            function = self._by_key.get(function["parent"] or "")
        return False

    def classify(self, position: Position):
        """A `Hot`, COLD_CODE, or None (no evidence either way)."""
        if self.test:
            return COLD_CODE
        function = self._function_at(position[0])
        owner = function["key"] if function else f"{self.module}.{S.MODULE_LEVEL}"
        state = self.status.get(owner)
        loop = None
        for region in self._regions_at(owner, position):
            kind = region[0]
            if kind == S.STEP_LOOP:
                if state and state[0] == COLD and (function is not None and function["cold"] or state[1] != SCRIPT_REASON):
                    # a loop over data in `process()`, or an evaluation run every N steps, is not a step
                    return COLD_CODE
                loop_kind = "training loop" if region[8] else "step loop"
                return Hot(f"inside the {loop_kind} `{self._header(region[5])}` at {self.line_label(region[5])}",
                           region[5], TRAINING_LOOP if region[8] else STEP_LOOP)
            if kind in S.RARE_REGIONS:
                return COLD_CODE
            loop = loop or region
        if state is not None and state[0] == COLD:
            return COLD_CODE
        where = ""
        if loop is not None:
            where = (f"inside a comprehension at {self.line_label(loop[5])}" if loop[0] == S.COMPREHENSION
                     else f"inside `{self._header(loop[5])}` at {self.line_label(loop[5])}")
        if state is not None and state[0] == STEP and function is not None:
            in_function = f"in `{self._label(function['key'])}`, {state[1]}"
            context = NESTED_LOOP if loop is not None else ENTRY_POINT if state[3] else CALL_CHAIN
            return Hot(f"{where} {in_function}" if where else in_function, loop[5] if loop else state[2] or function["row"],
                       context)
        # A loop in code not known to run per step is not hot: on real code such findings were
        # right 3 times in 36 (setup helpers, offline tools, loops over a handful of items).
        return None

    def function_runs_per_step(self, name: str, class_name: Optional[str]) -> bool:
        """For rules that judge a whole function (`Class.method` or a plain function's name)."""
        if self.test:
            return False
        if self._per_step is None:  # asked for every function: one set instead of a scan each time
            labels = [self._label(key).split(".") for key, state in self.status.items() if state[0] == STEP]
            self._per_step = {".".join(parts[i:]) for parts in labels for i in range(len(parts))}
        return (f"{class_name}.{name}" if class_name else name) in self._per_step

    def _function_at(self, row: int) -> Optional[Dict[str, Any]]:
        index = bisect_right(self._starts, row)
        for function in reversed(self.functions[:index]):  # the latest def that holds `row` is the innermost
            if function["end"] >= row:
                return function
        return None

    def _regions_at(self, owner: str, position: Position) -> List[list]:
        """Regions of `owner` holding the position, innermost first."""
        holding = [r for r in self.regions.get(owner, ()) if (r[1], r[2]) <= position <= (r[3], r[4])
                   and not (r[7] and (r[7][0], r[7][1]) <= position <= (r[7][2], r[7][3]))]
        holding.sort(key=lambda r: (r[1], r[2]), reverse=True)
        return holding

    def _label(self, key: str) -> str:
        return key[len(self.module) + 1:] if key.startswith(self.module + ".") else key

    def _header(self, row: int) -> str:
        text = self.lines[row - 1].strip() if 0 < row <= len(self.lines) else ""
        text = text.split("  #", 1)[0].rstrip()
        text = text[:-1] if text.endswith(":") else text
        return text if len(text) <= 60 else text[:59] + "…"
