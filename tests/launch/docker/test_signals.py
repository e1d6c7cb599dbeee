"""Ctrl-C, SIGTERM and SIGHUP, during a start, while serving, and at thirty random moments of
real studies: no container of the study survives, and no signal is swallowed.

The launcher cases run in a separate process (signal_driver.py) so it can be signalled like a
real ``spectune optimize``; containers of anyone else, labelled or not, must be left alone.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import optuna
import pytest
import yaml
from docker.models.containers import Container
from optuna.trial import TrialState

from tests.testbed.docker_host import PYTHON, fake_server_image
from tuner.launch.docker import LABEL_STUDY
from tuner.study.paths import default_storage

pytestmark = pytest.mark.docker

DRIVER = Path(__file__).with_name("signal_driver.py")
REPO = Path(__file__).resolve().parents[3]


def _study_containers(
    client: docker.DockerClient, study: str, status: str | None = None
) -> list[Container]:
    filters: dict[str, Any] = {"label": f"{LABEL_STUDY}={study}"}
    if status:
        filters["status"] = status
    return client.containers.list(ignore_removed=True, all=True, filters=filters)


@pytest.fixture
def bystanders(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    host_volumes: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> Iterator[list[str]]:
    """Two sleeping containers that are not this study's: one of another study, one unlabelled."""
    volumes = [f"{h}:{t}" for h, t in host_volumes(tmp_path / "bystander-tmp").items()]
    ids = []
    for labels in ({LABEL_STUDY: f"{study}-someone-else"}, {}):
        container = docker_client.containers.create(
            test_image, ["/bin/sleep", "600"], labels=labels, volumes=volumes, detach=True
        )
        container.start()
        ids.append(container.id or "")
    yield ids
    for container_id in ids:
        docker_client.containers.get(container_id).remove(force=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", ["starting", "running"])
def test_a_signal_leaves_no_container_of_the_study(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tmp_path: Path,
    fake_launcher_kwargs: Callable[..., dict[str, Any]],
    bystanders: list[str],
    signum: signal.Signals,
    phase: str,
) -> None:
    faults = ("slow-start=300",) if phase == "starting" else ()
    kwargs = fake_launcher_kwargs(tmp_path, *faults)
    image = fake_server_image(test_image)
    spec = {
        "image": image.name,
        "study": study,
        "log_dir": str(tmp_path / "logs"),
        "entrypoint": image.entrypoint,
        "subcommand": image.subcommand,
        "volumes": kwargs["files"].volumes,
        "environment": kwargs["files"].environment,
    }
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps(spec)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if phase == "running":
            assert driver.stdout is not None
            assert driver.stdout.readline().strip() == "READY"
        else:  # the signal must land inside start(): the container runs, the server hangs
            deadline = time.monotonic() + 30
            while not _study_containers(docker_client, study, "running"):
                assert driver.poll() is None, driver.communicate()
                assert time.monotonic() < deadline, "the driver started no container"
                time.sleep(0.1)
            time.sleep(0.5)
        driver.send_signal(signum)
        _, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()

    assert driver.returncode != 0
    assert _study_containers(docker_client, study) == [], stderr
    alive = {c.id for c in docker_client.containers.list(ignore_removed=True)}
    assert set(bystanders) <= alive
    assert (tmp_path / "logs" / "trial-1.log").exists()  # the log was kept


# Thirty signals at random moments of real `spectune optimize` runs (the CLI in a subprocess):
# three trials whose server configs differ, so containers are created, started, measured,
# stopped and removed in turn; each run is signalled once, at a moment drawn after its handlers
# are in; two run at a time. Every signal must end its run with its own status, no swallowed
# exception or traceback, no container of the study left, no trial left RUNNING.

SIGNALS = 30
WINDOW_S = 3.5  # after the handlers are in: covers the screen, the first start and benchmark
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}

SPACE = {
    "name": "random-signals",
    "hardware": "4090x1",
    "target": "Qwen/Qwen2.5-7B-Instruct",
    "server": {"max_model_len": 4096, "extra_flags": {"sim-speed": 100}},
    "vllm": {"version": "0.32.0"},
    "slo": {"ttft_ms": 60000},
    "workload": {
        "prompt_set": "code",
        "input_tokens": 32,
        "output_tokens": 64,
        "concurrency": [1],
        "requests": 3,
        "warmup": 0,
    },
    "search": {
        "draft": ["none", "ngram", "Qwen/Qwen2.5-0.5B-Instruct"],
        "num_speculative_tokens": {"low": 3, "high": 3},
        "gpu_memory_utilization": 0.9,
        "max_num_batched_tokens": [2048],
        "temperature": 0.0,
    },
}


