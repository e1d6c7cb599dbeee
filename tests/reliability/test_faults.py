"""The fault table: ``spectune optimize`` against the shipped fake server and each of its faults.

Each row runs the real command (typer's runner, in this process) with the process backend and
``python -m tuner.sim.server`` as ``vllm serve``, and asserts what a user and an operator see:
the exit status, no traceback, a study whose trials all ended (none RUNNING), no secret in the
log file, the database or the output, and no process left running that carries this test's
marker in its environment (the server, its child, the guardian).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import sqlalchemy
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.search.twin_steer import PRIOR_ATTR
from tuner.sim.server.faults import FAULT_NAMES

FAKE_VLLM = f"{sys.executable} -m tuner.sim.server"
SPECTUNE = str(Path(sys.executable).with_name("spectune"))
SECRET = "hf_fault_table_secret_0123456789"
SPACE: dict[str, Any] = {
    "name": "faults",
    "hardware": "4090x1",
    "target": "Qwen/Qwen2.5-14B-Instruct-AWQ",
    "vllm": {"version": "0.32.0"},
    "slo": {"ttft_ms": 5000},
    "workload": {
        "prompt_set": "chat",
        "input_tokens": 32,
        "output_tokens": 8,
        "concurrency": [1],
        "temperature": [0.0],
        "requests": 4,
        "warmup": 0,
    },
    "search": {
        "draft": ["none"],
        "gpu_memory_utilization": 0.9,
        "max_num_batched_tokens": 2048,
    },
}


@dataclass(frozen=True)
class Run:
    """One finished ``spectune optimize``: what it printed and the study it left."""

    exit_code: int
    output: str
    trials: list[optuna.trial.FrozenTrial]
    folder: Path


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A value only this test's processes carry; asserts none is left when the test ends."""
    value = uuid.uuid4().hex
    monkeypatch.setenv("SPECTUNE_FAULT_TEST", value)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "50")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    yield value
    assert _carrying(value) == []
    assert list((tmp_path / "state").rglob("*.json")) == []  # no run file: nothing to sweep


def _carrying(value: str) -> list[int]:
    """Live processes other than this one whose environment holds ``value``."""
    found = []
    needle = f"SPECTUNE_FAULT_TEST={value}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _optimize(
    tmp_path: Path,
    *extra: str,
    folder: Path | None = None,
    command: str = FAKE_VLLM,
    space_data: dict[str, Any] = SPACE,
) -> Run:
    space = _write_space(tmp_path, space_data)
    folder = folder or tmp_path / "studies"
    args = [
        "optimize",
        "--space",
        str(space),
        "--backend",
        "process",
        "--hardware",
        "4090x1",
        "--vllm-command",
        command,
        "--study",
        "f",
        "--trials",
        "1",
        "--studies-dir",
        str(folder),
        "--no-prefetch",
        "--confirm-top",
        "0",
        "--request-timeout",
        "1",
        "--ready-timeout",
        "30",
        *(extra or ("--sampler", "random")),
    ]
    result = CliRunner().invoke(app, args)
    storage = f"sqlite:///{folder / 'f.db'}"
    trials = optuna.load_study(study_name="f", storage=storage).trials
    return Run(result.exit_code, result.output, trials, folder)


def _assert_clean(run: Run) -> None:
    assert "Traceback" not in run.output, run.output
    assert all(t.state.is_finished() for t in run.trials), [t.state for t in run.trials]
    assert SECRET not in run.output
    for path in run.folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


