"""`.perflsp/evidence.json`: what a short recorded run (`perflsp record`) saw on each line.

The contract between the runtime, which writes the file at the end of `perflsp record`, and the
static engine, which reads it (`perflsp.rules.evidence`). Standard library only: both sides
import it. The format is documented in `docs/evidence-json.md`.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

EVIDENCE_VERSION = 1
EVIDENCE_FILE = Path(".perflsp") / "evidence.json"

STEP_SOURCES = ("optimizer.step", "function")

# What a run counts as reading a tensor on the host, by the name of the call that did it. On an
# accelerator each one waits for the device to finish the work queued before it.
HOST_READ_KINDS = ("item", "tolist", "numpy", "cpu", "to-host", "bool", "int", "float", "index", "format",
                   "equal", "data-dependent-shape")


def evidence_path(workspace: os.PathLike | str) -> Path:
    return Path(workspace) / EVIDENCE_FILE


def line_hash(text: str) -> str:
    """The fingerprint of a source line as recorded: evidence applies to a line only while its
    text (leading and trailing blanks aside) is the one that ran."""
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()[:16]
