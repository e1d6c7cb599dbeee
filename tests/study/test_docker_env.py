"""``--docker-env``: plain values are stored with the study, secrets travel by name only."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import ConfigError
from tuner.study.handoff import dump_record, load_record
from tuner.study.paths import StudyPaths
from tuner.study.study import study_backend_options
from tuner.study.workers import WorkerRequest, read_worker_request, worker_argv
from tuner.trial.backends import BackendOptions, DockerSettings, parse_docker_env


def test_values_are_kept_and_bare_keys_pass_by_name() -> None:
    env, names = parse_docker_env(["NCCL_P2P_DISABLE=1", "WANDB_API_KEY", "EMPTY="])

    assert env == (("NCCL_P2P_DISABLE", "1"), ("EMPTY", ""))
    assert names == ("HF_TOKEN", "WANDB_API_KEY")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("HF_TOKEN=hf_abc", "looks like a secret"),
        ("MY_PASSWORD=x", "pass --docker-env MY_PASSWORD"),
        ("1BAD=x", "write KEY=VALUE"),
        ("=x", "write KEY=VALUE"),
    ],
)
def test_bad_items_are_one_line_naming_the_fix(item: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_docker_env([item])


def test_the_study_keeps_values_and_names_never_secret_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value")
    study = optuna.create_study(study_name="env")
    paths = StudyPaths.of(tmp_path, "env")
    env, names = parse_docker_env(["NCCL_P2P_DISABLE=1", "WANDB_API_KEY"])
    given = BackendOptions(study="env", settings=DockerSettings(env=env, secrets=names))

    first = study_backend_options(study, "docker", given, paths).settings_of(DockerSettings)
    resumed = study_backend_options(study, "docker", BackendOptions(study="env"), paths)
    later = resumed.settings_of(DockerSettings)

    assert first.vllm_cache == later.vllm_cache == tmp_path / "env" / "vllm-cache"
    assert later.env == (("NCCL_P2P_DISABLE", "1"),)
    assert later.secrets == ("HF_TOKEN", "WANDB_API_KEY")
    assert "wandb-secret-value" not in json.dumps(study.user_attrs)


def test_worker_processes_get_the_same_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value")
    env, names = parse_docker_env(["NCCL_P2P_DISABLE=1", "WANDB_API_KEY"])
    options = BackendOptions(study="s", worker="1", settings=DockerSettings(env=env, secrets=names))
    request = WorkerRequest("s", "sqlite:///x.db", "docker", tmp_path, options)

    record = dump_record(request)  # what the parent writes on the child's standard input
    back = read_worker_request(record)

    assert back == request
    assert back.options.settings == DockerSettings(env=env, secrets=names)
    assert b"wandb-secret-value" not in record  # a secret travels by name only
    # The command line carries no setting: only the label ps shows.
    assert worker_argv("1")[-3:] == ["child-worker", "--worker-id", "1"]


def test_a_secret_value_on_the_command_line_stores_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--hardware",
            "4090x1",
            "--trials",
            "1",
            "--studies-dir",
            str(tmp_path),
            "--docker-env",
            "HF_TOKEN=hf_abc",
        ],
    )

    assert result.exit_code == 2
    assert "looks like a secret" in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert not list(tmp_path.glob("*.db"))


def test_ray_slots_get_one_record_with_the_same_settings() -> None:
    from tuner.study.cluster.slot import SlotRequest

    env, names = parse_docker_env(["NCCL_P2P_DISABLE=1", "WANDB_API_KEY"])
    options = BackendOptions(
        study="s", settings=DockerSettings(env=env, secrets=names, image="img:1")
    )
    request = SlotRequest("docker", options)

    assert load_record(SlotRequest, dump_record(request), "the slot's record") == request
    with pytest.raises(ConfigError, match="the slot's record holds no SlotRequest record"):
        load_record(SlotRequest, b'{"backend": "docker"}', "the slot's record")