# Each fake-server fault (SPECTUNE_SIM_FAULT) and what the trial records: None for a trial that
# completes; alloc-at-start has a test of its own (it needs a memory cap to fail).
FAULT_ROWS: list[tuple[str, str | None]] = [
    ("oom-at-start", "out of memory"),
    ("crash-at-start", "did not start"),
    ("sigkill-at-start", "SIGKILL"),
    ("crash-after=10", "died"),
    ("hang", "timed out"),
    ("hang-after=6", "timed out"),
    ("http-500-every=2", "HTTP 500"),
    ("malformed-sse", "malformed SSE"),
    ("drop-mid-stream", "dropped mid-stream"),
    ("error-event", "error mid-stream"),
    ("no-usage", "no usage"),
    ("slow-start=0.5", None),
    ("attention-fallback", None),
    ("spawn-child", None),
    # SIGKILL after the launcher's 20 s grace; the marker fixture sees nothing left.
    ("ignore-sigterm,spawn-child,hang", "timed out"),
    ("log-env=HF_TOKEN", None),
    ("log-env=HF_TOKEN,crash-at-start", "did not start"),
]
OWN_TESTS = ("alloc-at-start",)
RELIABILITY_PAGE = Path(__file__).parents[2] / "docs" / "contributors" / "reliability.md"


def test_the_table_and_its_page_cover_every_fake_server_fault() -> None:
    rows = {spec.partition("=")[0] for fault, _ in FAULT_ROWS for spec in fault.split(",")}
    page = RELIABILITY_PAGE.read_text()
    for name in FAULT_NAMES:
        bare = name.partition("=")[0].partition("[")[0]
        assert bare in rows or bare in OWN_TESTS, f"no row for fault {bare}"
        assert f"`{bare}" in page, f"{RELIABILITY_PAGE.name} does not list fault {bare}"


@pytest.mark.parametrize(("fault", "failure"), FAULT_ROWS)
def test_a_fake_server_fault_ends_the_trial_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, fault: str, failure: str | None
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", fault)
    run = _optimize(tmp_path)
    assert run.exit_code == 0, run.output  # a failed trial is a result, not a failed command
    _assert_clean(run)
    (trial,) = run.trials
    told = str(trial.user_attrs.get("failure", ""))
    if fault.startswith("log-env"):  # the server printed its token: the line is kept, redacted
        (log,) = run.folder.rglob("trial-*.log")
        assert "environment HF_TOKEN=[redacted]" in log.read_text()
        if failure is not None:
            assert "environment HF_TOKEN=[redacted]" in str(trial.user_attrs["log_tail"])
    if fault.startswith("ignore-sigterm"):  # the log says why the server was killed
        (log,) = run.folder.rglob("trial-*.log")
        assert "ignored SIGTERM for 20 s; its process group was killed" in log.read_text()
    if failure is None:
        assert trial.state is optuna.trial.TrialState.COMPLETE, told
    else:
        assert failure.lower() in told.lower(), told


_MEMORY_CAP = 256 * 1024 * 1024  # far above the fake server's needs, far below what it takes
_CGROUPS = Path("/sys/fs/cgroup/memory")  # cgroup v1, as on this machine kind


@pytest.fixture(params=["address-space", "cgroup"])
def capped_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The fake server under a memory cap: ``RLIMIT_AS`` (its allocation fails: MemoryError) or
    a memory cgroup (the kernel's OOM killer ends it with SIGKILL; as root, else skipped)."""
    wrapper = tmp_path / f"capped-by-{request.param}.py"
    if request.param == "address-space":
        cap = f"resource.setrlimit(resource.RLIMIT_AS, ({_MEMORY_CAP}, {_MEMORY_CAP}))"
        group = None
    else:
        group = _CGROUPS / f"spectune-test-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(_MEMORY_CAP))
        except OSError as exc:
            if group.is_dir():
                group.rmdir()
            pytest.skip(f"cannot make a memory cgroup here: {exc}")
        cap = f"pathlib.Path({str(group / 'cgroup.procs')!r}).write_text(str(os.getpid()))"
    wrapper.write_text(
        "import os, pathlib, resource, runpy\n"
        f"{cap}\n"
        'runpy.run_module("tuner.sim.server", run_name="__main__", alter_sys=True)\n'
    )
    yield f"{sys.executable} {wrapper}"
    if group is not None:  # fails (EBUSY) if a process were left in it
        group.rmdir()


def test_a_server_that_runs_out_of_memory_at_start_is_oom_and_the_study_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, capped_server: str
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", "alloc-at-start=2048")
    memory = {"gpu_memory_utilization": {"low": 0.8, "high": 0.9}}  # three configs, not one
    space = {**SPACE, "search": {**SPACE["search"], **memory}}
    args = ("--sampler", "random", "--trials", "3")
    run = _optimize(tmp_path, *args, command=capped_server, space_data=space)
    # Three failed starts in a row would stop the study; an OOM is a result the sampler learns.
    assert run.exit_code == 0, run.output
    _assert_clean(run)
    assert [t.user_attrs.get("status") for t in run.trials] == ["OOM"] * 3
    # What says so: Python's MemoryError under the cap, the kernel's kill in the cgroup.
    said = "MemoryError" if "capped-by-address-space" in capped_server else "OOM-killed"
    for trial in run.trials:
        assert str(trial.user_attrs["failure"]).startswith("vLLM did not start (oom")
        assert said in str(trial.user_attrs["failure"])


@pytest.fixture(scope="module")
def sim_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated study for the dashboard to show."""
    folder = tmp_path_factory.mktemp("dashboard") / "studies"
    args = ["optimize", "--hardware", "4090x1", "--backend", "sim", "--trials", "2"]
    result = CliRunner().invoke(app, [*args, "--study", "d", "--studies-dir", str(folder)])
    assert result.exit_code == 0, result.output
    return folder


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
)
def test_the_dashboard_stops_on_the_first_signal_while_answering(
    sim_study: Path, signum: int, status: int
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def ask() -> None:  # keeps a request in flight when the signal lands
        with httpx.Client(trust_env=False, timeout=5) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.TransportError):
                    client.get(f"{base}/api/studies")

    askers = [threading.Thread(target=ask) for _ in range(2)]
    # The with block closes its stderr pipe however the test ends: a failed one leaks nothing.
    with subprocess.Popen(
        [SPECTUNE, "dashboard", "d", "--studies-dir", str(sim_study), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _wait_answering(f"{base}/api/studies", proc)
            for asker in askers:
                asker.start()
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=60)  # a swallowed signal would run on past this
        finally:
            stop.set()
            if proc.poll() is None:
                proc.kill()
    for asker in askers:
        asker.join()
    assert proc.returncode == status
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("dashboard ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_answering(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2, trust_env=False).is_success:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_an_unwritable_state_folder_stops_the_run_before_a_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    del marker
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # a file where the folder should be: unwritable even for root
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    run = _optimize(tmp_path)
    assert run.exit_code == 2
    _assert_one_line(run, "set XDG_STATE_HOME to a writable folder")
    assert [t.state for t in run.trials] == [optuna.trial.TrialState.FAIL]
    assert list(run.folder.rglob("trial-*.log")) == []  # no server was started

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    again = _optimize(tmp_path)  # the next run resumes the study
    assert again.exit_code == 0, again.output
    assert [t.state.name for t in again.trials] == ["FAIL", "COMPLETE"]


def _assert_one_line(run: Run, says: str) -> None:
    """One error line, the last thing printed (above it, the progress table of trials run)."""
    _assert_clean(run)
    assert run.output.count("error: ") == 1, run.output
    error = run.output.rpartition("error: ")[2].strip()
    assert "\n" not in error and says in error, run.output


def _write_space(tmp_path: Path, data: dict[str, Any] = SPACE) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_calibrate_refuses_a_server_that_loses_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", "http-500-every=3")
    folder = tmp_path / "studies"
    args = ["calibrate", "--space", str(_write_space(tmp_path)), "--backend", "process"]
    fake = ["--vllm-command", FAKE_VLLM, "--studies-dir", str(folder), "--request-timeout", "1"]
    result = CliRunner().invoke(app, [*args, *fake])
    assert result.exit_code == 2, result.output
    run = Run(result.exit_code, result.output, [], folder)
    _assert_one_line(run, "runs lost requests")
    assert list(folder.rglob("calibration/*.json")) == []  # nothing written


def test_a_measured_study_never_starts_from_a_simulated_calibration(
    tmp_path: Path, marker: str
) -> None:
    del marker
    folder = tmp_path / "studies"
    args = ["calibrate", "--space", str(_write_space(tmp_path)), "--backend", "sim"]
    result = CliRunner().invoke(app, [*args, "--studies-dir", str(folder)])
    assert result.exit_code == 0, result.output
    (calibration,) = folder.glob("calibration/*.json")
    assert json.loads(calibration.read_text())["source"] == "simulated"
    run = _optimize(tmp_path, "--sampler", "spectune")
    assert run.exit_code == 0, run.output
    study = optuna.load_study(study_name="f", storage=f"sqlite:///{folder / 'f.db'}")
    assert PRIOR_ATTR not in study.user_attrs


def test_estimate_refuses_a_study_of_another_model_or_gpu(tmp_path: Path) -> None:
    folder = tmp_path / "studies"
    args = ["optimize", "--hardware", "4090x1", "--backend", "sim", "--trials", "2"]
    made = CliRunner().invoke(app, [*args, "--study", "t", "--studies-dir", str(folder)])
    assert made.exit_code == 0, made.output
    estimate = ["estimate", "--hardware", "4090x2", "--model", "Qwen/Qwen2.5-32B-Instruct-AWQ"]
    result = CliRunner().invoke(app, [*estimate, "--study", "t", "--studies-dir", str(folder)])
    assert result.exit_code == 2
    _assert_one_line(Run(2, result.output, [], folder), "its twin does not apply")


@pytest.mark.postgres
def test_a_killed_workers_server_and_its_child_are_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, pg_url: str
) -> None:
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", "spawn-child")
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "1")  # real time: the kill lands mid-measure
    monkeypatch.setenv("SPECTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("SPECTUNE_GRACE_S", "4")
    slow = {**SPACE, "workload": {**SPACE["workload"], "output_tokens": 64, "requests": 4}}
    # Two workers handed one config measure it once (tuner/study/claims.py): give them several.
    slow["search"] = {**SPACE["search"], "max_num_batched_tokens": [1024, 2048, 4096, 8192]}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(slow))
    name = f"orphans-{uuid.uuid4().hex[:8]}"
    args = [*_fake_study(tmp_path, name), "--storage", pg_url, "--workers", "2"]
    # Four trials: a worker whose first draw repeats the other's waits for it, then draws again.
    # The with block closes its stderr pipe however the test ends: a failed one leaks nothing.
    with subprocess.Popen(
        [SPECTUNE, *args, "--trials", "4"], stderr=subprocess.PIPE, text=True
    ) as parent:
        try:
            server, owner = _a_workers_server(tmp_path / "state", parent.pid)
            assert len(_in_group(server)) >= 2  # the server and the child it spawned
            os.kill(owner, signal.SIGKILL)
            deadline = time.monotonic() + 15
            while _in_group(server) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _in_group(server) == []  # no orphan waits for the next run's sweep
            _, err = parent.communicate(timeout=120)
        finally:
            if (
                parent.poll() is None
            ):  # a failed assertion: its workers run in sessions of their own
                for pid in _carrying(marker):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
    assert parent.returncode == 2 and "1 of 2 workers failed" in err, err
    storage = optuna.storages.RDBStorage(pg_url)
    try:
        trials = optuna.load_study(study_name=name, storage=storage).trials
    finally:
        storage.engine.dispose()
    assert all(t.state.is_finished() for t in trials)


def _fake_study(tmp_path: Path, name: str) -> list[str]:
    return [
        "optimize",
        "--space",
        str(tmp_path / "space.yaml"),
        "--hardware",
        "4090x1",
        "--backend",
        "process",
        "--vllm-command",
        FAKE_VLLM,
        "--study",
        name,
        "--studies-dir",
        str(tmp_path / "studies"),
        "--no-prefetch",
        "--confirm-top",
        "0",
        "--sampler",
        "random",
    ]


def _a_workers_server(state: Path, parent: int) -> tuple[int, int]:
    """The PID of the first server a worker runs with its child, and the worker's.

    Whichever worker it is: the first config one claims, the other waits on (tuner/study/claims.py),
    and random draws may repeat, so a given worker need not run a server at all.
    """
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workers = {
            int(pid) for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        }
        for path in state.rglob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(path.read_text())
                if record["owner_pid"] in workers and len(_in_group(record["pid"])) >= 2:
                    return record["pid"], record["owner_pid"]
        time.sleep(0.1)
    raise AssertionError("no worker ran a server with a child")


def _in_group(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (as root; elsewhere the test is skipped)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_full_disk_is_one_line_and_the_study_resumes(
    tmp_path: Path, marker: str, small_disk: Path
) -> None:
    del marker
    studies = small_disk / "studies"
    first = _optimize(tmp_path, folder=studies)
    assert first.exit_code == 0, first.output
    filler = small_disk / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    full = _optimize(tmp_path, folder=studies)
    assert full.exit_code == 2, full.output
    _assert_one_line(full, "free some")
    filler.unlink()
    again = _optimize(tmp_path, folder=studies)
    assert again.exit_code == 0, again.output
    assert "COMPLETE" in [t.state.name for t in again.trials[1:]]


def _fill(disk: Path) -> Path:
    """Writes zeros into ``disk`` until it is full; returns the file to delete."""
    filler = disk / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()
    return filler


def _a_server_answers(state: Path) -> bool:
    """Waits until a server recorded in ``state`` answers ``/health``; False after a minute.

    Faults land then, not as soon as a trial is RUNNING: between Optuna's ``ask`` and the
    trial's first heartbeat, a database loss leaves a trial no heartbeat check ever fails.
    """
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in state.rglob("*.json"):  # a server's run file
            with contextlib.suppress(OSError, ValueError, KeyError, httpx.TransportError):
                port = json.loads(path.read_text())["port"]
                if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False).is_success:
                    return True
        time.sleep(0.05)
    return False


def test_a_disk_filling_mid_trial_is_one_line_and_the_study_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, small_disk: Path
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "1")  # real time: the disk fills while it measures
    monkeypatch.setenv("SPECTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("SPECTUNE_GRACE_S", "2")
    slow = {**SPACE, "workload": {**SPACE["workload"], "output_tokens": 48}}  # ~8 s to measure
    _write_space(tmp_path, slow)
    studies = small_disk / "studies"
    args = [*_fake_study(tmp_path, "f"), "--studies-dir", str(studies), "--trials", "1"]
    filled: list[Path] = []

    def fill_when_measuring() -> None:
        if _a_server_answers(tmp_path / "state"):
            time.sleep(0.5)  # into the measurement
            filled.append(_fill(small_disk))

    filler = threading.Thread(target=fill_when_measuring)
    filler.start()
    # Its own process, as the user runs it; the grace period is read when spectune starts.
    full = subprocess.run([SPECTUNE, *args], capture_output=True, text=True, timeout=120)
    filler.join()
    assert filled, "the trial ended before the disk was filled"
    assert full.returncode == 2, full.stderr
    _assert_one_line(Run(2, full.stderr, [], studies), "free some")
    assert _integrity(studies / "f.db") == "ok"
    filled[0].unlink()
    time.sleep(2.5)  # SPECTUNE_GRACE_S: the cut trial's heartbeat is stale, the next run fails it
    fast = {**os.environ, "SPECTUNE_SIM_SPEED": "50"}  # nothing to race now
    again = subprocess.run([SPECTUNE, *args], capture_output=True, text=True, timeout=120, env=fast)
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(study_name="f", storage=f"sqlite:///{studies / 'f.db'}").trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert _integrity(studies / "f.db") == "ok"


def _integrity(database: Path) -> str:
    with contextlib.closing(sqlite3.connect(database)) as connection:
        verdict: str = connection.execute("PRAGMA integrity_check").fetchone()[0]
        return verdict


class _Proxy:
    """A TCP relay to PostgreSQL that the test can cut: the database "goes away" mid-study."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
                self.sockets += [client, server]
                for a, b in ((client, server), (server, client)):
                    relay = threading.Thread(target=self._relay, args=(a, b), daemon=True)
                    self.threads.append(relay)
                    relay.start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        # Shutting the listener down wakes the blocked accept(); once that thread is done,
        # every socket it made is in the list.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.threads[0].join(timeout=5)
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self.threads[1:]:
            thread.join(timeout=5)


@pytest.mark.postgres
def test_a_database_lost_mid_study_is_one_line_and_the_study_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, pg_url: str
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "2")  # a trial lasts long enough to cut under it
    monkeypatch.setenv("SPECTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("SPECTUNE_GRACE_S", "2")
    url = sqlalchemy.engine.make_url(pg_url)
    proxy = _Proxy((url.host or "127.0.0.1", url.port or 5432))
    relayed = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    name = f"lost-{uuid.uuid4().hex[:8]}"
    storage = optuna.storages.RDBStorage(pg_url)

    def cut_when_running() -> None:
        _a_server_answers(tmp_path / "state")
        proxy.cut()

    cutter = threading.Thread(target=cut_when_running)
    cutter.start()
    args = [*_fake_study(tmp_path, name)[1:], "--storage", relayed, "--trials", "2"]
    _write_space(tmp_path)
    # Its own process: the pool of dead connections it drops warns as it is collected.
    lost = subprocess.run(
        [SPECTUNE, "optimize", *args], capture_output=True, text=True, timeout=120, check=False
    )
    cutter.join()
    try:
        assert lost.returncode == 2, lost.stderr
        _assert_one_line(Run(2, lost.stderr, [], tmp_path / "studies"), "database went away")
        assert "spectune@" not in lost.stderr  # no credentials
        time.sleep(
            2.5
        )  # SPECTUNE_GRACE_S: the cut trial's heartbeat is stale, the next run fails it
        # Its own process too: the grace period is read when spectune starts.
        again = subprocess.run(
            [SPECTUNE, "optimize", *args[:-4], "--storage", pg_url, "--trials", "1"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 0, again.stderr
        trials = optuna.load_study(study_name=name, storage=storage).trials
        assert all(t.state.is_finished() for t in trials), [t.state for t in trials]
    finally:
        storage.engine.dispose()


_PG_BIN = Path("/usr/lib/postgresql/15/bin")  # Debian's PostgreSQL 15, as on this machine kind


class _OwnPostgres:
    """A PostgreSQL server of the test's own (initdb in a temporary folder, a free port), so the
    test can stop it as an operator would (``pg_ctl stop``) without touching anyone else's."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="spectune-pg-"))  # not tmp_path: 0700, root's
        self.port = _free_port()
        self.url = f"postgresql+psycopg://spectune@127.0.0.1:{self.port}/spectune"
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(self.folder, "postgres")
        data = self.folder / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "spectune", "--no-sync")
        self._pg_ctl = ["pg_ctl", "-D", str(data), "-l", str(self.folder / "log"), "-w"]
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "spectune", "spectune")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(*self._pg_ctl, "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast`` ends every session, as a host's shutdown or ``systemctl stop`` does."""
        self._run(*self._pg_ctl, "-m", mode, "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.folder)

    def _run(self, program: str, *args: str) -> None:
        argv = [str(_PG_BIN / program), *args]
        if os.geteuid() == 0:
            argv = ["su", "postgres", "-s", "/bin/sh", "-c", shlex.join(argv)]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture
def own_postgres() -> Iterator[_OwnPostgres]:
    if not (_PG_BIN / "initdb").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL 15 is required in CI ({_PG_BIN})", pytrace=False)
        pytest.skip(f"no PostgreSQL 15 server programs in {_PG_BIN}")
    server = _OwnPostgres()
    try:
        yield server
    finally:
        server.remove()


@pytest.mark.postgres
def test_a_database_stopped_mid_study_is_one_line_and_the_study_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, own_postgres: _OwnPostgres
) -> None:
    del marker
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "2")  # a trial lasts long enough to stop under it
    monkeypatch.setenv("SPECTUNE_HEARTBEAT_S", "1")
    monkeypatch.setenv("SPECTUNE_GRACE_S", "2")
    name = "stopped"

    def stop_when_running() -> None:
        _a_server_answers(tmp_path / "state")
        own_postgres.stop()

    stopper = threading.Thread(target=stop_when_running)
    stopper.start()
    args = [SPECTUNE, *_fake_study(tmp_path, name), "--storage", own_postgres.url]
    _write_space(tmp_path)
    lost = subprocess.run([*args, "--trials", "2"], capture_output=True, text=True, timeout=120)
    stopper.join()
    assert lost.returncode == 2, lost.stderr
    _assert_one_line(Run(2, lost.stderr, [], tmp_path / "studies"), "database went away")
    own_postgres.start()
    time.sleep(2.5)  # SPECTUNE_GRACE_S: the cut trial's heartbeat is stale, the next run fails it
    again = subprocess.run([*args, "--trials", "1"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    storage = optuna.storages.RDBStorage(own_postgres.url)
    try:
        trials = optuna.load_study(study_name=name, storage=storage).trials
    finally:
        storage.engine.dispose()
    assert all(t.state.is_finished() for t in trials), [t.state for t in trials]
    assert "COMPLETE" in [t.state.name for t in trials]


@pytest.mark.parametrize("moment", ["start", "measure"])
@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_a_signal_at_start_or_mid_measure_fails_the_trial_and_stops_the_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    marker: str,
    moment: str,
    signum: int,
    status: int,
) -> None:
    del marker
    if moment == "start":
        monkeypatch.setenv("SPECTUNE_SIM_FAULT", "slow-start=60")  # never ready in the test
    else:
        monkeypatch.setenv("SPECTUNE_SIM_SPEED", "1")  # real time: a measurement takes seconds
    slow = {**SPACE, "workload": {**SPACE["workload"], "output_tokens": 256}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(slow))
    # The with block closes its stderr pipe however the test ends: a failed one leaks nothing.
    with subprocess.Popen(
        [SPECTUNE, *_fake_study(tmp_path, "s"), "--trials", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        try:
            port = _a_server_port(tmp_path / "state", run)
            if moment == "measure":
                _wait_answering(f"http://127.0.0.1:{port}/health", run)
            run.send_signal(signum)
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == status, err
    assert "Traceback" not in err
    storage = f"sqlite:///{tmp_path / 'studies' / 's.db'}"
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL]


def _a_server_port(state: Path, run: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert run.poll() is None, run.stderr.read() if run.stderr else ""
        for path in state.rglob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                port: int = json.loads(path.read_text())["port"]
                return port
        time.sleep(0.05)
    raise AssertionError("no server started")


def test_two_runs_in_one_folder_keep_to_their_own_files(tmp_path: Path, marker: str) -> None:
    del marker
    _write_space(tmp_path)
    runs = [
        subprocess.Popen(
            [SPECTUNE, *_fake_study(tmp_path, name), "--trials", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    for name in ("a", "b"):
        storage = f"sqlite:///{tmp_path / 'studies' / f'{name}.db'}"
        trials = optuna.load_study(study_name=name, storage=storage).trials
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
        # The space has one config: the second trial reuses the first one's server and log.
        logs = sorted(p.name for p in (tmp_path / "studies" / name).rglob("trial-*.log"))
        assert logs == ["trial-0.log"]


def test_two_confirmations_at_once_keep_every_servers_log(tmp_path: Path, marker: str) -> None:
    del marker
    made = _optimize(tmp_path)  # one measured trial to confirm
    assert made.exit_code == 0, made.output
    confirm = [SPECTUNE, "confirm", "f", "--studies-dir", str(made.folder), "--top", "1"]
    fake = ["--backend", "process", "--vllm-command", FAKE_VLLM, "--request-timeout", "1"]
    runs = [
        subprocess.Popen(
            [*confirm, *fake, "--repeats", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    logs = sorted((made.folder / "f" / "logs" / "confirm-0").iterdir())
    assert [p.name for p in logs] == [f"trial-{n}.log" for n in range(4)]
    # Each is one whole server's log: its own command line (its own port), then the server's.
    headers = [p.read_text().splitlines()[0] for p in logs]
    assert len(set(headers)) == 4 and all(h.startswith("spectune$ ") for h in headers)
    assert all("SIMULATED vLLM server" in p.read_text() for p in logs)
