"""The Docker Engine going away, or never there: one line, exit 2, and nothing left behind.

A second dockerd of the test's own (:mod:`second_engine`) is stopped during a start and during
a measurement of a real ``spectune optimize`` (the CLI in a subprocess), then started again: the
study holds one FAIL trial saying why, and the next run removes the container the lost engine
kept. An engine that is not there at all is said before the study stores anything.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.launch.docker.second_engine import SecondEngine
from tests.testbed.docker_host import PYTHON
from tuner.launch.container_spec import ContainerResources, VllmImage
from tuner.launch.docker import LABEL_STUDY, DockerLauncher
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage, study_names

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]


def _space(fault: str | None, output_tokens: int) -> dict[str, object]:
    flags: dict[str, object] = {"sim-speed": 2}
    if fault:
        flags["sim-fault"] = fault
    return {
        "name": "engine-lost",
        "hardware": "4090x1",
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "server": {"max_model_len": 4096, "extra_flags": flags},
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 60000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 32,
            "output_tokens": output_tokens,
            "concurrency": [1],
            "requests": 4,
            "warmup": 0,
        },
        "search": {
            "draft": ["none"],
            "num_speculative_tokens": {"low": 3, "high": 3},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [2048],
            "temperature": 0.0,
        },
    }


@pytest.fixture(scope="module")
def engine(test_image: str) -> Iterator[SecondEngine]:
    second = SecondEngine(Path(tempfile.mkdtemp(prefix="spt-engine-", dir="/tmp")))
    second.start()
    second.load(test_image)
    yield second
    second.remove()


Spectune = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spectune(
    tmp_path: Path, study: str, test_image: str, host_volumes: Callable[..., dict[str, str]]
) -> Spectune:
    """``spectune(space, docker_host)``: ``spectune optimize`` on docker, in a subprocess."""

    def run(space: dict[str, object], docker_host: str) -> subprocess.Popen[str]:
        path = tmp_path / "space.yaml"
        path.write_text(yaml.safe_dump(space))
        volumes = [f"--docker-volume={h}:{t}" for h, t in host_volumes(tmp_path / "ctmp").items()]
        argv = [PYTHON, "-m", "tuner", "optimize", "--space", str(path), "--study", study]
        argv += ["--backend", "docker", "--trials", "2", "--studies-dir", str(tmp_path)]
        argv += ["--image", test_image, "--gpus", "none", "--confirm-top", "0"]
        argv += ["--docker-entrypoint", f"{PYTHON} -m tuner.sim.server", *volumes]
        argv += ["--sampler", "random", "--ready-timeout", "120", "--no-prefetch"]
        env = {"DOCKER_HOST": docker_host, "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
        return subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    return run


def _wait_running(engine: SecondEngine, study: str, run: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60

    def trial_containers(client: docker.DockerClient) -> list[Any]:
        # A trial's server, not the pre-flight's judge (its container carries the study's
        # label too, so that a later run removes one a crash left behind).
        found = client.containers.list(
            ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
        )
        return [c for c in found if not (c.name or "").startswith("spectune-preflight-")]

    with contextlib.closing(engine.client()) as client:
        while not trial_containers(client):
            # The engine's own words too: a CI run once saw it refuse every container's
            # network endpoint, and the log that said why went with the test's folder.
            assert run.poll() is None, (run.communicate(), engine.log_tail())
            assert time.monotonic() < deadline, "no container started"
            time.sleep(0.2)


@pytest.mark.parametrize(
    ("fault", "tokens", "settle_s"),
    [("slow-start=120", 16, 1.0), (None, 2048, 6.0)],
    ids=["during-start-up", "during-measurement"],
)
def test_the_engine_lost_mid_study_is_one_line_a_fail_trial_and_nothing_left(
    engine: SecondEngine,
    spectune: Spectune,
    study: str,
    tmp_path: Path,
    fault: str | None,
    tokens: int,
    settle_s: float,
) -> None:
    run = spectune(_space(fault, tokens), engine.url)
    try:
        _wait_running(engine, study, run)
        time.sleep(settle_s)  # inside start() (the server hangs) or inside the benchmark
        engine.stop()
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        engine.start()

    assert run.returncode == 2, stderr
    # The fake server's image holds no vLLM to run the pre-flight: said once, before the trials.
    lines = [
        line
        for line in stderr.strip().splitlines()
        if not line.startswith("WARNING: the pre-flight could not ask the image's vLLM")
    ]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: lost the Docker Engine at {engine.url} while ")
    assert "the next run removes what this one left" in lines[0]
    storage = default_storage(study, tmp_path)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials()
    assert len(trials) == 1, [(t.state, t.user_attrs) for t in trials]
    (trial,) = trials
    assert trial.state is TrialState.FAIL
    assert "lost the Docker Engine" in trial.user_attrs["failure"]

    with contextlib.closing(engine.client()) as client:
        kept = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
        )
        assert len(kept) == 1  # what the engine kept while it was away...
        next_run = DockerLauncher(
            VllmImage("unused"),
            study=study,
            client=client,
            resources=ContainerResources(gpus=()),
        )
        assert next_run.cleanup_stale() == [kept[0].name]  # ...the next run removes
        assert (
            client.containers.list(
                ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
            )
            == []
        )


def test_an_unreachable_engine_is_one_line_before_anything_is_stored(
    spectune: Spectune, study: str, tmp_path: Path
) -> None:
    run = spectune(_space(None, 16), f"unix://{tmp_path}/no-engine.sock")
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 2
    (line,) = stderr.strip().splitlines()
    assert line.startswith(f"error: cannot reach the Docker Engine at unix://{tmp_path}/no-engine")
    assert "start dockerd, or point DOCKER_HOST at a running engine" in line
    assert study not in study_names(open_storage(default_storage(study, tmp_path)))
