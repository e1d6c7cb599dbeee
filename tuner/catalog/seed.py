"""The built-in model catalog: ``models.yaml``, the ``config.json`` of models people serve.

The data and where each number comes from are in that file (its header says what each key
means); :mod:`tuner.catalog.entries` reads and validates it once. The same reader that reads a
downloaded ``config.json`` turns each entry into a :class:`~tuner.catalog.models.ModelSpec`.
"""

from __future__ import annotations

from tuner.catalog.entries import ModelEntry, model_entries

__all__ = ["SEED", "SeedEntry"]

SeedEntry = ModelEntry
"""One catalog model (the name this module has always given it)."""

SEED: tuple[ModelEntry, ...] = model_entries()
