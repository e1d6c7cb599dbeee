"""A misspelt flag or command as one line: what was wrong, the closest valid name, where help is.

Click's own report is a usage line, a hint and a boxed message (five lines and a frame); a typo
is bad input like any other, so it gets the one line the rest of spectune's errors get.

Typer vendors click (``typer._click``, private) and exports only ``BadParameter`` of its errors,
so the usage error class is found as ``BadParameter``'s base, and an unknown option by the
attributes only click's ``NoSuchOption`` carries.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

import typer

__all__ = ["UsageError", "usage_line"]

UsageError: type[Exception] = next(
    cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError"
)
"""What click raises for any bad command line: an unknown option or command, a missing or
extra argument, a value it cannot convert (``BadParameter``)."""

# difflib's default: "--trails" finds "--trials", "--zzz" finds nothing rather than a guess.
_CLOSE_ENOUGH = 0.6


def usage_line(exc: Any) -> str:
    """The one line for a usage error: it names the input, the closest valid one and ``--help``.

    Args:
        exc: a :data:`UsageError` (typed loosely: its class is typer's private click's).
    """
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "spectune"
    see = f"(see {where} --help)"
    option = getattr(exc, "option_name", None)
    if isinstance(option, str) and hasattr(exc, "possibilities"):  # NoSuchOption
        valid = _option_names(ctx.command.params) if ctx is not None else []
        return f"{where} has no option {option}{_closest(option, valid)} {see}"
    message = " ".join(str(exc.format_message()).split())  # click may wrap a long message
    return f"{where}: {message} {see}"


def _closest(name: str, valid: Iterable[str]) -> str:
    match = difflib.get_close_matches(name, list(valid), n=1, cutoff=_CLOSE_ENOUGH)
    return f"; did you mean {match[0]}?" if match else ""


def _option_names(params: Iterable[Any]) -> list[str]:
    names: list[str] = []
    for param in params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            names += [*param.opts, *param.secondary_opts]
    return names
