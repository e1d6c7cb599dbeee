"""Typer option aliases shared between commands, so a flag means the same everywhere."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from tuner.errors import ConfigError
from tuner.trial.backends import BackendOptions, parse_volume

__all__ = [
    "Backend",
    "DockerEntrypoint",
    "DockerVolume",
    "Gpus",
    "Hardware",
    "Image",
    "Json",
    "ReadyTimeout",
    "RequestTimeout",
    "Sampler",
    "Seed",
    "SimSpeed",
    "Storage",
    "StudiesDir",
    "StudyName",
    "VllmCommand",
    "backend_options",
    "parse_gpus",
]

Hardware = Annotated[
    str | None,
    typer.Option("--hardware", help="GPUs as GPU[xCOUNT], e.g. 4090x2 (tensor-parallel = COUNT)."),
]
StudyName = Annotated[
    str | None, typer.Option("--study", help="Study name; an existing study is resumed.")
]
Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Database URL (default sqlite:///STUDIES_DIR/STUDY.db).",
        envvar="SPECTUNE_STORAGE",
    ),
]
StudiesDir = Annotated[
    Path, typer.Option("--studies-dir", help="Where databases, logs and exports go.")
]
Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="docker (vllm/vllm-openai containers), process (vllm serve "
        "on this host) or sim (built-in simulator, no GPU).",
    ),
]
Sampler = Annotated[
    str,
    typer.Option(
        "--sampler",
        help="spectune (TPE warm-started from the simulator's "
        "predictions), tpe, random, gp or nsga2.",
    ),
]
Seed = Annotated[int, typer.Option("--seed", help="Seed for the sampler and simulated noise.")]
VllmCommand = Annotated[
    str, typer.Option("--vllm-command", help="process backend: the vLLM executable to run.")
]
Image = Annotated[
    str | None,
    typer.Option("--image", help="docker backend: vLLM image (default: the space's vllm.image)."),
]
DockerVolume = Annotated[
    list[str] | None,
    typer.Option(
        "--docker-volume",
        help="docker backend: extra HOST:CONTAINER[:ro] mount "
        "(repeatable), e.g. a local model folder.",
    ),
]
DockerEntrypoint = Annotated[
    str, typer.Option("--docker-entrypoint", help="docker backend: command that runs vLLM.")
]
SimSpeed = Annotated[
    float | None,
    typer.Option(
        "--sim-speed", help="sim backend: simulated seconds per wall second (default: no waiting)."
    ),
]
ReadyTimeout = Annotated[
    float, typer.Option("--ready-timeout", help="Seconds a server may take to become ready.")
]
Gpus = Annotated[
    str | None,
    typer.Option(
        "--gpus", help="GPU indices to use, e.g. 0,1; `none` for a CPU-only host (default: all)."
    ),
]
RequestTimeout = Annotated[
    float, typer.Option("--request-timeout", help="Seconds one benchmark request may take.")
]


def backend_options(
    study: str,
    seed: int,
    *,
    gpus: str | None,
    vllm_command: str,
    image: str | None,
    docker_volume: list[str] | None,
    docker_entrypoint: str,
    sim_speed: float | None,
    ready_timeout: float,
    request_timeout: float,
) -> BackendOptions:
    """The backend flags shared by optimize, worker and confirm, as BackendOptions."""
    return BackendOptions(
        study=study,
        seed=seed,
        gpus=None if gpus is None else parse_gpus(gpus),
        vllm_command=tuple(shlex.split(vllm_command)),
        image=image,
        docker_entrypoint=tuple(shlex.split(docker_entrypoint)),
        docker_volumes=tuple(parse_volume(v) for v in docker_volume or ()),
        ready_timeout_s=ready_timeout,
        request_timeout_s=request_timeout,
        sim_speed=sim_speed,
    )


def parse_gpus(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("none", ""):
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--gpus {text!r}: write GPU indices like 0,1") from None
