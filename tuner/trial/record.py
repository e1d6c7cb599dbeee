"""What a study stores, written and read in this one module.

Study attributes: the search space (``space``) and the kind of numbers it holds (``source``).
"""

from __future__ import annotations

import optuna

from tuner.config.space import SearchSpace, space_from_dict

__all__ = ["SOURCE_ATTR", "SPACE_ATTR", "stored_space"]

SPACE_ATTR = "space"
SOURCE_ATTR = "source"


def stored_space(study: optuna.Study) -> SearchSpace | None:
    """The search space the study was created with; None for a study spectune did not create."""
    raw = study.user_attrs.get(SPACE_ATTR)
    return None if raw is None else space_from_dict(raw, origin=f"study {study.study_name}")
