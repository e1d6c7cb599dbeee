"""``spectune report``: a self-contained HTML page whose charts hold the study's data."""

from __future__ import annotations

import datetime as dt
import html
import re
import warnings
from html.parser import HTMLParser
from pathlib import Path

import optuna
import pytest

from tests.testbed.results import StudyCopy, ink, run_chromium
from tuner import serde
from tuner.analysis.picks import choose, ranked
from tuner.analysis.trials import Outcome, points
from tuner.report import charts
from tuner.report.importance import importance_points, param_importances
from tuner.report.page import write_report
from tuner.search.twin_steer import TWIN_ATTR, observations
from tuner.sim.twin.fit import FittedTwin, fit
from tuner.study.confirm import confirm
from tuner.trial.backends import BackendOptions, backend_factory

# The simulated study's trials carry the power model's energy: its chart too.
CHARTS = {"pareto", "k", "acceptance", "memory", "importance", "levels", "energy"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def test_report_is_self_contained_and_every_chart_holds_data(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path / "out", today=dt.date(2026, 1, 2))
    assert report.html == tmp_path / "out" / "report.html"
    assert {c.name for c in report.charts} == CHARTS
    found = points(study)
    by_name = {c.name: c for c in report.charts}
    assert by_name["pareto"].points == len(found)  # OOM trials included, at the edge
    assert by_name["memory"].points == len(found)
    assert by_name["k"].points == sum(p.outcome is not Outcome.OOM for p in found)
    assert by_name["acceptance"].points == sum(p.acceptance_rate is not None for p in found)
    assert by_name["importance"].points == 10  # five parameters, two objectives
    assert by_name["levels"].points > 0
    assert 0 < by_name["energy"].points <= len(found)  # the measured trials, modelled energy
    # Drawn data shows as colour: an empty chart has next to none.
    empty = charts.pareto_chart([], {}, space.ttft_limit_ms, tmp_path / "empty.png")
    assert empty.points == 0 and ink(empty.path) < 0.001
    for chart in report.charts:
        assert chart.path == tmp_path / "out" / f"{chart.name}.png"
        assert chart.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert ink(chart.path) > 0.002, chart.name

    text = report.html.read_text()
    tags = _tags(text)
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert len(images) == len(CHARTS)
    assert all((a.get("src") or "").startswith("data:image/png;base64,") for a in images)
    assert not [t for t, _ in tags if t in ("script", "link", "iframe")]
    assert not re.search(r"""(src|href)=['"]https?:""", text)
    figures = {a["id"]: int(a["data-points"] or 0) for t, a in tags if t == "figure"}
    assert figures == {f"chart-{c.name}": c.points for c in report.charts}
    assert "Written 2026-01-02." in text and "2x RTX 4090" in text


def test_best_table_marks_the_picks_and_shows_confirmed_intervals(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    first = write_report(study, space, tmp_path / "before")
    text = first.html.read_text()
    assert "(1 run)" in text and "run <code>spectune confirm</code>" in text
    for pick in ("max-throughput", "min-ttft", "balanced"):
        chosen = choose(first.best, pick)
        assert chosen is not None
        row = re.search(rf"<tr data-trial='{chosen.number}'>.*?</tr>", text)
        assert row is not None and pick in row.group(0)

    backend = backend_factory("sim")(space, BackendOptions(study="levels"))
    confirm(study, space, backend, top_n=2, repeats=3, log_dir=tmp_path / "logs")
    after = write_report(study, space, tmp_path / "after")
    text = after.html.read_text()
    assert after.best and all(c.confirmed is not None for c in after.best)
    assert len(after.best) == 2  # confirmed configs outrank single measurements
    best_table = text[text.index("<table id='best'>") :].split("</table>")[0]
    assert best_table.count("(95 % CI, n=3)") == 4  # throughput and TTFT of both
    assert "confirmed" in text


def test_levels_section_switches_speculation_off_at_128(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path)
    assert [c.concurrency for c in report.levels] == [1, 8, 128]
    assert report.levels[-1].k == 0
    section = report.html.read_text().split("Speculation per load level</h2>")[1]
    assert re.search(r"<tr><td>128</td>.*?<td class='l'>off</td></tr>", section)


def test_the_report_says_what_traffic_was_served_and_the_best_per_temperature(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    text = write_report(study, space, tmp_path).html.read_text()
    assert "<th class='l'>concurrency</th><td class='l'>1 (33 %), 8 (33 %), 128 (33 %)" in text
    assert "0 trials lost requests (at most 0% allowed)" in text
    assert "code (real: HumanEval" in text  # real or synthetic, said where it is named
    # The levels study tunes the temperature: one best server config per temperature tried.
    table = text.split("<table id='per-temperature'>")[1].split("</table>")[0]
    temperatures = [float(row.split("</td>")[0]) for row in table.split("<tr><td>")[1:]]
    assert temperatures == sorted(set(temperatures)) and len(temperatures) >= 2
    assert "Speculation stops paying at 128 concurrent requests" in text


@pytest.mark.browser
def test_report_renders_in_headless_chromium(
    levels: StudyCopy, tmp_path: Path, chromium: Path
) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path / "out")
    shot = tmp_path / "report.png"
    done = run_chromium(
        chromium,
        tmp_path / "profile",
        report.html.as_uri(),
        "--window-size=1200,4400",
        "--hide-scrollbars",
        f"--screenshot={shot}",
    )
    assert shot.is_file(), done.stderr[-2000:]
    # The charts (below the headline and the tables, whose height grows with their columns)
    # show their data in colour.
    assert ink(shot, (0, 1600, 1200, 4400)) > 0.004
    dom = run_chromium(chromium, tmp_path / "profile", report.html.as_uri(), "--dump-dom").stdout
    assert "spectune report: levels" in dom
    rendered = re.findall(r'<figure id="chart-(\w+)" data-points="(\d+)"', dom)
    assert {name for name, _ in rendered} == CHARTS
    assert all(int(n) > 0 for _, n in rendered)


def test_one_level_and_empty_studies_still_report(tmp_path: Path) -> None:
    from tests.testbed.results import SPACE, StudyCopy, build_study
    from tuner.config.space import space_from_dict
    from tuner.study.paths import default_storage
    from tuner.study.storage import open_storage
    from tuner.study.study import open_study

    one = {**SPACE, "name": "one", "workload": {**SPACE["workload"], "concurrency": [1]}}
    build_study(tmp_path / "one", one, trials=6)
    study, space = StudyCopy(tmp_path / "one", "one").open()
    report = write_report(study, space, tmp_path / "one-report")
    assert {c.name for c in report.charts} == CHARTS - {"levels"}
    assert report.levels == ()
    assert "The workload measures one concurrency level." in report.html.read_text()

    import optuna

    empty_space = space_from_dict({**SPACE, "name": "empty"})
    url = default_storage("empty", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study, space = open_study(
            "empty", open_storage(url), empty_space, optuna.samplers.RandomSampler()
        )
    report = write_report(study, space, tmp_path / "empty-report")
    assert all(c.points == 0 for c in report.charts) and report.best == ()
    assert report.recommended is None
    text = report.html.read_text()
    assert "No feasible config yet" in text
    assert "<section id='recommended'><h2>No recommendation yet</h2>" in text


def test_importances_count_only_trials_that_measured_something(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    trials = points(study)
    measured = importance_points(trials)
    assert measured and all(p.outcome is not Outcome.OOM for p in measured)
    assert all(p.duplicate_of is None for p in measured)
    left_out = [p for p in trials if p not in measured]
    assert any(p.outcome is Outcome.OOM for p in left_out), "the study needs OOM trials"
    # OOM trials change nothing: they are not counted, whatever numbers they would carry.
    assert param_importances(trials, space) == param_importances(measured, space)
    report = write_report(study, space, tmp_path)
    caption = next(c.caption for c in report.charts if c.name == "importance")
    assert f"over the {len(measured)} trials that measured something" in caption
    assert "OOM trials (observed or predicted)" in caption
    assert html.escape(caption) in report.html.read_text()


def test_the_best_config_of_each_method_is_compared_side_by_side(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path / "out")
    text = report.html.read_text()

    feasible = [c for c in ranked(study)]
    methods = {str(c.record.server.method) for c in feasible}
    assert len(methods) >= 2  # the shipped levels study finds more than one feasible method
    assert [str(c.record.server.method) for c in report.methods] == sorted(
        methods, key=lambda m: -max(c.throughput for c in feasible if c.record.server.method == m)
    )
    for best in report.methods:  # each row is its method's fastest feasible trial
        same = [c for c in feasible if c.record.server.method == best.record.server.method]
        assert best.throughput == max(c.throughput for c in same)
        row = re.search(rf"<tr data-method='{best.record.server.method}'>.*?</tr>", text)
        assert row is not None and f"<td>{best.number}</td>" in row.group(0)
    if "none" in methods:
        none = next(c for c in report.methods if c.record.server.method == "none")
        assert "<td>1.00x</td>" in text and none.throughput > 0


def test_the_report_shows_the_fitted_twin(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    untwinned = write_report(study, space, tmp_path / "before").html.read_text()
    assert "No twin fitted" in untwinned  # these trials ran under plain TPE

    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    twin = fit(space.hardware, observations(space, done), FittedTwin())
    study.set_user_attr(TWIN_ATTR, serde.dump(twin))  # what the spectune sampler stores
    text = write_report(study, space, tmp_path / "after").html.read_text()

    assert f"Fitted to {twin.observations} simulated trials" in text
    for name, value, low, high in twin.intervals():
        row = re.search(rf"<tr data-factor='{name}'>.*?</tr>", text)
        assert row is not None
        assert f"<td>{value:.3f}</td>" in row.group(0) and f"{low:.3f} .. {high:.3f}" in row.group(
            0
        )
