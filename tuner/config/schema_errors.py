"""One line for the first problem pydantic found in a search space: key path, value, fix."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["A_RANGE", "GPU_NAME", "GPU_SPEC", "ONE_RATE", "ONE_VALUE", "RATE_STEPS", "one_line"]

# The union branch a value took; dropped from key paths, which name what the user wrote.
ONE_VALUE, A_RANGE = "one value", "a range"
ONE_RATE, RATE_STEPS = "one rate", "rate steps"  # workload.request_rate: a rate or goodput's steps
GPU_NAME, GPU_SPEC = "a GPU name", "a GPU description"  # hardware: 4090x2, or {gpu: {...}}
_BRANCHES = (ONE_VALUE, A_RANGE, ONE_RATE, RATE_STEPS, GPU_NAME, GPU_SPEC)


_SHOWN = 80
"""Characters of a value an error line repeats: enough to find it, never a pasted page."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}... ({len(text)} characters)"


def one_line(exc: ValidationError, prefix: tuple[str, ...] = ()) -> str:
    """The first problem of ``exc`` as one line; a count of any others follows it."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = prefix + tuple(str(part) for part in first["loc"] if part not in _BRANCHES)
    path = "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in loc).lstrip(".")
    ctx = first.get("ctx") or {}
    kind = first["type"]
    if kind == "unknown_key":
        key = ".".join((*loc, ctx["key"]))
        hint = (
            f"did you mean '{'.'.join((*loc, ctx['near']))}'?"
            if ctx["near"]
            else ("known keys: " + ", ".join(ctx["known"]))
        )
        line = f"unknown key '{key}'; {hint}"
    elif kind == "missing_key":
        line = f"'{'.'.join((*loc, ctx['key']))}' must be set (e.g. {ctx['key']}: {ctx['example']})"
    elif not path:
        line = f"{first['msg']} (see search_spaces/default.yaml for the layout)"
    else:
        hints = {ONE_VALUE: " or a range {low: .., high: ..}", ONE_RATE: " or a list of rates"}
        either = next((text for tag, text in hints.items() if tag in first["loc"]), "")
        line = f"{path} = {_shown(first['input'])}: {first['msg']}{either}"
    more = len(errors) - 1
    return line + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
