"""The held-out world that contradicts the prior (benchmarks/worlds.py, "favourite accepts
less"): the drafter the prior ranks first accepts far less there, and no other drafter does,
so the config the warm start queues first is a median config of that world, not its best."""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.catalog.models import load_model
from tuner.config.trial import SpecMethod, SpeculativeConfig

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from search_efficiency import SPACE_FILE, favourite_standing
from truth import world_truth
from worlds import SHIPPED, WORLDS, World

FAVOURITE = next(w for w in WORLDS if w.name == "favourite accepts less")
TARGET = load_model("Qwen/Qwen2.5-32B-Instruct-AWQ")


def _rates(world: World, draft: str) -> tuple[float, ...]:
    speculative = SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, draft)
    return world.position_rates(
        TARGET, load_model(draft), SpecMethod.DRAFT_MODEL, "code", 0.0, 4, speculative=speculative
    )


def test_only_the_named_drafter_accepts_less() -> None:
    favourite = _rates(FAVOURITE, "Qwen/Qwen2.5-0.5B-Instruct")
    shipped = _rates(SHIPPED, "Qwen/Qwen2.5-0.5B-Instruct")
    assert all(low < high - 0.1 for low, high in zip(favourite, shipped, strict=True))
    other = "Qwen/Qwen2.5-1.5B-Instruct"
    assert _rates(FAVOURITE, other) == _rates(SHIPPED, other)


def test_the_prior_s_favourite_is_a_median_config_there() -> None:
    _, truth = world_truth((str(SPACE_FILE), FAVOURITE))
    share, beats = favourite_standing(str(SPACE_FILE), FAVOURITE, truth)
    assert share < 0.75  # a quarter or more below the optimum
    assert 0.35 < beats < 0.65  # in the middle of the configs that start
    _, shipped = world_truth((str(SPACE_FILE), SHIPPED))
    assert favourite_standing(str(SPACE_FILE), SHIPPED, shipped)[0] > 0.99  # where it is right
