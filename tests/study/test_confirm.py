"""Confirmation: the top configs re-measured on fresh servers, with Student-t intervals."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.testbed.results import StudyCopy
from tuner import serde
from tuner.analysis.confirmed import (
    CONFIRMED_ATTR,
    Confirmed,
    Interval,
    Run,
    interval,
    load_confirmed,
    t_quantile_975,
)
from tuner.analysis.picks import confirmation_order, pick_candidate, recommend
from tuner.cli.render import recommendation
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import StartupFailure
from tuner.export.vllm import export
from tuner.results import Endpoint, Source, TrialResult
from tuner.study.confirm import confirm
from tuner.trial.backends import Backend, BackendOptions, backend_factory
from tuner.trial.run_facts import RunFacts
from tuner.trial.scoring import TrialStatus


def _t_cdf(x: float, df: int) -> float:
    """Student's t CDF by Simpson's rule on its density (an independent check of the table)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def pdf(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    steps = 20_000
    h = x / steps
    inner = sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, steps))
    return 0.5 + h / 3 * (pdf(0.0) + inner + pdf(x))


@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 29, 40, 120])
def test_t_quantiles_are_the_975_points(df: int) -> None:
    assert _t_cdf(t_quantile_975(df), df) == pytest.approx(0.975, abs=2e-5)


def test_t_quantiles_between_table_rows_err_wide() -> None:
    assert t_quantile_975(50) == t_quantile_975(40) > t_quantile_975(60)
    assert t_quantile_975(10**6) == 1.96
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_interval_is_mean_plus_minus_t_times_standard_error() -> None:
    values = [57.0, 59.0, 58.0]
    ci = interval(values)
    sem = statistics.stdev(values) / math.sqrt(3)
    assert ci.mean == pytest.approx(58.0)
    assert ci.half_width == pytest.approx(4.3027 * sem)
    assert ci.low is not None and ci.low < 58.0 < (ci.high or 0)
    assert ci.format(1, " tok/s") == "58.0 ± 2.5 tok/s (95 % CI, n=3)"
    single = interval([42.0])
    assert single.half_width is None and single.low is None and single.format() == "42.0 (n=1)"
    back = serde.load(Interval, serde.dump(ci))
    assert (back.mean, back.n) == (ci.mean, ci.n)
    assert back.half_width == pytest.approx(ci.half_width)
    with pytest.raises(ValueError):
        interval([])


@dataclass
class CountingBackend:
    """Wraps a backend and counts starts and stops: each repeat must get its own server."""

    inner: Backend
    name: str = "counting"
    starts: list[ServerConfig] = field(default_factory=list)
    stops: int = 0

    @property
    def source(self) -> Source:
        return self.inner.source

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.starts.append(server)
        return self.inner.start(server, context)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        return self.inner.measure(config, concurrency, seed)

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        return self.inner.answer(requests)

    def stop(self) -> None:
        self.stops += 1
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def facts(self, space: SearchSpace) -> RunFacts:
        return self.inner.facts(space)


def _sim(space: SearchSpace) -> Backend:
    return backend_factory("sim")(space, BackendOptions(study="levels"))