def _handles_sigterm(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler yet (the CLI installs it first thing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def _signal_one_run(
    attempt: int, space: Path, volumes: list[str], test_image: str, study: str, tmp_path: Path
) -> tuple[str, float] | None:
    """Runs one study and signals it at a random moment; None when it finished first."""
    chance = random.Random(attempt)
    signum = chance.choice(list(EXIT_STATUS))
    delay = chance.uniform(0.0, WINDOW_S)
    name = f"{study}-{attempt}"
    argv = [PYTHON, "-m", "tuner", "optimize", "--space", str(space), "--study", name]
    argv += ["--backend", "docker", "--trials", "3", "--studies-dir", str(tmp_path)]
    argv += ["--image", test_image, "--gpus", "none", "--confirm-top", "0"]
    argv += ["--docker-entrypoint", f"{PYTHON} -m tuner.sim.server", *volumes]
    argv += ["--ready-timeout", "60", "--no-prefetch", "--seed", str(attempt)]
    env = {"HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    run = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not _handles_sigterm(run.pid):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the CLI never installed its handlers"
            time.sleep(0.01)
        time.sleep(delay)
        if run.poll() is not None:  # finished first: not a signal, another run is tried
            assert run.returncode == 0, run.communicate()
            return None
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=90)  # a swallowed signal runs on to the end
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    moment = f"{signum.name} after {delay:.2f} s (run {attempt})"
    # A Ctrl-C that lands in code CPython runs through exec() (dataclasses build their methods
    # so while modules import) makes it end the process by SIGINT once everything has run, even
    # though spectune caught it and cleaned up: a shell reads that as 130 too.
    ended = {EXIT_STATUS[signum], *((-signal.SIGINT,) if signum is signal.SIGINT else ())}
    assert run.returncode in ended, f"{moment}: exit {run.returncode}\n{stderr}"
    said = stderr.strip().splitlines()
    assert not said or said[-1].startswith(("interrupted", "stopped by")), f"{moment}\n{stderr}"
    assert "Exception ignored" not in stderr, f"{moment}\n{stderr}"
    assert "Traceback" not in stderr, f"{moment}\n{stderr}"
    with contextlib.closing(docker.from_env()) as client:
        left = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={name}"}
        )
    assert left == [], f"{moment}: left {[c.name for c in left]}\n{stderr}"
    storage = default_storage(name, tmp_path)
    if Path(storage.removeprefix("sqlite:///")).exists():
        try:
            trials = optuna.load_study(study_name=name, storage=storage).get_trials()
        except KeyError:  # signalled before the study was created
            trials = []
        running = [t.number for t in trials if t.state is TrialState.RUNNING]
        assert running == [], f"{moment}: trials {running} left RUNNING\n{stderr}"
    return signum.name, delay


def test_thirty_signals_at_random_moments_are_never_swallowed(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tmp_path: Path,
    host_volumes: Callable[..., dict[str, str]],
    bystanders: list[str],
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    volumes = [f"--docker-volume={h}:{t}" for h, t in host_volumes(tmp_path / "ctmp").items()]
    attempts = iter(range(SIGNALS + 10))
    delivered: list[tuple[str, float]] = []
    lock = threading.Lock()

    def lane() -> None:  # two runs at a time: each one's own study, checked when it ends
        while True:
            with lock:
                attempt = next(attempts, None) if len(delivered) < SIGNALS else None
            if attempt is None:
                return
            signalled = _signal_one_run(attempt, space, volumes, test_image, study, tmp_path)
            if signalled is not None:
                with lock:
                    delivered.append(signalled)

    # CI starts the tests with SIGINT ignored, which children would keep; a handler here makes
    # theirs the default again, as a terminal starts them.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ThreadPoolExecutor(2) as pool:
            for lane_done in [pool.submit(lane) for _ in range(2)]:
                lane_done.result()
    finally:
        signal.signal(signal.SIGINT, previous)

    assert len(delivered) >= SIGNALS, f"only {len(delivered)} runs were still going when signalled"
    assert {s for s, _ in delivered} == {s.name for s in EXIT_STATUS}
    alive = {c.id for c in docker_client.containers.list(ignore_removed=True)}
    assert set(bystanders) <= alive
