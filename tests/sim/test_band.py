"""The error band every prediction carries, and `spectune estimate` speaking every method."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tuner import serde
from tuner.catalog.gpus import MemoryKind, parse_hardware
from tuner.cli import app
from tuner.config.space import load_space, space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import Verification
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError
from tuner.search.plan import Confirmation, plan_study
from tuner.sim.band import (
    SPEED_KINDS,
    Band,
    FigureError,
    Load,
    MethodFamily,
    Regime,
    Scope,
    error_band,
    load_errors,
    regime_of,
    widest,
)
from tuner.sim.estimate import SettingValue, estimate

runner = CliRunner()
H100 = parse_hardware("h100")
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
ONE = WorkloadSpec("chat", 256, 128, (1,), 4)


def _errors(regime: Regime, held_out: list[float], prefix: str = "s") -> list[FigureError]:
    return [
        FigureError(f"{prefix}{i}", f"{prefix}{i}", "tok_s", regime, e, e)
        for i, e in enumerate(held_out)
    ]


def test_a_regime_of_six_sources_or_more_is_banded_by_its_own_figures() -> None:
    regime = Regime(MemoryKind.HBM, MethodFamily.NONE, Load.SINGLE)
    band = error_band(regime)
    speeds = [e for e in load_errors() if e.regime == regime and e.kind in SPEED_KINDS]
    largest = {
        e.source: max(abs(o.held_out) for o in speeds if o.source == e.source) for e in speeds
    }
    assert len(largest) >= 6 and band.scope is Scope.REGIME and not band.largest
    # The k-th smallest of n sources' largest errors, k = ceil(0.85 (n + 1)).
    rank = math.ceil(0.85 * (len(largest) + 1))
    assert band.figures == len(speeds) and band.error == sorted(largest.values())[rank - 1]
    assert band.describe() == (
        f"+/- {band.error * 100:.0f} % (85 % band: {band.figures} public figures of this kind, "
        f"{len(largest)} sources)"
    )


def test_a_source_counts_once_by_its_largest_error_either_way() -> None:
    regime = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    pool = _errors(regime, [0.01] * 5)
    pool += [
        FigureError(f"w{i}", "wide", "speedup", regime, e, e) for i, e in enumerate((0.1, -0.4))
    ]
    band = error_band(regime, pool)
    assert (band.figures, band.sources) == (7, 6) and band.error == pytest.approx(0.4)


def test_a_regime_whose_few_sources_were_far_off_keeps_their_largest_error() -> None:
    dflash = Regime(MemoryKind.HBM, MethodFamily.BLOCK, Load.SINGLE)
    elsewhere = Regime(MemoryKind.HBM, MethodFamily.NONE, Load.SINGLE)
    pool = _errors(elsewhere, [0.05] * 12) + _errors(dflash, [1.5, -0.2], "d")
    band = error_band(dflash, pool)  # the 14 sources' band would be 20 %, the 13th smallest
    assert band.largest and band.error == pytest.approx(1.5) and band.scope is Scope.FAMILY
    assert band.describe() == (
        "+/- 150 % (the largest error of 2 public figures of a block drafter on any GPU at any "
        "load, 2 sources)"
    )
    calm = _errors(dflash, [0.01], "d")  # a source that was close does not narrow the band
    assert not error_band(dflash, pool[:12] + calm).largest


def test_a_band_reads_back_as_it_was_stored() -> None:
    regime = Regime(MemoryKind.GDDR, MethodFamily.HEAD, Load.LOW)
    for scope in Scope:
        band = Band(regime, 7, 6, 0.25, scope, scope is Scope.FAMILY)
        assert serde.load(Band, serde.dump(band)) == band
    stored = serde.dump(Band(regime, 3, 2, 0.1))
    del stored["scope"], stored["largest"]  # written before bands were widened
    assert serde.load(Band, stored) == Band(regime, 3, 2, 0.1, Scope.REGIME)
    with pytest.raises(ValidationError, match="no scope is called 'nearby'"):
        serde.load(Band, {**stored, "scope": "nearby"})


def test_many_sources_outvote_a_wild_one() -> None:
    regime = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    # 20 sources: the 18th smallest error (ceil(0.85 x 21)) bounds the band, not the 150 %.
    band = error_band(regime, _errors(regime, [0.01 * (i + 1) for i in range(19)] + [1.5]))
    assert band.error == pytest.approx(0.18) and band.sources == 20


def test_a_regime_with_too_few_sources_is_widened_step_by_step() -> None:
    h100 = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    geforce = Regime(MemoryKind.GDDR, MethodFamily.HEAD, Load.SINGLE)
    busy = Regime(MemoryKind.GDDR, MethodFamily.HEAD, Load.HIGH)
    block = Regime(MemoryKind.GDDR, MethodFamily.BLOCK, Load.HIGH)
    pool = _errors(h100, [0.1] * 5) + _errors(geforce, [0.2], "g") + _errors(busy, [0.9], "b")
    assert error_band(geforce, pool).scope is Scope.FAMILY_AT_LOAD  # 6 heads at one request
    assert error_band(geforce, pool).error == pytest.approx(0.2)
    widened = error_band(busy, pool)  # one source at 17+ requests: every EAGLE head's
    assert widened.scope is Scope.FAMILY and widened.error == pytest.approx(0.9)
    assert widened.describe() == (
        "+/- 90 % (85 % band: 7 public figures of an EAGLE head on any GPU at any load, 7 sources)"
    )
    assert error_band(block, pool).scope is Scope.EVERY
    unknown = error_band(block, pool[:5])
    assert (unknown.figures, unknown.sources) == (5, 5)  # every figure there is: too few
    assert unknown.error is None and unknown.describe() == (
        "too few public figures for GDDR GPUs, a block drafter, over 16 requests: error unknown"
    )
    known = Band(block, 3, 1, 0.1)
    assert widest([known, unknown]) is unknown and widest([known]) is known and widest([]) is None


def test_every_gpu_class_method_and_load_has_a_band() -> None:
    bands = [error_band(Regime(*r)) for r in itertools.product(MemoryKind, MethodFamily, Load)]
    assert all(b.error is not None and (b.sources >= 6 or b.largest) for b in bands)


def test_estimate_carries_its_regimes_band() -> None:
    est = estimate(H100, LLAMA8, method="eagle3", draft=EAGLE3, k=3, workload=ONE)
    assert est.result is not None
    assert est.band == error_band(Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE))
    consumer = estimate(
        parse_hardware("4090x1"),
        "Qwen/Qwen2.5-7B-Instruct-AWQ",
        workload=ONE,
        concurrency=32,
        method="ngram",
        k=3,
    )
    # Prompt lookup on a GDDR card at 32 requests: too few sources of the kind, every figure's.
    assert consumer.band.scope is Scope.EVERY and consumer.band.error is not None
    assert consumer.band.describe().endswith(f"of any kind, {consumer.band.sources} sources)")


@pytest.mark.parametrize(
    ("method", "draft", "settings", "check"),
    [
        ("ngram", "none", {"prompt_lookup_max": 5}, lambda s: s.prompt_lookup_max == 5),
        (
            "eagle3",
            EAGLE3,
            {"draft_sample_method": "probabilistic"},
            lambda s: s.num_speculative_tokens == 3,
        ),
        (
            "eagle3",
            EAGLE3,
            {"rejection_sample_method": "block"},
            lambda s: s.rejection_sample_method is Verification.BLOCK,
        ),
        (None, EAGLE3, {}, lambda s: s.method == "eagle3"),  # the head's kind, from its config
        (None, "ngram", {}, lambda s: s.method == "ngram"),
    ],
)
def test_estimate_builds_each_method_with_its_own_settings(
    method: str | None,
    draft: str,
    settings: dict[str, SettingValue],
    check: Callable[[SpeculativeConfig], bool],
) -> None:
    est = estimate(H100, LLAMA8, method=method, draft=draft, k=3, settings=settings, workload=ONE)
    assert est.server.speculative is not None and check(est.server.speculative)
    assert est.result is not None and est.result.spec_decode is not None


def test_estimate_with_mtp_on_a_target_that_has_mtp_layers() -> None:
    est = estimate(
        parse_hardware("h100x4"),
        "zai-org/GLM-4.5-Air",
        method="mtp",
        k=2,
        workload=ONE,
        max_model_len=4096,
    )
    assert est.memory.fits and est.result is not None
    assert est.band.regime.method is MethodFamily.MTP


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "eagle3"}, "--method eagle3 needs its model"),
        ({"method": "mtp"}, "carries no MTP layers"),
        ({"method": "ngram", "settings": {"foo": 3}}, r"--set: unknown key 'foo'"),
        ({"method": "ngram", "draft": EAGLE3}, "drafts without a model"),
    ],
)
def test_estimate_refuses_what_the_space_would_refuse(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        estimate(H100, LLAMA8, workload=ONE, **kwargs)  # type: ignore[arg-type]


def test_the_command_prints_and_stores_the_band() -> None:
    base = ["estimate", "--hardware", "h100", "--model", LLAMA8, "--workload", "chat"]
    head = ["--method", "eagle3", "--draft", EAGLE3, "--k", "3", "--set", "parallel_drafting=true"]
    result = runner.invoke(app, [*base, *head])  # a P-EAGLE option on a head not trained for it
    assert result.exit_code == 2 and "parallel_drafting needs a head trained for it" in (
        result.stderr
    )
    head[-1] = "rejection_sample_method=block"
    result = runner.invoke(app, [*base, *head])
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "simulated" in text and " % (85 % band: " in text and "public figures of " in text
    result = runner.invoke(app, [*base, "--method", "ngram", "--concurrency", "32", "--json"])
    data = json.loads(result.stdout)
    band = serde.load(Band, data["error_band"])
    assert band.error == data["error_band"]["error"] and band.scope is Scope.EVERY
    assert data["error_band"]["text"] == band.describe()
    result = runner.invoke(app, [*base, "--set", "k"])
    assert result.exit_code == 2 and "write NAME=VALUE" in result.stderr


def test_the_plan_prices_each_warm_start_trial_with_its_band() -> None:
    raw = load_space(None).source
    space = space_from_dict({**raw, "workload": {**raw["workload"], "requests": 8}})
    plan = plan_study(space, 8, Confirmation(1, 1))
    warm = [cost for what, cost in plan.trials if not what.startswith("a config the sampler")]
    assert warm and all(cost.band is not None for cost in warm)
    rows = serde.dump(plan)["trials"]
    assert isinstance(rows, list) and "bench_error_band" in rows[0]


def test_a_server_is_placed_in_the_regime_of_its_method() -> None:
    def family(method: str, model: str | None = None) -> MethodFamily:
        spec = SpeculativeConfig(SpecMethod(method), 3, model)
        return regime_of(H100, ServerConfig(LLAMA8, 1, 4096, 0.9, 2048, spec), 8).method

    assert family("ngram_gpu") is family("suffix") is MethodFamily.LOOKUP
    assert family("dspark") is MethodFamily.BLOCK
    assert family("eagle", EAGLE3) is MethodFamily.HEAD
    assert regime_of(H100, ServerConfig(LLAMA8, 1, 4096, 0.9, 2048), 1).load is Load.SINGLE
