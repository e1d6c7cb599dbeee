"""The OOM pre-screen errs towards trying, and every start-up moves it, whatever the method."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.catalog.models import load_model
from tuner.config.space import load_space
from tuner.config.trial import ServerConfig, load_draft
from tuner.sim.memory import estimate_memory
from tuner.sim.oom_screen import (
    INSIDE,
    MODEL_ERROR_GIB,
    OUTSIDE,
    OomScreen,
    memory_slacks,
    oom_side,
)
from tuner.sim.twin.fit import slacks

SPACE = load_space(str(Path(__file__).parent / "twin" / "spaces" / "eagle3-8b-4090x1.yaml"))
EAGLE3 = "eagle3:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DRAFT = "meta-llama/Llama-3.2-1B-Instruct"


def _server(method: str, k: int, util: float, mnbt: int = 2048) -> ServerConfig:
    return SPACE.config(SPACE.speculative(method, k), util, mnbt, 0.2).server


def _slacks(server: ServerConfig) -> tuple[float, float]:
    return memory_slacks(
        SPACE.hardware, load_model(server.model), load_draft(server), server, SPACE.version
    )


def test_slacks_agree_with_the_model_where_it_fits_and_go_negative_where_it_does_not() -> None:
    for util in (0.80, 0.88, 0.96):
        server = _server(EAGLE3, 3, util)
        memory = estimate_memory(
            SPACE.hardware, SPACE.target, load_draft(server), server, version=SPACE.version
        )
        found = _slacks(server)
        if memory.fits:
            # The KV side differs by the last block's rounding only.
            assert found == pytest.approx(slacks(memory, server.max_model_len), abs=0.05)
        else:
            assert min(found) < 0
    # Short by x: x GiB less held outside (or inside) the budget would make it start.
    short = _server(DRAFT, 3, 0.80)
    _, inside = _slacks(short)
    assert inside < 0
    relieved = estimate_memory(
        SPACE.hardware,
        SPACE.target,
        load_draft(short),
        short,
        inside_gib=inside - 0.01,
        version=SPACE.version,
    )
    assert relieved.fits


def test_a_config_short_by_less_than_the_models_error_is_launched() -> None:
    screen = OomScreen()
    assert screen.launches((2.0, -0.5 * MODEL_ERROR_GIB))
    assert not screen.launches((2.0, -1.5 * MODEL_ERROR_GIB))
    assert "more than its error" in screen.why_skipped((2.0, -1.5 * MODEL_ERROR_GIB))


def test_an_oom_moves_the_boundary_for_every_method() -> None:
    screen = OomScreen()
    head = _server(EAGLE3, 3, 0.94)
    screen.record(_slacks(head), oom=True)
    # The 1B draft at the same utilization has as little to spare outside vLLM's budget and
    # less inside (its own KV cache): skipped. At a lower utilization it has more outside.
    draft = _server(DRAFT, 3, 0.94)
    assert _slacks(draft)[1] <= _slacks(head)[1]
    assert not screen.launches(_slacks(draft))
    assert "a start-up in this study" in screen.why_skipped(_slacks(draft))
    assert screen.launches(_slacks(_server(DRAFT, 3, 0.90)))
    assert screen.launches(_slacks(_server("none", 0, 0.90)))


def test_contradicted_evidence_is_read_towards_trying() -> None:
    screen = OomScreen()
    screen.record((1.0, 3.0), oom=True)
    assert not screen.launches((0.9, 2.0))
    screen.record((0.8, 2.0), oom=False)  # ran with less to spare: the OOM was bad luck
    assert screen.launches((0.9, 2.0))


def test_the_side_of_the_budget_comes_from_vllms_message() -> None:
    outside = _server("none", 0, 0.96)
    free = estimate_memory(SPACE.hardware, SPACE.target, None, outside, 2.0, version=SPACE.version)
    assert not free.fits and oom_side(free.reason) == OUTSIDE
    kv = _server(DRAFT, 3, 0.80)
    short = estimate_memory(SPACE.hardware, SPACE.target, load_draft(kv), kv, version=SPACE.version)
    assert not short.fits and oom_side(short.reason) == INSIDE
    assert oom_side("torch.OutOfMemoryError: CUDA out of memory.") is None
