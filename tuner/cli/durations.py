"""``--time-budget``'s durations as a user types them."""

from __future__ import annotations

import re

from tuner.config.limits import MAX_SECONDS
from tuner.errors import ConfigError

__all__ = ["parse_duration"]

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in ``2h``, ``90m``, ``1h30m``, ``45s`` or plain seconds (``3600``).

    Raises:
        ConfigError: anything else, a duration that is not positive, or one over a week.
    """
    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    elif re.fullmatch(r"(\d+(\.\d+)?[hms])+", value):
        seconds = sum(
            float(n) * _UNITS[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)([hms])", value)
        )
    else:
        raise ConfigError(f"--time-budget {text!r}: give a duration such as 2h, 90m or 1h30m")
    if seconds <= 0:
        raise ConfigError(f"--time-budget {text!r}: give a duration longer than 0")
    if seconds > MAX_SECONDS:  # a plan of years is a typo, and would not fit in memory
        raise ConfigError(
            f"--time-budget {text!r}: at most {MAX_SECONDS // 3600}h (a week of GPU time); "
            "for longer, run the study again to add to it"
        )
    return seconds
