"""Whether a name the user gave is a file here: the catalog reads a local model's config.json
by it, and the schema above it asks the same question of prompt files and folders."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["is_file"]


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (``~`` expanded) names a file; a name no file can have is no file.

    Python 3.11's ``Path.is_file`` raises on a name too long for the file system (a pasted
    paragraph as a model id): it is no file, and the schema then says what is wrong with it.
    """
    try:
        return Path(path).expanduser().is_file()
    except OSError:
        return False
