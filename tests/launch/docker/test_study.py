"""Whole studies on the docker backend: the simulator's vLLM-compatible server in containers.

Containers restart when the server config changes and are reused for request-only changes;
a CUDA OOM at start is an OOM constraint; a crash mid-benchmark and a hang end as FAIL trials
with a clear message; no container of the study survives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import optuna
import pytest
from optuna.trial import TrialState

from tuner.config.space import space_from_dict
from tuner.launch.docker import LABEL_STUDY
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import make_sampler, open_study
from tuner.trial.backends import BackendOptions, DockerSettings

pytestmark = pytest.mark.docker

DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"


def _space(**extra_flags: Any) -> dict[str, Any]:
    return {
        "name": "docker-study",
        "hardware": "4090x1",
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "server": {"max_model_len": 4096, "extra_flags": {"sim-speed": 200, **extra_flags}},
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 2000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 64,
            "output_tokens": 32,
            "concurrency": [1],
            "requests": 3,
            "warmup": 1,
        },
        "search": {
            "draft": ["none", "ngram", DRAFT],
            "num_speculative_tokens": {"low": 3, "high": 3},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [2048],
            "temperature": {"low": 0.0, "high": 1.0, "step": 0.5},
        },
    }


@pytest.fixture
def run_study(
    test_image: str,
    study: str,
    tmp_path: Path,
    project_python: str,
    host_volumes: Callable[..., dict[str, str]],
) -> Callable[[dict[str, Any], list[dict[str, Any]]], optuna.Study]:
    """Enqueues the given configs into a new study and runs exactly those on docker."""

    def run(raw: dict[str, Any], configs: list[dict[str, Any]]) -> optuna.Study:
        space = space_from_dict(raw)
        storage = open_storage(default_storage(study, tmp_path))
        created, _ = open_study(study, storage, space, make_sampler("tpe", 0))
        for params in configs:
            created.enqueue_trial(
                {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048, **params}
            )
        volumes = host_volumes(tmp_path / "container-tmp")
        options = BackendOptions(
            study="",
            gpus=(),
            settings=DockerSettings(
                image=test_image,
                entrypoint=(project_python, "-m", "tuner.sim.server"),
                volumes=tuple(volumes.items()),
                ready_timeout_s=60,
                request_timeout_s=3,
            ),
        )
        result = optimize(
            OptimizeRequest(
                study=study,
                space=space,
                backend="docker",
                trials=len(configs),
                studies_dir=tmp_path,
                backend_options=options,
                prefetch=False,  # the fake server loads no weights
            )
        )
        assert (result.best_yaml is None) == (result.recommended is None)  # optimize wrote it
        return optuna.load_study(study_name=study, storage=storage)

    return run


def _left(client: docker.DockerClient, study: str) -> list[str | None]:
    found = client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    return [c.name for c in found]


def test_restart_only_when_the_server_config_changes(
    run_study: Callable[..., optuna.Study],
    docker_client: docker.DockerClient,
    study: str,
    tmp_path: Path,
) -> None:
    done = run_study(
        _space(),
        [
            {"draft": DRAFT, "num_speculative_tokens": 3, "temperature": 0.0},
            {"draft": DRAFT, "num_speculative_tokens": 3, "temperature": 0.5},  # request-side only
            {"draft": "ngram", "num_speculative_tokens": 3, "temperature": 0.0},
        ],
    )
    trials = done.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert [t.user_attrs["restarted"] for t in trials] == [True, False, True]
    assert all(t.user_attrs["summary"]["output_tokens"] == 3 * 32 for t in trials)
    assert trials[0].user_attrs["summary"]["acceptance_rate"] is not None
    logs = tmp_path / study / "logs"
    assert (logs / "trial-0.log").exists() and (logs / "trial-2.log").exists()
    assert not (logs / "trial-1.log").exists()  # trial 1 ran in trial 0's container
    # What vLLM ran is read from each container's log, and a reused one's facts carry over.
    served = [t.user_attrs["served"] for t in trials]
    assert served[0] == served[1] and all(s["attention_backend"] == "FLASH_ATTN" for s in served)
    # The best configs were measured again, each run in a fresh container, before export.
    assert done.user_attrs["confirmed"]
    assert (tmp_path / study / "best.yaml").read_text().count("mean of 3 runs") == 1
    assert _left(docker_client, study) == []


def test_fake_cuda_oom_is_an_oom_constraint(
    run_study: Callable[..., optuna.Study], docker_client: docker.DockerClient, study: str
) -> None:
    (trial,) = run_study(
        _space(**{"sim-fault": "oom-at-start"}), [{"draft": "none", "temperature": 0.0}]
    ).get_trials()
    assert trial.state is TrialState.COMPLETE and trial.user_attrs["status"] == "OOM"
    assert trial.constraints["oom"] == 1.0 and "CUDA out of memory" in trial.user_attrs["log_tail"]
    assert _left(docker_client, study) == []


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("crash-after=40", "vLLM died during measurement (crash, exit status 1): "),
        ("hang", "did not answer a 1-token chat request: Request timed out"),
    ],
)
def test_crash_and_hang_fail_the_trial_with_a_message(
    run_study: Callable[..., optuna.Study],
    docker_client: docker.DockerClient,
    study: str,
    fault: str,
    message: str,
) -> None:
    (trial,) = run_study(
        _space(**{"sim-fault": fault}), [{"draft": "none", "temperature": 0.0}]
    ).get_trials()
    assert trial.state is TrialState.FAIL
    assert message in trial.user_attrs["failure"]
    assert _left(docker_client, study) == []


def test_caches_are_created_mounted_and_kept_across_the_study_s_containers(
    run_study: Callable[..., optuna.Study],
    docker_client: docker.DockerClient,
    study: str,
    tmp_path: Path,
    private_hf_home: Path,
) -> None:
    assert not private_hf_home.exists()  # a host that never used Hugging Face

    done = run_study(_space(), [{"draft": "ngram", "num_speculative_tokens": 3}])

    assert [t.state for t in done.get_trials()] == [TrialState.COMPLETE]
    assert private_hf_home.is_dir()
    cache = tmp_path / study / "vllm-cache" / "torch_compile_cache"
    assert len(list(cache.iterdir())) == 1  # the trial's container wrote its compile cache
    # The confirmation runs are later containers of the same config: they find it.
    confirm_logs = [p.read_text() for p in (tmp_path / study / "logs").rglob("confirm-*/*.log")]
    assert confirm_logs
    assert all("Directly load the compiled graph(s) from the cache" in log for log in confirm_logs)
    first = (tmp_path / study / "logs" / "trial-0.log").read_text()
    assert "Using cache directory" in first
    assert _left(docker_client, study) == []
