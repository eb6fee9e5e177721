"""The `Finding` model shared by the engine, the CLI renderers, the cache and the server.

Positions follow libcst: `row` is 1-based, `column` is 0-based and counts code points. Renderers
convert (Ruff's JSON uses 1-based columns, LSP uses 0-based UTF-16 units).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

SEVERITIES = ("error", "warning", "info", "hint")
APPLICABILITIES = ("safe", "unsafe")


def rule_url(code: str, template: Optional[str]) -> Optional[str]:
    """The rule's page at the address the `rule-docs-url` setting gives (`{code}` filled in), or
    None: perflsp has no published site, and `perflsp rule CODE` prints the page where it runs."""
    return template.format(code=code) if template else None


@dataclass(frozen=True, order=True)
class Location:
    row: int
    column: int

    def to_dict(self) -> Dict[str, int]:
        return {"row": self.row, "column": self.column}

    @classmethod
    def from_dict(cls, d: Dict[str, int]) -> "Location":
        return cls(d["row"], d["column"])


@dataclass(frozen=True)
class Edit:
    """Replace the text between `start` and `end` with `content`."""

    start: Location
    end: Location
    content: str

    def to_dict(self) -> Dict[str, Any]:
        return {"location": self.start.to_dict(), "end_location": self.end.to_dict(), "content": self.content}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Edit":
        return cls(Location.from_dict(d["location"]), Location.from_dict(d["end_location"]), d["content"])


@dataclass(frozen=True)
class Fix:
    applicability: str  # "safe" | "unsafe"
    message: str
    edits: Tuple[Edit, ...]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "applicability": self.applicability,
            "message": self.message,
            "edits": [e.to_dict() for e in self.edits],
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Fix":
        return cls(d["applicability"], d["message"], tuple(Edit.from_dict(e) for e in d["edits"]))


@dataclass(frozen=True)
class HotContext:
    """Why the flagged code is hot: the loop or function that makes it run many times."""

    message: str  # e.g. "inside `for batch in loader` at line 40"
    start: Location
    end: Location
    cell: Optional[int] = None  # the notebook cell holding the loop or def (notebooks only)
    context: Optional[str] = None  # the kind of evidence: one of perflsp.rules.hotness.CONTEXTS

    def to_dict(self) -> Dict[str, Any]:
        return {"message": self.message, "location": self.start.to_dict(), "end_location": self.end.to_dict(),
                "cell": self.cell, "context": self.context}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "HotContext":
        return cls(d["message"], Location.from_dict(d["location"]), Location.from_dict(d["end_location"]), d.get("cell"),
                   d.get("context"))


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    filename: str
    start: Location
    end: Location
    severity: str = "warning"
    hot: Optional[HotContext] = None
    fix: Optional[Fix] = None
    cell: Optional[int] = None  # 1-based notebook cell; rows are then relative to the cell
    url: Optional[str] = field(default=None, compare=False)

    def sort_key(self) -> Tuple[Any, ...]:
        return (self.filename, self.cell or 0, self.start, self.code)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "filename": self.filename,
            "location": self.start.to_dict(),
            "end_location": self.end.to_dict(),
            "severity": self.severity,
            "hot": self.hot.to_dict() if self.hot else None,
            "fix": self.fix.to_dict() if self.fix else None,
            "cell": self.cell,
            "url": self.url,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Finding":
        return cls(
            code=d["code"],
            name=d["name"],
            message=d["message"],
            filename=d["filename"],
            start=Location.from_dict(d["location"]),
            end=Location.from_dict(d["end_location"]),
            severity=d["severity"],
            hot=HotContext.from_dict(d["hot"]) if d.get("hot") else None,
            fix=Fix.from_dict(d["fix"]) if d.get("fix") else None,
            cell=d.get("cell"),
            url=d.get("url"),
        )
