"""The error band every prediction carries, and `spectune estimate` speaking every method."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
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
    Load,
    MethodFamily,
    Regime,
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


def test_a_regime_with_figures_has_the_largest_held_out_error_of_its_speed_figures() -> None:
    regime = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    band = error_band(regime)
    speeds = [e for e in load_errors() if e.regime == regime and e.kind in SPEED_KINDS]
    assert speeds and band.figures == len(speeds)
    assert band.error == max(abs(e.held_out) for e in speeds)
    assert band.describe().startswith(f"+/- {band.error * 100:.0f} % on {band.figures} public")


def test_a_regime_without_figures_says_so() -> None:
    regime = Regime(MemoryKind.GDDR, MethodFamily.BLOCK, Load.HIGH)
    band = error_band(regime)
    assert band.error is None and band.figures == 0
    assert band.describe() == (
        "no public figure for GDDR GPUs, a block drafter, over 16 requests: error unknown"
    )
    known = Band(regime, 3, 1, 0.1)
    assert widest([known, band]) is band and widest([known]) is known and widest([]) is None


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
    assert consumer.band.error is None  # no public figure of prompt lookup on a GeForce card


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
    assert "simulated" in text and "public figures of this kind" in text
    result = runner.invoke(app, [*base, "--method", "ngram", "--concurrency", "32", "--json"])
    data = json.loads(result.stdout)
    assert data["error_band"]["error"] is None
    assert data["error_band"]["text"].endswith("error unknown")
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
