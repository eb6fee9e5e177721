"""perflsp: a performance linter for PyTorch.

User code imports this package to mark functions, so importing it must stay cheap: the core
uses the standard library only, and the engine, server and runtime are imported on demand.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

__version__ = "0.1.0"
__all__ = ["hot", "profile", "ProfileSpec", "__version__"]

F = TypeVar("F", bound=Callable[..., Any])


class ProfileSpec:
    """What `@perflsp.profile(...)` recorded about a function; read by `perflsp profile`."""

    __slots__ = ("setup", "warmup", "iters")

    def __init__(self, setup: Optional[Callable[[], Any]], warmup: Optional[int], iters: Optional[int]):
        self.setup = setup
        self.warmup = warmup
        self.iters = iters

    def __repr__(self) -> str:
        return f"ProfileSpec(setup={self.setup!r}, warmup={self.warmup!r}, iters={self.iters!r})"


def hot(fn: F) -> F:
    """Mark `fn` as hot code: the static rules treat its body like the body of a loop.

    A static hint only; the function is returned unchanged and costs nothing at run time.
    """
    return fn


def profile(
    fn: Optional[F] = None,
    *,
    setup: Optional[Callable[[], Any]] = None,
    warmup: Optional[int] = None,
    iters: Optional[int] = None,
) -> Any:
    """Mark `fn` for `perflsp profile` (and as hot code for the static rules).

    `setup` returns the call's arguments: a tuple of positional arguments, a dict of keyword
    arguments, or a `(args, kwargs)` pair. Nothing happens at call time unless a profile runs.
    """

    def mark(f: F) -> F:
        f.__perflsp_profile__ = ProfileSpec(setup, warmup, iters)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark
