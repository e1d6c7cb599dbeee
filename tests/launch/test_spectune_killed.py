"""A real ``spectune optimize --backend process`` killed mid-trial leaves nothing running.

The fake server stands in for ``vllm serve`` (with a child, as vLLM's engine core is one).
SIGKILL runs no clean-up in spectune: the server's leader dies with it (PR_SET_DEATHSIG), its
guardian stops the rest of its process group, and the next run removes the run file. SIGTERM and
SIGHUP unwind: the running trial fails, the server goes, the exit status is 128 + the signal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import optuna
import pytest

from tests.testbed.processes import is_running, running_in_group

SPECTUNE = str(Path(sys.executable).with_name("spectune"))
FAKE_VLLM = f"{sys.executable} -m tuner.sim.server"
_CHILD = re.compile(r"spawned child process (\d+)")


def _optimize(tmp_path: Path, study: str, trials: int) -> list[str]:
    return [
        SPECTUNE,
        "optimize",
        "--hardware",
        "4090x1",
        "--space",
        "qwen2.5-14b-awq-4090x1",
        "--backend",
        "process",
        "--vllm-command",
        FAKE_VLLM,
        "--study",
        study,
        "--trials",
        str(trials),
        "--confirm-top",
        "0",
        "--no-prefetch",  # the fake server loads no weights
        "--studies-dir",
        str(tmp_path / "studies"),
    ]


def _wait_for(
    what: str, check: Callable[[], bool], log: Path | None = None, timeout_s: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}:\n{log.read_text() if log else ''}")
        time.sleep(0.1)


def _ready(run_files: Path) -> bool:
    for path in run_files.glob("*.json"):
        port = json.loads(path.read_text())["port"]
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
    return False


def test_sigkill_mid_trial_leaves_no_server_or_child(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_files = state / "spectune" / "servers"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "SPECTUNE_SIM_FAULT": "spawn-child"}
    with (tmp_path / "first.log").open("wb") as log:
        first = subprocess.Popen(
            _optimize(tmp_path, "killed", trials=3),
            env={**env, "SPECTUNE_SIM_SPEED": "1"},  # real time: a trial takes a while
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for("the first trial's server", lambda: _ready(run_files), tmp_path / "first.log")
        (record,) = (json.loads(p.read_text()) for p in run_files.glob("*.json"))
        time.sleep(1.0)  # measuring now
        first.kill()
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    server = record["pid"]
    trial_logs = list((tmp_path / "studies").rglob("trial-*.log"))
    match = _CHILD.search("".join(p.read_text() for p in trial_logs))
    assert match, trial_logs
    child = int(match.group(1))
    _wait_for("the server to die with spectune", lambda: not is_running(server), timeout_s=10)
    # The engine-core stand-in, a grandchild out of the kernel's reach: the guardian's to stop.
    _wait_for("its child to follow", lambda: not is_running(child), timeout_s=10)

    second = subprocess.run(
        _optimize(tmp_path, "next", trials=1),
        env={**env, "SPECTUNE_SIM_SPEED": "1000"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert second.returncode == 0, second.stdout + second.stderr
    assert not is_running(child)
    assert running_in_group(server) == []
    assert list(run_files.iterdir()) == []  # the dead run's file and the second run's own


def test_sighup_mid_trial_fails_the_trial_and_stops_the_server(tmp_path: Path) -> None:
    # SIGTERM takes the same path (tests/launch/test_process.py checks its 143 below the CLI).
    signum = signal.SIGHUP
    state = tmp_path / "state"
    run_files = state / "spectune" / "servers"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "SPECTUNE_SIM_SPEED": "1"}
    output = tmp_path / "spectune.log"
    with output.open("wb") as log:
        proc = subprocess.Popen(
            _optimize(tmp_path, "hung-up", trials=3), env=env, stdout=log, stderr=log
        )
    try:
        _wait_for("the first trial's server", lambda: _ready(run_files), output)
        (record,) = (json.loads(p.read_text()) for p in run_files.glob("*.json"))
        proc.send_signal(signum)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = output.read_text()

    assert proc.returncode == 128 + signum
    assert f"stopped by {signum.name}: the running trial failed" in stderr
    assert running_in_group(record["pid"]) == []
    assert list(run_files.iterdir()) == []
    (db,) = (tmp_path / "studies").glob("*.db")
    states = [
        t.state for t in optuna.load_study(study_name="hung-up", storage=f"sqlite:///{db}").trials
    ]
    assert optuna.trial.TrialState.RUNNING not in states, states
    assert states.count(optuna.trial.TrialState.FAIL) == 1, states
