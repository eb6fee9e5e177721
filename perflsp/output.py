"""The command's output on stdout, and how a command ends when stdout cannot take it."""
from __future__ import annotations

import os
import signal
import sys
from typing import Union

# What a shell reports for a writer that SIGPIPE killed (`git log | head -1`'s git, `cat`): Python
# ignores the signal and gets EPIPE instead, so perflsp exits with the same status. Scripts under
# `set -o pipefail` then see the output was cut short, as they would for git; the rest see nothing.
# Neither 1 (findings remain) nor 2 (a usage error) would be true: the run stopped early.
EXIT_BROKEN_PIPE = 128 + getattr(signal, "SIGPIPE", 13)
EXIT_UNWRITABLE = 2


class OutputError(Exception):
    """stdout refused what the command wrote: its reader went away, or its disk is full."""

    def __init__(self, cause: OSError):
        super().__init__(str(cause))
        self.cause = cause


def write(data: Union[str, bytes]) -> None:
    """Write to stdout now: a failure must surface here, not as the interpreter exits.

    Text is encoded here, as `sys.stdout` would encode it, and written as bytes until all are
    out: when the reader goes away in the middle of a long write, the buffer's `write` returns the
    bytes the pipe took without an error, and `sys.stdout.write` would drop the rest silently."""
    try:
        sys.stdout.flush()  # what `print` left in the buffer goes first
        if isinstance(data, str):
            data = data.encode(sys.stdout.encoding, sys.stdout.errors or "strict")
        left = memoryview(data)
        while left:
            left = left[sys.stdout.buffer.write(left):]
        sys.stdout.buffer.flush()
    except OSError as exc:
        raise OutputError(exc) from exc


def flush() -> None:
    """Flush what `print` left in the buffer (argparse's `--help` and `--version`)."""
    write("")


def failed(exc: OutputError) -> int:
    """End the command: quietly when the reader closed the pipe, else with one line on stderr."""
    # What the buffer still holds would be flushed again as the interpreter exits, and fail again
    # with an "Exception ignored" message: stdout becomes /dev/null first.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    if isinstance(exc.cause, BrokenPipeError):
        return EXIT_BROKEN_PIPE
    print(f"perflsp: error: cannot write the output: {exc.cause.strerror or exc.cause}", file=sys.stderr)
    return EXIT_UNWRITABLE
