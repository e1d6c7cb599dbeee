"""README's commands as a user copies them: the ``bash`` block after a ``user-path`` tag.

A block is marked in README.md with an HTML comment on the line before it,
``<!-- user-path: NAME ... -->``; its commands are its lines without their ``#`` comments.
Changing a marked command in README changes what the tier runs; removing the tag fails it.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["README", "tagged_block"]

README = Path(__file__).resolve().parents[2] / "README.md"


def tagged_block(name: str, readme: str | None = None) -> list[str]:
    """The command lines of README's block tagged ``name``, comments and blank lines dropped."""
    text = README.read_text() if readme is None else readme
    found = re.search(
        rf"<!-- user-path: {re.escape(name)}\b[^>]*-->\n```bash\n(.*?)```", text, re.S
    )
    assert found is not None, f"README.md has no ```bash block tagged <!-- user-path: {name} -->"
    # A comment starts at a `#` after a blank (the blocks quote no `#`); bash runs the rest.
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in found.group(1).splitlines())
    return [line for line in lines if line]