def test_confirm_reruns_the_top_configs_on_fresh_servers(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    counting = CountingBackend(_sim(space))
    seen: list[tuple[int, int, str]] = []
    results = confirm(
        study,
        space,
        counting,
        top_n=3,
        repeats=3,
        log_dir=tmp_path / "logs",
        on_run=lambda n, r, run: seen.append((n, r, run.status)),
        today=dt.date(2026, 1, 2),
    )

    expected = [t.number for t in confirmation_order(study)[:3]]
    assert [c.trial for c in results] == expected and len(set(expected)) == 3
    assert len(counting.starts) == 9  # three configs, three fresh servers each
    assert counting.stops >= 9
    assert [(n, r) for n, r, _ in seen] == [(n, r) for n in expected for r in range(3)]
    for record in results:
        assert record.stable and record.source == "simulated" and record.date == "2026-01-02"
        values = [run.throughput for run in record.runs]
        assert len(set(values)) == 3  # each repeat has its own noise
        tok_s = record.throughput
        assert tok_s is not None and tok_s.n == 3 and tok_s.half_width is not None
        assert tok_s.half_width > 0 and tok_s.low is not None
        assert tok_s.low < statistics.fmean(v or 0.0 for v in values) < (tok_s.high or 0)
        assert set(record.level_tok_s()) == {1, 8, 128}
        # The original measurement is a different draw: the confirmation is not a replay.
        trial = study.trials[record.trial]
        assert trial.values is not None and trial.values[0] not in values

    stored = study.user_attrs[CONFIRMED_ATTR]
    assert set(stored) == {str(n) for n in expected}
    entry = stored[str(expected[0])]
    assert set(entry) >= {"runs", "output_tok_s", "p95_ttft_ms"}
    assert set(entry["output_tok_s"]) == {"mean", "ci95", "n"}
    assert load_confirmed(study)[expected[0]] == results[0]


def test_recommendation_and_export_use_the_confirmed_numbers(levels: StudyCopy) -> None:
    study, space = levels.open()
    results = confirm(study, space, _sim(space), top_n=4, repeats=3, log_dir=levels.folder / "logs")
    chosen = pick_candidate(study, "max-throughput")
    assert chosen.confirmed is not None
    best = max(results, key=lambda c: c.throughput.mean if c.throughput else 0.0)
    assert chosen.number == best.trial
    assert chosen.throughput == pytest.approx(best.throughput.mean)  # type: ignore[union-attr]
    text = export(study, space, "vllm").text
    assert "mean of 3 runs on fresh servers" in text and "95 % CI" in text
    facts = export(study, space, "json").provenance
    assert facts.confirmed and facts.runs == 3 and facts.throughput_ci95 is not None
    # Every pick was confirmed: four configs cover the recommendation, its runner-up and
    # what balanced and min-ttft would choose.
    for pick in ("min-ttft", "balanced"):
        assert pick_candidate(study, pick).confirmed is not None


def test_a_config_that_fails_when_measured_again_is_dropped(levels: StudyCopy) -> None:
    study, space = levels.open()
    first = confirmation_order(study)[0].number

    class Flaky(CountingBackend):
        def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
            if len(self.starts) == 1:  # the first config's second run dies at start-up
                from tuner.errors import FailureKind

                self.starts.append(server)
                raise StartupFailure(FailureKind.CRASH, "engine core died", 1, "boom")
            return super().start(server, context)

    flaky_sim = Flaky(_sim(space))
    results = confirm(study, space, flaky_sim, top_n=2, repeats=3, log_dir=levels.folder / "logs")
    flaky = results[0]
    assert flaky.trial == first and not flaky.stable
    assert [r.status for r in flaky.runs].count("failed") == 1  # type: ignore[arg-type]  # StrEnum
    assert "engine core died" in (flaky.runs[1].failure or "")
    assert not flaky.feasible(space.ttft_limit_ms)
    assert pick_candidate(study, "max-throughput").number == results[1].trial


def test_nothing_to_confirm() -> None:
    assert confirm(None, None, None, top_n=0, log_dir=Path()) == []  # type: ignore[arg-type]
    # The sources are plain strs, as a study stores them (Source is a StrEnum).
    assert Confirmed(1, "simulated", ()).throughput is None  # type: ignore[arg-type]
    assert not Confirmed(1, "simulated", (Run(TrialStatus.OOM),)).stable  # type: ignore[arg-type]


def test_optimize_and_export_count_the_runs_alike(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()

    def said() -> tuple[str, str]:
        best = recommend(study)
        assert best is not None
        header = export(study, space, "vllm").text.splitlines()[3]
        line = recommendation(best, space.ttft_limit_ms)
        return header, line

    for header_or_line in said():  # not confirmed
        assert "(one run, not confirmed)" in header_or_line
    confirm(study, space, _sim(space), top_n=1, repeats=1, log_dir=tmp_path / "one")
    for header_or_line in said():  # confirmed by one run: its own p95 and its own bounds
        assert "not confirmed" not in header_or_line
        assert "one confirmation run on a fresh server" in header_or_line
    best = recommend(study)
    assert best is not None and best.numbers.confirmed and best.numbers.runs == 1
    ttft = best.numbers.p95_ttft_ms
    assert ttft.low is not None and ttft.low <= ttft.value  # the run's bound holds its p95
    confirm(study, space, _sim(space), top_n=1, repeats=3, log_dir=tmp_path / "three")
    for header_or_line in said():
        assert "mean of 3 runs on fresh servers" in header_or_line
