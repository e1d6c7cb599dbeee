"""Several worker processes on one study through a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

ENDED = (TrialState.COMPLETE, TrialState.PRUNED)  # a pruned trial counts in the budget

pytestmark = pytest.mark.postgres

SPECTUNE = [sys.executable, "-m", "tuner"]
SPACE = str(Path(__file__).with_name("small-space.yaml"))


def _spectune(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPECTUNE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _ran(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """Trials that launched something: neither a reused duplicate nor a failed attempt."""
    return [
        t for t in trials if t.state is TrialState.COMPLETE and "duplicate_of" not in t.user_attrs
    ]


def test_three_workers_share_one_budget(
    pg_url: str, pg_storage: optuna.storages.RDBStorage, tmp_path: Path
) -> None:
    name = f"w3-{uuid.uuid4().hex[:8]}"
    proc = _spectune(
        "optimize",
        "--backend",
        "sim",
        "--space",
        SPACE,
        "--study",
        name,
        "--storage",
        pg_url,
        "--workers",
        "3",
        "--trials",
        "12",
        "--sim-speed",
        "40",
        "--studies-dir",
        str(tmp_path),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    study = optuna.load_study(study_name=name, storage=pg_storage)
    trials = study.get_trials()
    assert len(trials) == 12
    assert all(t.state in ENDED for t in trials)  # measured in rounds: some pruned
    workers = {t.user_attrs["worker"].rsplit("/", 1)[1] for t in trials}
    assert len(workers) >= 2  # the work really was shared
    ran = _ran(trials)
    configs = [json.dumps(t.params, sort_keys=True) for t in ran]
    # A config is measured once: a repeat of a finished one is reused, and one handed to two
    # workers at the same moment runs on one while the other waits for its result.
    assert len(configs) == len(set(configs))
    # The same records as a single-worker run on SQLite.
    single = _spectune(
        "optimize",
        "--backend",
        "sim",
        "--space",
        SPACE,
        "--study",
        "one",
        "--trials",
        "2",
        "--studies-dir",
        str(tmp_path),
        "--json",
    )
    assert single.returncode == 0, single.stderr
    local = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'one.db'}")
    one = optuna.load_study(study_name="one", storage=local)
    assert set(one.trials[0].user_attrs) <= set(trials[0].user_attrs) | {"summary", "levels"}
    local.engine.dispose()
    assert json.loads(proc.stdout)["recommended"]["source"] == "simulated"


def _worker_pid(parent: int, worker_id: str) -> int:
    for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if (
            b"--worker-id" in cmdline
            and cmdline[cmdline.index(b"--worker-id") + 1] == worker_id.encode()
        ):
            return int(child)
    raise AssertionError(f"worker {worker_id} not found")


def test_killed_worker_is_recovered_by_the_others(
    pg_url: str, pg_storage: optuna.storages.RDBStorage, tmp_path: Path
) -> None:
    name = f"kill-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SPECTUNE_HEARTBEAT_S": "1", "SPECTUNE_GRACE_S": "4"}
    parent = subprocess.Popen(
        [
            *SPECTUNE,
            "optimize",
            "--backend",
            "sim",
            "--space",
            SPACE,
            "--study",
            name,
            "--storage",
            pg_url,
            "--workers",
            "3",
            "--trials",
            "9",
            "--sim-speed",
            "8",
            "--studies-dir",
            str(tmp_path),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                study = optuna.load_study(study_name=name, storage=pg_storage)
            except KeyError:
                continue
            for t in study.get_trials(states=(TrialState.RUNNING,)):
                # Sampling may still be under way: the kill can land between two suggestions.
                if t.user_attrs.get("worker", "").endswith("/1") and t.params:
                    victim = t.number
        assert victim is not None, "worker 1 never started a trial"
        os.kill(_worker_pid(parent.pid, "1"), signal.SIGKILL)
        _, err = parent.communicate(timeout=240)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 2 and "1 of 3 workers failed" in err
    study = optuna.load_study(study_name=name, storage=pg_storage)
    trials = study.get_trials()
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    assert sum(states.count(state) for state in ENDED) == 9
    failed = [t for t in trials if t.state is TrialState.FAIL]
    assert [t.number for t in failed] == [victim]
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == victim]
    assert len(retries) == 1 and retries[0].state in ENDED
    # The retry runs the dead trial's config: what it had sampled is fixed, and a trial killed
    # between two suggestions gets the rest sampled afresh.
    assert failed[0].params.items() <= retries[0].params.items()


def test_worker_errors_are_one_line(pg_url: str, tmp_path: Path) -> None:
    name = f"hw-{uuid.uuid4().hex[:8]}"
    made = _spectune(
        "optimize",
        "--backend",
        "sim",
        "--space",
        SPACE,
        "--study",
        name,
        "--storage",
        pg_url,
        "--trials",
        "1",
        "--studies-dir",
        str(tmp_path),
    )
    assert made.returncode == 0, made.stderr
    cases = [
        (
            [
                "worker",
                "--study",
                name,
                "--storage",
                pg_url,
                "--backend",
                "sim",
                "--hardware",
                "4090x1",
            ],
            "this worker has 1x RTX 4090",
        ),
        (
            ["worker", "--study", "missing-study", "--storage", pg_url, "--backend", "sim"],
            "no study 'missing-study'",
        ),
        (
            [
                "worker",
                "--study",
                name,
                "--storage",
                "postgresql+psycopg://spectune:wrong-pass@127.0.0.1:5432/spectune",
            ],
            "cannot open storage",
        ),
        (
            ["worker", "--study", name, "--storage", "postgresql+psycopg://x@127.0.0.1:1/db"],
            "cannot open storage",
        ),
        (["worker", "--study", name, "--storage", "postgres:/broken"], "storage"),
        (
            [
                "optimize",
                "--backend",
                "sim",
                "--workers",
                "2",
                "--studies-dir",
                str(tmp_path / "x"),
            ],
            "PostgreSQL",
        ),
    ]
    for args, message in cases:
        proc = _spectune(*args, timeout=60)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(lines) == 1 and message in lines[0], (args, proc.stderr)
        assert "wrong-pass" not in proc.stderr
    assert not (tmp_path / "x").exists()  # refused before anything was written
