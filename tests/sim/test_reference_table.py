"""The simulator against the public figures of benchmarks/reference_figures.yaml."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import simulator_reference
from reference_fit import _step, fit, held_out
from reference_parameters import PARAMETERS, Parameter
from reference_table import Figure, ReferenceTable, load_table, predict_figure

from tuner.catalog.drafters import k_limit
from tuner.catalog.gpus import MemoryKind
from tuner.config.trial import SpecMethod
from tuner.sim.band import FigureError, Load, MethodFamily, Regime, Scope, load_errors
from tuner.sim.virtual_time import SHIPPED, Calibrated

TABLE = load_table()


@pytest.fixture(scope="module")
def report() -> simulator_reference.Report:
    return simulator_reference.report(TABLE)


def test_the_table_spans_gpus_loads_and_methods_each_with_its_source() -> None:
    assert len(TABLE.figures) >= 20
    for figure in TABLE.figures:
        assert TABLE.sources[figure.source].address.startswith(("https://", "/work/shared/"))
        assert figure.what and figure.setup.engine
    regimes = [f.regime for f in TABLE.figures]
    assert {r.gpu for r in regimes} == set(MemoryKind)
    assert {Load.SINGLE, Load.HIGH} <= {r.load for r in regimes}
    assert {MemoryKind.GDDR, MemoryKind.HBM} == {r.gpu for r in regimes if r.load is Load.HIGH}
    assert set(MethodFamily) <= {r.method for r in regimes}


def test_every_figure_is_predicted_within_twenty_percent(
    report: simulator_reference.Report,
) -> None:
    """The bar of the fitted figures; those read after the fit are summed up, not held to it.

    One fitted figure misses it, and the report says so: DSpark's K=7 speed-up on 8x MI355X
    (vLLM PR #52362, -27 %). Its acceptance is DeepSeek-V4's DSpark stages on ShareGPT, which
    the block drafters' chat logit (fitted on per-position counters that fall along the block,
    PRs #52992 and #46995) puts lower than this run's speed-up needs; no per-figure factor
    lifts it. Any other figure off, or this one back within the bar, fails here."""
    off = {f.id: f"{report.error(f):+.1%}" for f in report.failures}
    bar = f"{simulator_reference.BAR:.0%}"
    assert set(off) == {"pr52362-fixed-c4"}, f"figures off by more than {bar}: {off}"


def test_the_sources_read_after_the_fit_are_marked_unfitted() -> None:
    late = {key for key, source in TABLE.sources.items() if not source.fitted}
    # Ten sources were read after the first fit and two more since; seven were fitted on
    # 2026-12-07, and the block drafters' counters (PR #46995, the MI300X K-curves) with the
    # block drafters' constants that evening.
    assert late == {"jarvislabs-gemma4", "a10g-harness", "vllm-pr-32206"}
    assert "field-notes" not in late
    assert {f.source for f in TABLE.unfitted} == late
    assert len(TABLE.unfitted) + len(TABLE.fitted) == len(TABLE.figures)
    assert all(f.fitted == TABLE.sources[f.source].fitted for f in TABLE.figures)


def test_each_figure_is_also_predicted_with_its_source_left_out(
    report: simulator_reference.Report,
) -> None:
    assert set(report.held_out) == {f.id for f in TABLE.figures}
    # Left out, a source is predicted from the others and the priors: its error differs.
    assert any(abs(report.held_out_error(f) - report.error(f)) > 0.01 for f in TABLE.figures)
    assert report.sole["field-notes"], "only the field notes speak to the V0 engine's costs"


def test_the_shipped_error_bands_are_this_tables(report: simulator_reference.Report) -> None:
    fresh = {e.figure: e for e in report.errors()}
    # The bands hold every figure, those read after the fit too (their errors are held out).
    assert fresh.keys() == {f.id for f in TABLE.figures}
    shipped = {e.figure: e for e in load_errors()}
    assert fresh.keys() == shipped.keys(), "run benchmarks/simulator_reference.py --write"
    for figure, error in fresh.items():
        assert shipped[figure].regime == error.regime
        assert shipped[figure].error == pytest.approx(error.error, abs=2e-3), figure
        assert shipped[figure].held_out == pytest.approx(error.held_out, abs=2e-3), figure


def test_the_script_fails_when_a_figure_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    figure = next(f for f in TABLE.figures if f.id == "fn-code-none")
    wrong = replace(figure, measured=2 * figure.measured)
    table = ReferenceTable(TABLE.sources, (wrong,), ())
    monkeypatch.setattr(simulator_reference, "load_table", lambda: table)
    assert simulator_reference.main([]) == 1
    right = replace(table, figures=(figure,))
    monkeypatch.setattr(simulator_reference, "load_table", lambda: right)
    assert simulator_reference.main([]) == 0


def test_the_sources_table_has_a_row_per_source_with_its_held_out_errors(
    report: simulator_reference.Report,
) -> None:
    rows = simulator_reference.source_rows(report)
    assert [r.source for r in rows] == sorted(TABLE.sources)
    assert sum(r.figures for r in rows) == len(TABLE.figures)
    for row in rows:
        assert 0 <= row.mean <= row.largest
        assert row.fitted == TABLE.sources[row.source].fitted
        # A source read after the fit pins nothing: the fit never saw it.
        assert row.pins == (report.sole[row.source] if row.fitted else ())


def _error(source: str, regime: Regime, held_out: float, kind: str = "tok_s") -> FigureError:
    return FigureError(f"{source}-{kind}", source, kind, regime, held_out / 2, held_out)


def test_the_coverage_check_bands_a_figure_by_the_other_sources_alone() -> None:
    single = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    gddr = Regime(MemoryKind.GDDR, MethodFamily.HEAD, Load.SINGLE)
    errors = [_error(f"s{i}", single, 0.01 * (i + 1)) for i in range(6)]
    errors += [
        _error("wild", single, 0.50),
        _error("late", gddr, 0.03),
        _error("s0", single, 0.90, kind="acceptance_length"),  # no band judges acceptance
    ]
    covered = {c.error.source: c for c in simulator_reference.coverage(errors)}
    assert set(covered) == {"wild", "late", *(f"s{i}" for i in range(6))}
    # The wild source's band is the other six's: it cannot see its own 50 %.
    assert covered["wild"].band.error == pytest.approx(0.06) and not covered["wild"].inside
    # s0's band holds the wild source (the 6th smallest of 6 others' errors) and its own 1 %.
    assert covered["s0"].band.error == pytest.approx(0.50) and covered["s0"].inside
    # The GeForce figure's regime has no other source: it is judged by the EAGLE heads at one
    # request on any GPU, as estimate would have printed before its source was read.
    assert covered["late"].band.scope is Scope.FAMILY_AT_LOAD and covered["late"].inside


def test_too_few_other_sources_give_no_band() -> None:
    single = Regime(MemoryKind.HBM, MethodFamily.HEAD, Load.SINGLE)
    errors = [_error(f"s{i}", single, 0.01) for i in range(6)]
    covered = simulator_reference.coverage(errors)
    # Five others cannot make an 85 % band: the sixth smallest of five does not exist.
    assert all(c.band.error is None and not c.inside for c in covered)


# --- sources read after the fit (``fitted: false``) ----------------------------------------

_CODE_LOGIT = [p for p in PARAMETERS if p.name == "draft-model acceptance logit, code"]


def _start() -> Calibrated:
    assert isinstance(SHIPPED, Calibrated)
    return SHIPPED


def test_an_unfitted_figure_does_not_move_the_fit() -> None:
    """Fitted to a small table, the constants are the same with or without a figure of a source
    read after the fit, however far off it is; the same figure fitted would move them."""
    assert len(_CODE_LOGIT) == 1
    mine = next(f for f in TABLE.figures if f.id == "fn-code-acceptance")
    other = replace(mine, id="late-code-acceptance", source="late", measured=0.95)
    late = replace(other, fitted=False)
    parameter = _CODE_LOGIT[0]

    def fitted_value(figures: list[Figure]) -> float:
        return parameter.get(fit(figures, _start(), _CODE_LOGIT, iterations=3).physics)

    alone = fitted_value([mine])
    assert fitted_value([mine, late]) == alone
    assert fitted_value([mine, other]) > alone + 0.05  # fitted, 95 % acceptance pulls it up

    out, sole = held_out([mine, late], _start(), _CODE_LOGIT)
    reference, _ = held_out([mine], _start(), _CODE_LOGIT)
    assert out[mine.id] == reference[mine.id]
    # Held out already: predicted by the constants as they stand, and pinning nothing.
    assert out[late.id] == predict_figure(late, _start())
    assert "late" not in sole


def test_a_damped_step_shrinks_in_every_direction() -> None:
    """Marquardt's damping: highly damped, each parameter moves a small share of its
    Gauss-Newton step, one the figures pin tightly as much as one only its prior holds (a
    damping of the prior's curvature alone left the first moving, and the fit stuck)."""
    jacobian = np.array([[100.0, 0.0], [0.0, 0.1]])
    residuals = np.array([1.0, 1.0])
    free, prior = np.zeros(2), (np.zeros(2), np.ones(2))
    newton = _step(jacobian, residuals, free, prior, 0.0)
    damped = _step(jacobian, residuals, free, prior, 100.0)
    assert np.all(np.abs(damped) < 0.02 * np.abs(newton))


def test_an_unfitted_figure_is_reported_but_not_held_to_the_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    figure = next(f for f in TABLE.figures if f.id == "fn-code-none")
    wrong = replace(figure, id="late-code-none", source="late", measured=2 * figure.measured)
    sources = {**TABLE.sources, "late": replace(TABLE.sources["field-notes"], key="late")}
    unfitted = replace(sources["late"], fitted=False)
    table = ReferenceTable(
        {**sources, "late": unfitted}, (figure, replace(wrong, fitted=False)), ()
    )
    monkeypatch.setattr(simulator_reference, "load_table", lambda: table)
    assert simulator_reference.main([]) == 0  # off by half, yet read after the fit
    out = capsys.readouterr().out
    assert "Read after the fit, not fitted" in out and "| late-code-none: " in out
    result = simulator_reference.report(table)
    off = abs(result.error(replace(wrong, fitted=False)))
    assert f"1 figure from 1 source read after the fit, not fitted: mean error {off:.1%}" in out
    assert result.failures == []
    assert result.held_out["late-code-none"] == result.predicted["late-code-none"]
    row = next(r for r in simulator_reference.source_rows(result) if r.source == "late")
    assert not row.fitted and row.pins == () and row.largest == pytest.approx(0.5, abs=0.01)
    fitted = ReferenceTable(sources, (figure, wrong), ())  # the same figure, fitted
    monkeypatch.setattr(simulator_reference, "load_table", lambda: fitted)
    assert simulator_reference.main([]) == 1


def _parameter(name: str) -> Parameter:
    return next(p for p in PARAMETERS if p.name == name)


def test_block_drafters_sampled_drafts_are_penalised_apart_from_the_others() -> None:
    """DSpark's sampled drafts (vllm PR #52992) and MTP's (PR #41044) no longer share one
    penalty: left out, each source's is its own prior, not the other family's fit."""
    shared = _parameter("temperature penalty of sampled drafts")
    block = _parameter("temperature penalty of a block drafter's sampled drafts")
    mtp = next(f for f in TABLE.figures if f.id == "pr41044-probabilistic-acceptance")
    dspark = next(f for f in TABLE.figures if f.id == "pr52992-dspark-pos0")
    assert shared.applies(mtp) and not shared.applies(dspark)
    assert block.applies(dspark) and not block.applies(mtp)
    moved = block.put(_start(), 0.3)
    assert predict_figure(mtp, moved) == predict_figure(mtp, _start())
    assert predict_figure(dspark, moved) > predict_figure(dspark, _start())


def test_each_block_drafter_drifts_at_its_own_rate() -> None:
    """DFlash's decay moves DFlash's figures and DSpark's DSpark's: the MI300X K-curves
    measure both drafters on one target (vLLM blog PR #310) and they drift apart."""
    dflash = next(f for f in TABLE.figures if f.id == "amd-dflash-gsm8k-k15-length")
    dspark = next(f for f in TABLE.figures if f.id == "amd-dspark-gsm8k-k7-length")
    for name, own, other in (
        ("dflash per-position decay", dflash, dspark),
        ("dspark per-position decay", dspark, dflash),
    ):
        parameter = _parameter(name)
        assert parameter.applies(own) and not parameter.applies(other)
        moved = parameter.put(_start(), 0.9 * parameter.get(_start()))
        assert predict_figure(own, moved) < predict_figure(own, _start())
        assert predict_figure(other, moved) == predict_figure(other, _start())


def test_the_prompts_spread_only_where_the_drafts_are_sampled() -> None:
    """The spread over prompts grows with the temperature: it lifts DSpark's last position at
    temperature 1 (PR #52992) and leaves the greedy K-curves as they are."""
    spread = _parameter("block drafters' spread over prompts per unit of temperature")
    sampled = next(f for f in TABLE.figures if f.id == "pr52992-dspark-pos15")
    greedy = next(f for f in TABLE.figures if f.id == "amd-dflash-gsm8k-k15-pos7")
    assert spread.applies(sampled) and not spread.applies(greedy)
    wider = spread.put(_start(), 2 * spread.get(_start()))
    assert predict_figure(sampled, wider) > predict_figure(sampled, _start())
    assert predict_figure(greedy, wider) == predict_figure(greedy, _start())


def test_no_block_drafter_figure_is_past_its_trained_width() -> None:
    """vLLM 0.32 and spectune refuse K past the block a drafter was trained for
    (check_block_drafter): the MI300X post's DSpark rows at K=11 and 15 are read and not used."""
    for figure in TABLE.figures:
        method = figure.setup.method
        drafter = figure.setup.drafter()
        if method not in (SpecMethod.DFLASH, SpecMethod.DSPARK) or drafter is None:
            continue
        limit = k_limit(method, drafter.config)
        assert limit is None or figure.setup.k <= limit, figure.id
    assert any("trained to draft" in item["why"] for item in TABLE.not_used)
