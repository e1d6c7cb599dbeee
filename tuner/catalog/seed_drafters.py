"""The built-in catalog of 2026 block drafters, DFlash and DSpark: ``drafters.yaml``.

P-EAGLE heads are heads (``heads.yaml``). The file names, for each drafter, the public text its
numbers were transcribed from; :mod:`tuner.catalog.entries` reads and validates it once.
"""

from __future__ import annotations

from tuner.catalog.entries import DrafterEntry, drafter_entries

__all__ = ["DRAFTERS", "drafters_for"]

DRAFTERS: tuple[DrafterEntry, ...] = drafter_entries()


def drafters_for(target_id: str) -> tuple[DrafterEntry, ...]:
    """The catalog's block drafters trained for ``target_id`` (case-insensitive)."""
    key = target_id.lower()
    return tuple(d for d in DRAFTERS if key in (t.lower() for t in d.targets))
