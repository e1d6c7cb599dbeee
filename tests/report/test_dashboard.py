"""``spectune dashboard``: optuna-dashboard 0.21 sees names, infeasible trials and logs.

Checked three ways: the library (what gets written where the dashboard looks), the running
dashboard's HTTP API, and the dashboard's web page in headless Chromium.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
from optuna.artifacts import get_all_artifact_meta
from optuna.trial import TrialState

from tests.testbed.results import STUDY, StudyCopy, free_port, run_chromium
from tuner.analysis.trials import Outcome, points
from tuner.report.dashboard import LEGACY_CONSTRAINTS, prepare_dashboard
from tuner.study.paths import StudyPaths
from tuner.study.storage import open_storage
from tuner.trial.optuna_private import storage_of
from tuner.trial.scoring import CONSTRAINT_KEYS

SPECTUNE = Path(sys.executable).with_name("spectune")


def _expected_outcomes(study: optuna.Study) -> dict[int, Outcome]:
    return {p.number: p.outcome for p in points(study)}


def _fresh(copy: StudyCopy) -> optuna.Study:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.load_study(study_name=copy.name, storage=open_storage(copy.url))


def test_prepare_writes_what_the_dashboard_reads(levels: StudyCopy) -> None:
    study, _ = levels.open()
    outcomes = _expected_outcomes(study)
    infeasible = [n for n, o in outcomes.items() if o is not Outcome.FEASIBLE]
    assert infeasible, "the study needs OOM trials for this test"
    completed = [t for t in study.trials if t.state is TrialState.COMPLETE]
    # The trial loop writes no legacy list (Optuna 5 would count it twice): the dashboard does.
    assert all(LEGACY_CONSTRAINTS not in t.system_attrs for t in study.trials)
    # A real backend leaves a server log per trial, and per confirmation run.
    logs = levels.folder / "logs"
    (logs / "confirm-2").mkdir(parents=True)
    (logs / "trial-2.log").write_text("INFO vLLM API server version 0.32.0\n")
    (logs / "confirm-2" / "trial-0.log").write_text("INFO confirm run 0\n")

    info = prepare_dashboard(_fresh(levels), StudyPaths(levels.folder))
    assert info.constraints_fixed == len(completed)
    assert info.infeasible == len(infeasible)
    assert info.trials == len(study.trials)
    assert info.artifact_dir == levels.folder / "artifacts"

    reread = _fresh(levels)
    assert reread.metric_names == ["output_tok_s", "p95_ttft_ms"]
    for trial in reread.trials:
        legacy = trial.system_attrs[LEGACY_CONSTRAINTS]
        assert legacy == [trial.constraints[k] for k in CONSTRAINT_KEYS]
        assert any(c > 0 for c in legacy) == (outcomes[trial.number] is not Outcome.FEASIBLE)
        names = {m.filename for m in get_all_artifact_meta(trial, storage=storage_of(reread))}
        # Every trial gets its record; a trial's server logs join it.
        expected = {f"trial-{trial.number}.json"}
        if trial.number == 2:
            expected = {"trial-2.log", "confirm-2-run-0.log"}
        assert names == expected
    record = next(
        m for m in get_all_artifact_meta(reread.trials[infeasible[0]], storage=storage_of(reread))
    )
    body = json.loads((info.artifact_dir / record.artifact_id).read_text())
    assert body["status"] in ("OOM", "OOM predicted") and body["constraints"]["oom"] == 1.0

    again = prepare_dashboard(_fresh(levels), StudyPaths(levels.folder))
    assert (again.constraints_fixed, again.artifacts_added) == (0, 0)  # idempotent


@pytest.fixture(scope="module")
def dashboard(levels_master: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spectune dashboard`` on a copy of the study, as a user starts it."""
    studies = tmp_path_factory.mktemp("dashboard") / "studies"
    shutil.copytree(levels_master, studies)
    port = free_port()
    log = studies.parent / "dashboard.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(SPECTUNE), "dashboard", STUDY, "--studies-dir", str(studies), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/studies", timeout=2, trust_env=False).is_success:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "optuna-dashboard for study levels: http://127.0.0.1:" in log.read_text()


def _study_detail(base: str) -> tuple[int, dict[str, Any]]:
    summaries = httpx.get(f"{base}/api/studies", trust_env=False).json()["study_summaries"]
    assert [s["study_name"] for s in summaries] == [STUDY]
    study_id = summaries[0]["study_id"]
    return study_id, httpx.get(f"{base}/api/studies/{study_id}", trust_env=False).json()


def test_dashboard_api_shows_names_infeasible_trials_and_logs(
    dashboard: str, levels_master: Path
) -> None:
    study_id, detail = _study_detail(dashboard)
    assert detail["name"] == STUDY
    assert detail["objective_names"] == ["output_tok_s", "p95_ttft_ms"]
    assert detail["note"]["body"].startswith("## Recommended: ")  # the report's answer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        master = optuna.load_study(
            study_name=STUDY, storage=open_storage(f"sqlite:///{levels_master / f'{STUDY}.db'}")
        )
    outcomes = _expected_outcomes(master)
    trials = detail["trials"]
    assert len(trials) == len(master.trials)
    for trial in trials:
        infeasible = any(c > 0 for c in trial["constraints"])
        assert infeasible == (outcomes[trial["number"]] is not Outcome.FEASIBLE), trial["number"]
        assert [a["filename"] for a in trial["artifacts"]] == [f"trial-{trial['number']}.json"]
    assert sum(outcomes[t["number"]] is Outcome.OOM for t in trials) >= 1
    trial = trials[0]
    artifact = trial["artifacts"][0]["artifact_id"]
    got = httpx.get(
        f"{dashboard}/artifacts/{study_id}/{trial['trial_id']}/{artifact}", trust_env=False
    )
    assert got.status_code == 200 and got.json()["trial"] == 0


@pytest.mark.browser
def test_dashboard_page_in_headless_chromium(
    dashboard: str, tmp_path: Path, chromium: Path
) -> None:
    study_id, _ = _study_detail(dashboard)
    page = f"{dashboard}/dashboard/studies/{study_id}"
    dom = run_chromium(
        chromium, tmp_path / "p", page, "--virtual-time-budget=15000", "--dump-dom"
    ).stdout
    assert f"{STUDY} (id={study_id})" in dom
    note = run_chromium(
        chromium, tmp_path / "p", f"{page}/note", "--virtual-time-budget=15000", "--dump-dom"
    ).stdout
    assert "Recommended:" in note and "vllm serve --config best.yaml" in note  # the study note
    assert "output_tok_s" in dom and "p95_ttft_ms" in dom  # objective names, not "Objective 0"
    # The timeline chart has an "Infeasible" series only when some completed trial is.
    assert 'data-unformatted="Infeasible"' in dom
    trials = run_chromium(
        chromium,
        tmp_path / "p",
        f"{page}/trials?numbers=0",
        "--virtual-time-budget=15000",
        "--dump-dom",
    ).stdout
    assert "Trial 0" in trials and "trial-0.json" in trials  # the log record, downloadable
    shot = tmp_path / "dashboard.png"
    run_chromium(
        chromium,
        tmp_path / "p",
        page,
        "--virtual-time-budget=15000",
        "--window-size=1300,1000",
        f"--screenshot={shot}",
    )
    assert shot.is_file() and shot.stat().st_size > 20_000
