"""The GPU power limit as a searched dimension: set per trial, restored on every way out.

The process backend runs the shipped fake server; :class:`~tests.testbed.gpus.FakeGpus` stands
in for NVML, recording every limit set and refusing without privilege as NVML does. The
subprocess tests give the stand-in a file for its limits (a real GPU keeps its limit after the
process that set it dies) and run the study in ``power_driver.py``, which is then interrupted or
killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tests.testbed.docker_host import FAKE_SERVER
from tests.testbed.gpus import FakeGpus
from tests.trial.traffic_support import SMALL_SPACE, fake_request, small_space
from tuner.cli import app
from tuner.config.trial import TrialConfig
from tuner.config.vllm_args import parse_version
from tuner.errors import ConfigError
from tuner.launch.process import ProcessLauncher
from tuner.launch.runfiles import start_ticks
from tuner.results import TrialResult
from tuner.search.twin_screen import trial_config
from tuner.study import power_limit
from tuner.study.confirm import confirm
from tuner.study.optimize import optimize
from tuner.study.power_limit import ORIGINAL_ATTR, PowerLimits
from tuner.study.power_records import records_dir
from tuner.trial.backends.process import ProcessBackend
from tuner.trial.record import records

DRIVER = Path(__file__).with_name("power_driver.py")
ROOT = Path(__file__).resolve().parents[2]
LIMITS = [250, 300]
ORIGINAL_W = 450.0


@pytest.fixture(autouse=True)
def private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run files and power-limit records go to the test's own folder."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def _space_file(tmp_path: Path, limits: list[int] | None = LIMITS) -> Path:
    """The small traffic space on one server config, searching ``limits`` where given."""
    raw = json.loads(json.dumps(SMALL_SPACE))
    raw["search"].update({"draft": ["none"], "max_num_batched_tokens": [2048]})
    raw["workload"].update({"concurrency": [1], "temperature": 0.2, "requests": 3})
    if limits is not None:
        raw["search"]["power_limit_w"] = limits
    path = tmp_path / ("power.yaml" if limits else "plain.yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def gpus() -> FakeGpus:
    return FakeGpus(power_limit_w=ORIGINAL_W)


@pytest.fixture
def backend(tmp_path: Path, gpus: FakeGpus) -> Iterator[ProcessBackend]:
    launcher = ProcessLauncher(
        FAKE_SERVER,
        version=parse_version("0.32.0"),
        env={"SPECTUNE_SIM_SPEED": "20", "SPECTUNE_GPU_TEST": uuid.uuid4().hex},
        ready_timeout_s=60,
        poll_s=0.05,
        run_dir=tmp_path / "run-files",
    )
    made = ProcessBackend(launcher, request_timeout_s=30, gpu_monitor=gpus, sample_interval_s=0.02)
    yield made
    made.close()


def test_each_trial_runs_at_its_limit_on_one_server_and_the_original_comes_back(
    tmp_path: Path, gpus: FakeGpus, backend: ProcessBackend
) -> None:
    space = small_space(
        tmp_path,
        search={"draft": ["none"], "max_num_batched_tokens": [2048], "power_limit_w": LIMITS},
    )
    request = fake_request(tmp_path, space, 4)
    confirming = replace(request, allow_power_limit=True, confirm_top=1, confirm_repeats=1)
    result = optimize(confirming, backend=backend)

    trials = records(result.handle.get_trials(deepcopy=False))
    asked = [int(t.params["power_limit_w"]) for t in trials]
    assert set(asked) <= set(LIMITS) and len(trials) == 4
    for trial in trials:  # measured under the limit it asked for
        assert trial.gpu is not None
        assert list(trial.gpu["power_limit_w"]) == [float(trial.params["power_limit_w"])]
    # A trial of a config measured before reuses its result and sets nothing; a limit is set
    # when it changes, and the last set restores the original.
    ran = [int(t.params["power_limit_w"]) for t in trials if t.duplicate_of is None]
    assert set(ran) == set(LIMITS)
    # Confirmation measures the best config again at its own limit.
    (confirmed,) = result.confirmed
    again = next(int(t.params["power_limit_w"]) for t in trials if t.number == confirmed.trial)
    ran.append(again)
    changes = [w for i, w in enumerate(ran) if i == 0 or ran[i - 1] != w]
    sets = [w for _, w in gpus.limit_sets]
    assert sets[0] == ORIGINAL_W  # the privilege probe: the limit in force, set again
    assert sets[1:] == [*changes, ORIGINAL_W]
    # The power limit is no server flag: one server for every trial.
    assert sum(t.restarted for t in trials) == 1
    assert all(r.ok for r in confirmed.runs)
    assert gpus.limit_now() == ORIGINAL_W
    assert result.handle.user_attrs[ORIGINAL_ATTR] == {"0": ORIGINAL_W}
    assert list(records_dir().glob("*")) == []
    # Confirmed again from the original limit: the confirmed config's own is set first.
    with PowerLimits.open(gpus, space, "traffic") as power:
        confirm(result.handle, space, backend, 1, 1, log_dir=tmp_path / "again", power=power)
    assert [w for _, w in gpus.limit_sets][-3:] == [ORIGINAL_W, again, ORIGINAL_W]
    # The export says the limit its config was measured at: no vLLM flag carries it.
    assert result.best_yaml is not None and result.recommended is not None
    best = result.recommended.record.params["power_limit_w"]
    assert f"# measured at a GPU power limit of {best} W per GPU" in result.best_yaml.read_text()


def test_a_space_searching_the_limit_is_refused_without_the_flag(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--space",
            str(_space_file(tmp_path)),
            "--backend",
            "process",
            "--hardware",
            "4090x1",
            "--studies-dir",
            str(tmp_path / "studies"),
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "--allow-power-limit" in line and "search.power_limit_w" in line


def test_the_simulator_refuses_the_limit_it_has_no_power_model_for(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--space",
            str(_space_file(tmp_path)),
            "--backend",
            "sim",
            "--allow-power-limit",
            "--studies-dir",
            str(tmp_path / "studies"),
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "capped GPU slows down" in line and "--backend process" in line


def test_without_privilege_the_study_is_refused_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = FakeGpus(power_limit_w=ORIGINAL_W, privileged=False)
    monkeypatch.setattr(power_limit, "power_control", lambda backend, indices: gpus)
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--space",
            str(_space_file(tmp_path)),
            "--backend",
            "process",
            "--vllm-command",
            " ".join(FAKE_SERVER),
            "--hardware",
            "4090x1",
            "--allow-power-limit",
            "--no-prefetch",
            "--studies-dir",
            str(tmp_path / "studies"),
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "refuses to set GPU 0's power limit" in line and "Insufficient Permissions" in line
    assert gpus.limit_sets == [] and gpus.limit_now() == ORIGINAL_W
    assert list(records_dir().glob("*")) == []


def test_a_limit_the_gpu_does_not_take_is_refused_naming_its_range(
    tmp_path: Path, gpus: FakeGpus, backend: ProcessBackend
) -> None:
    space = small_space(tmp_path, search={"power_limit_w": [100, 300]})
    request = fake_request(tmp_path, space, 1)
    with pytest.raises(ConfigError, match=r"power_limit_w 100 W: GPU 0 takes 150-450 W"):
        optimize(replace(request, allow_power_limit=True), backend=backend)
    assert gpus.limit_sets == []


def _driver(tmp_path: Path, space: Path, study: str, trials: int, allow: bool) -> list[str]:
    spec = {
        "space": str(space),
        "studies_dir": str(tmp_path / "studies"),
        "study": study,
        "trials": trials,
        "limit_file": str(tmp_path / "gpu-limits.json"),
        "allow": allow,
    }
    return [sys.executable, str(DRIVER), json.dumps(spec)]


def _env(tmp_path: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": path}


def _limit(tmp_path: Path) -> float | None:
    try:
        return float(json.loads((tmp_path / "gpu-limits.json").read_text())["0"])
    except (OSError, ValueError, KeyError):
        return None


def _start_and_wait_for_a_lowered_limit(tmp_path: Path) -> subprocess.Popen[str]:
    study = subprocess.Popen(
        _driver(tmp_path, _space_file(tmp_path), "capped", trials=50, allow=True),
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while (_limit(tmp_path) or ORIGINAL_W) == ORIGINAL_W:
        if study.poll() is not None or time.monotonic() > deadline:
            study.kill()
            pytest.fail(f"no trial lowered the limit:\n{study.communicate()[0]}")
        time.sleep(0.05)
    time.sleep(0.5)  # a trial under way
    return study


def test_sigint_mid_study_restores_the_original_limit(tmp_path: Path) -> None:
    study = _start_and_wait_for_a_lowered_limit(tmp_path)
    study.send_signal(signal.SIGINT)
    output = study.communicate(timeout=60)[0]

    assert study.returncode != 0 and "DONE" not in output, output
    assert _limit(tmp_path) == ORIGINAL_W, output
    assert list(records_dir().glob("*")) == []
    stored = optuna.load_study(
        study_name="capped", storage=f"sqlite:///{tmp_path / 'studies' / 'capped.db'}"
    )
    assert stored.user_attrs[ORIGINAL_ATTR] == {"0": ORIGINAL_W}


def test_after_sigkill_the_next_run_restores_the_limit_from_the_record(tmp_path: Path) -> None:
    study = _start_and_wait_for_a_lowered_limit(tmp_path)
    study.kill()
    study.communicate(timeout=30)
    left = _limit(tmp_path)
    assert left in LIMITS  # SIGKILL runs nothing: the lowered limit stays
    (record,) = records_dir().glob("*.json")
    assert json.loads(record.read_text())["original_w"] == {"0": ORIGINAL_W}

    # The next run on the host, a study that does not touch the limit, restores it first.
    after = subprocess.run(
        _driver(tmp_path, _space_file(tmp_path, None), "next", trials=1, allow=False),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert after.returncode == 0, after.stdout + after.stderr
    said = [line for line in after.stdout.splitlines() if "power limit" in line]
    assert said == [
        f"note: study capped ended without restoring the GPUs' power limit (killed): restored "
        f"GPU 0 {left:g} W -> {ORIGINAL_W:g} W"
    ]
    assert _limit(tmp_path) == ORIGINAL_W
    assert list(records_dir().glob("*")) == []


def test_a_second_study_may_not_set_a_limit_a_live_one_holds(
    tmp_path: Path, gpus: FakeGpus, backend: ProcessBackend
) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = records_dir() / f"{holder.pid}.json"
        record.parent.mkdir(parents=True)
        started = start_ticks(holder.pid)
        original = {
            "pid": holder.pid,
            "started": started,
            "study": "first",
            "original_w": {"0": 450},
        }
        record.write_text(json.dumps(original))
        space = small_space(tmp_path, search={"power_limit_w": LIMITS})
        request = replace(fake_request(tmp_path, space, 1), allow_power_limit=True)
        with pytest.raises(ConfigError, match=r"study first \(process \d+\) is setting the power"):
            optimize(request, backend=backend)
        assert gpus.limit_sets == [] and record.exists()  # a live owner's record is its own
    finally:
        holder.kill()
        holder.wait()


class ServerKilledOnce(ProcessBackend):
    """The process backend whose first measured server is SIGKILLed as its measuring begins."""

    killed: int | None = None

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        if self.killed is None and self.launcher.pid is not None:
            self.killed = self.launcher.pid
            os.kill(self.killed, signal.SIGKILL)
        return super().measure(config, concurrency, seed)


def test_a_server_killed_mid_trial_fails_that_trial_and_the_limit_still_comes_back(
    tmp_path: Path, gpus: FakeGpus, backend: ProcessBackend
) -> None:
    killing = ServerKilledOnce(
        backend.launcher, request_timeout_s=30, gpu_monitor=gpus, sample_interval_s=0.02
    )
    space = small_space(
        tmp_path,
        search={"draft": ["none"], "max_num_batched_tokens": [2048], "power_limit_w": LIMITS},
    )
    request = replace(fake_request(tmp_path, space, 2), allow_power_limit=True)
    result = optimize(request, backend=killing)

    assert killing.killed is not None
    states = [t.state for t in result.handle.get_trials(deepcopy=False)]
    assert optuna.trial.TrialState.FAIL in states, states  # the killed server's trial
    assert optuna.trial.TrialState.COMPLETE in states, states  # the study went on
    assert len(gpus.limit_sets) > 2  # the probe, at least one trial's limit, the restore
    assert gpus.limit_now() == ORIGINAL_W
    assert list(records_dir().glob("*")) == []


def test_the_twin_reads_a_proposal_without_a_limit_at_the_highest_one(tmp_path: Path) -> None:
    # The spectune sampler's twin has no power model: its proposals name no limit, the
    # sampler picks one for the trial, and the twin forecasts them as at (nearly) full power.
    space = small_space(tmp_path, search={"power_limit_w": LIMITS})
    params = {"draft": "none", "gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048}
    assert trial_config(space, params).power_limit_w == max(LIMITS)
    assert trial_config(space, {**params, "power_limit_w": 250}).power_limit_w == 250
