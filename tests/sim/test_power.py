"""The simulator's power model against the public power figures it cites, and the energy a
simulated trial carries."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trial.backends.contract_support import CONFIG, FITS, SMALL
from tuner.catalog.gpus import CATALOG, parse_hardware
from tuner.catalog.models import load_model
from tuner.cli import app
from tuner.config.trial import LaunchContext, ServerConfig, SpecMethod, SpeculativeConfig
from tuner.sim.perfmodel import StepWork
from tuner.sim.power import MODELLED, SHIPPED_POWER, idle_w, power_model
from tuner.sim.power_fit import FIGURES, error, fit, held_out, power_band, predicted_w
from tuner.sim.virtual_time import predict
from tuner.trial.backends.sim import SimBackend

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import simulator_reference


def test_every_catalog_power_figure_cites_its_source_and_idles_below_its_board() -> None:
    powered = [g for g in CATALOG if g.board_w is not None]
    assert {"RTX 4090", "RTX 5090", "H100-SXM", "H100 PCIe", "H200", "B200"} <= {
        g.name for g in powered
    }
    for gpu in powered:
        assert gpu.sources and "W" in gpu.note, gpu.name  # the note says where the watts are
        idle = idle_w(gpu)
        assert idle is not None and 0 < idle < 0.25 * (gpu.board_w or 0), gpu.name
    cited = {g.name: g.idle_w for g in CATALOG if g.idle_w is not None}
    assert cited == {"RTX 3090": 27, "RTX 5090": 22, "H100-SXM": 140}
    rtx4090 = next(g for g in CATALOG if g.name == "RTX 4090")
    # Not cited: the board power times the median share of the cited GDDR cards.
    assert idle_w(rtx4090) == pytest.approx(450 * (27 / 350 + 22 / 575) / 2)


def test_the_shipped_weights_are_the_fit_of_the_cited_figures() -> None:
    assert fit() == SHIPPED_POWER
    assert {f.source for f in FIGURES} >= {
        "https://github.com/sudoingX/qwen38-mtp/blob/main/sweeps/rtx-5090.md",
        "https://github.com/noonghunna/club-3090/issues/697",
    }


def test_each_figure_is_predicted_within_fifteen_percent() -> None:
    for figure in FIGURES:
        assert abs(error(figure)) <= 0.15, (figure.id, predicted_w(figure))


def test_power_rises_with_k_on_the_5090_as_the_sweep_measured() -> None:
    sweep = [f for f in FIGURES if f.hardware == "5090"]
    assert [f.k for f in sweep] == [0, 1, 2, 4]
    watts = [predicted_w(f) for f in sweep]
    assert watts == sorted(watts) and watts[0] < 0.9 * 600
    assert watts[-1] == 600  # speculation draws the limit, as measured from K=2


def test_the_band_is_the_largest_leave_one_out_error() -> None:
    errors = held_out()
    band = power_band()
    assert band.figures == len(FIGURES) and band.sources == 3
    assert band.error == max(abs(e) for e in errors.values())
    # Held out, a figure is predicted no better than with itself in the fit.
    for figure in FIGURES:
        assert abs(errors[figure.id]) >= abs(error(figure)) - 1e-9
    assert "leave-one-out over 7 public power figures" in band.describe()


def test_a_step_draws_idle_without_work_and_never_more_than_the_limit() -> None:
    model = power_model(parse_hardware("4090").gpu, limit_w=300)
    assert model is not None
    assert model.draw_w(StepWork(0.0, 0.0), 0.01) == model.idle_w
    flat_out = StepWork(1008e9 * 0.01, 165e12 * 0.01)  # the datasheet rates for the step
    assert model.demand_w(flat_out, 0.01) > 450
    assert model.draw_w(flat_out, 0.01) == 300
    assert power_model(parse_hardware("a10g").gpu) is None  # no published board power


def test_a_simulated_trial_carries_its_modelled_energy(tmp_path: Path) -> None:
    context = LaunchContext(study="power", trial=1, log_dir=tmp_path)
    backend = SimBackend(parse_hardware("4090x1"), seed=3)
    backend.start(FITS, context)
    workload = replace(SMALL, output_tokens=64, requests=8)
    config = replace(CONFIG, client=replace(CONFIG.client, workload=workload))
    result = backend.measure(config, 2, 0)
    window = result.gpu
    assert window is not None and window.energy_from == MODELLED
    assert window.seconds == result.duration_s and window.power_limit_w == (450.0,)
    model = power_model(parse_hardware("4090").gpu)
    assert model is not None
    assert model.idle_w < (window.mean_power_w or 0) <= 450
    assert window.energy_j == pytest.approx((window.mean_power_w or 0) * result.duration_s)
    per_token = result.joules_per_token
    assert per_token is not None and result.tokens_per_joule == pytest.approx(1 / per_token)
    assert result.summary()["gpu_energy_from"] == MODELLED

    other = SimBackend(parse_hardware("a10gx1"), seed=3)
    other.start(FITS, context)
    assert other.measure(CONFIG, 1, 0).gpu is None  # no board power: no energy, not a guess


def test_speculation_costs_power_but_saves_energy_per_token_at_one_stream() -> None:
    """The sweep's finding: MTP draws more watts and halves the joules of a token."""
    hardware = parse_hardware("5090x1")
    target = load_model("Qwen/Qwen2.5-32B-Instruct-AWQ")
    draft = load_model("Qwen/Qwen2.5-0.5B-Instruct")
    power = power_model(hardware.gpu)
    plain = ServerConfig(target.hf_id, 1, 8192, 0.9, 2048)
    speculating = replace(
        plain, speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, model=draft.hf_id)
    )
    workload = replace(SMALL, prompt_set="code", input_tokens=256, output_tokens=256, requests=4)
    off = predict(hardware, target, None, plain, 0.0, workload, 1, power=power)
    on = predict(hardware, target, draft, speculating, 0.0, workload, 1, power=power)
    assert off.gpu is not None and on.gpu is not None
    assert (on.gpu.mean_power_w or 0) > (off.gpu.mean_power_w or 0)
    assert (on.joules_per_token or 0) < 0.8 * (off.joules_per_token or 0)


