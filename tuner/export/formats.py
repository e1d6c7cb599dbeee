"""The formats ``spectune export`` writes (:mod:`tuner.export.vllm`), apart from the code that
writes them: the command line declares ``--format`` from these without importing Optuna."""

from __future__ import annotations

__all__ = ["FORMATS"]

FORMATS = ("vllm", "compose", "docker-run", "kubernetes", "json")
