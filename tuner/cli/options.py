"""Typer option aliases shared between commands, so a flag means the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["Hardware", "Json", "Storage", "StudiesDir", "StudyName"]

Hardware = Annotated[
    str | None,
    typer.Option("--hardware", help="GPUs as GPU[xCOUNT], e.g. 4090x2 (tensor-parallel = COUNT)."),
]
StudyName = Annotated[
    str | None, typer.Option("--study", help="Study name; an existing study is resumed.")
]
Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Database URL (default sqlite:///STUDIES_DIR/STUDY.db).",
        envvar="SPECTUNE_STORAGE",
    ),
]
StudiesDir = Annotated[
    Path, typer.Option("--studies-dir", help="Where databases, logs and exports go.")
]
Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