def test_estimate_prints_joules_per_token_with_its_band() -> None:
    args = ["estimate", "--hardware", "4090x1", "--model", "Qwen/Qwen3-8B"]
    shown = CliRunner().invoke(app, [*args, "--draft", "Qwen/Qwen3-0.6B"])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.stdout.split())  # rich wraps long lines
    line = text[text.index("simulated", text.index("TTFT")) :]
    assert re.match(r"simulated \d+\.\d\d J/token \(\d+\.\d\d tok/J\) at \d+ W, \+/- \d+ %", line)
    assert f"power {power_band().describe()}, plus throughput +/- " in line
    as_json = CliRunner().invoke(app, [*args, "--json"])
    data = json.loads(as_json.stdout)
    assert data["result"]["joules_per_token"] > 0
    assert data["result"]["gpu_energy_from"] == MODELLED
    assert data["power_band"]["error"] == round(power_band().error, 4)
    assert data["energy_error"] > data["power_band"]["error"]  # plus the throughput band
    unknown = CliRunner().invoke(
        app, ["estimate", "--hardware", "a10gx1", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ"]
    )
    assert "energy: unknown (A10G has no board power in the catalog)" in unknown.stdout


def test_the_reference_script_lists_the_power_figures_it_was_fitted_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = simulator_reference.power_rows()
    assert [r["figure"] for r in rows] == [f.id for f in FIGURES]
    for row, figure in zip(rows, FIGURES, strict=True):
        assert row["source"] == figure.source and row["measured_w"] == figure.measured_w
        assert row["model_w"] == predicted_w(figure) and row["held_out"] == held_out()[figure.id]
    simulator_reference._print_power()
    printed = capsys.readouterr().out
    assert "| GPU | setup | figure | source | model | error | held out |" in printed
    assert printed.count("| 5090 |") == 4 and printed.count("| 4090 |") == 3
    assert "537 W | https://github.com/sudoingX/qwen38-mtp/blob/main/sweeps/rtx-5090.md" in printed
    assert f"J/token band: power {power_band().describe()}" in printed
