"""Typer option aliases shared between commands, so a flag means the same everywhere."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import TypeAdapter

from tuner.catalog.gpus import add_gpus
from tuner.cli.app import handle_errors
from tuner.config import bounds
from tuner.config.bounds import check_value
from tuner.config.local_paths import absolute
from tuner.errors import ConfigError
from tuner.study.paths import absolute_storage

if TYPE_CHECKING:  # the backends load the simulator and the search space: not for --help
    from tuner.trial.backends import BackendOptions

__all__ = [
    "BACKEND_PANEL",
    "BUDGET_PANEL",
    "OUTPUT_PANEL",
    "SPACE_PANEL",
    "STUDY_PANEL",
    "Backend",
    "BatchTokens",
    "Concurrency",
    "DockerEntrypoint",
    "DockerEnv",
    "DockerVolume",
    "GpuMemoryUtilization",
    "GpuSpecFile",
    "Gpus",
    "Hardware",
    "Image",
    "InputTokens",
    "Json",
    "MaxModelLen",
    "OutputTokens",
    "Plan",
    "Prefetch",
    "ReadyTimeout",
    "RequestTimeout",
    "Sampler",
    "Seed",
    "SimSpeed",
    "SpecTokens",
    "Storage",
    "StudiesDir",
    "StudyName",
    "Temperature",
    "TimeBudget",
    "Trials",
    "VllmCommand",
    "backend_options",
    "bounded",
    "parse_gpus",
]


# The panels `--help` groups options in (typer's rich_help_panel).
STUDY_PANEL = "Study"
SPACE_PANEL = "Search space"
BACKEND_PANEL = "Backend"
BUDGET_PANEL = "Budget"
OUTPUT_PANEL = "Output"


def bounded(flag: str, kind: Any, help: str, panel: str | None = None) -> Any:
    """An option whose value must fit ``kind``, one of the types in :mod:`tuner.config.bounds`.

    The check runs while typer parses, so a bad value is one line and exit code 2 (through
    handle_errors) instead of typer's boxed usage error.
    """
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    checked: Callable[[Any, object, str], Any] = handle_errors(check_value)

    def check(value: Any) -> Any:
        return value if value is None else checked(adapter, value, flag)

    return typer.Option(flag, help=help, callback=check, rich_help_panel=panel)


def _absolute_storage(url: str | None) -> str | None:
    return None if url is None else absolute_storage(url)


def _absolute_folder(folder: Path) -> Path:
    return absolute(folder)


Hardware = Annotated[
    str | None,
    typer.Option(
        "--hardware",
        help="GPUs as GPU[xCOUNT], e.g. 4090x2 (tensor-parallel = COUNT).",
        rich_help_panel=SPACE_PANEL,
    ),
]


def _add_gpus(path: Path | None) -> Path | None:
    if path is not None:
        add_gpus(absolute(path))
    return path


GpuSpecFile = Annotated[
    Path | None,
    typer.Option(
        "--gpu-spec",
        help="A YAML file describing GPUs the catalog lacks, with the keys of a catalog entry "
        "(spectune hardware --json); --hardware then names them by their first alias.",
        envvar="SPECTUNE_GPU_SPEC",
        callback=handle_errors(_add_gpus),
        rich_help_panel=SPACE_PANEL,
    ),
]
StudyName = Annotated[
    str | None,
    typer.Option(
        "--study", help="Study name; an existing study is resumed.", rich_help_panel=STUDY_PANEL
    ),
]

# User paths become absolute as they are parsed (tuner.config.local_paths says why).
Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Database URL (default sqlite:///STUDIES_DIR/STUDY.db).",
        envvar="SPECTUNE_STORAGE",
        callback=_absolute_storage,
        rich_help_panel=STUDY_PANEL,
    ),
]
StudiesDir = Annotated[
    Path,
    typer.Option(
        "--studies-dir",
        help="Where databases, logs and exports go.",
        callback=_absolute_folder,
        rich_help_panel=STUDY_PANEL,
    ),
]
Json = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON.", rich_help_panel=OUTPUT_PANEL)
]
Plan = Annotated[
    bool,
    typer.Option(
        "--plan",
        help="Print the run's expected GPU time, trial by trial, and run nothing.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
TimeBudget = Annotated[
    str | None,
    typer.Option(
        "--time-budget",
        help="Stop proposing trials in time to confirm within this much time: 2h, 90m, 1h30m.",
        rich_help_panel=BUDGET_PANEL,
    ),
]
Rounds = Annotated[
    bool,
    typer.Option(
        "--rounds/--fixed-count",
        help="Measure each (level, temperature) pair in rounds until its rank against the best "
        "trial is clear, and prune a trial that cannot reach it; or every pair at "
        "workload.requests.",
        rich_help_panel=BUDGET_PANEL,
    ),
]

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="docker (vllm/vllm-openai containers), process (vllm serve "
        "on this host) or sim (built-in simulator, no GPU).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Sampler = Annotated[
    str,
    typer.Option(
        "--sampler",
        help="spectune (TPE warm-started from the simulator's "
        "predictions), tpe, random, gp or nsga2.",
        rich_help_panel=STUDY_PANEL,
    ),
]
Seed = Annotated[
    int,
    bounded(
        "--seed",
        bounds.Seed,
        f"Seed for the sampler and simulated noise (0 to {bounds.MAX_SEED}).",
        STUDY_PANEL,
    ),
]
VllmCommand = Annotated[
    str,
    typer.Option(
        "--vllm-command",
        help="process backend: the vLLM executable to run.",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Image = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="docker backend: vLLM image (default: the space's vllm.image).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
DockerVolume = Annotated[
    list[str] | None,
    typer.Option(
        "--docker-volume",
        help="docker backend: extra HOST:CONTAINER[:ro] mount "
        "(repeatable), e.g. a local model folder.",
        rich_help_panel=BACKEND_PANEL,
    ),
]
DockerEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--docker-env",
        help="docker backend: container environment KEY=VALUE (repeatable, stored with the "
        "study), e.g. NCCL_P2P_DISABLE=1; a bare KEY passes this shell's value by name "
        "(secrets: never stored).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
DockerEntrypoint = Annotated[
    str,
    typer.Option(
        "--docker-entrypoint",
        help="docker backend: command that runs vLLM.",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Prefetch = Annotated[
    bool,
    typer.Option(
        "--prefetch/--no-prefetch",
        envvar="SPECTUNE_PREFETCH",
        help="docker, process: download the space's weights into the Hugging Face cache before "
        "the first server starts (--no-prefetch: vLLM fetches them itself, or needs none).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
SimSpeed = Annotated[
    float | None,
    bounded(
        "--sim-speed",
        bounds.SimSpeed,
        "sim backend: simulated seconds per wall second, > 0 (default: no waiting).",
        BACKEND_PANEL,
    ),
]
ReadyTimeout = Annotated[
    float,
    bounded(
        "--ready-timeout",
        bounds.Seconds,
        "Seconds a server may take to become ready (> 0).",
        BACKEND_PANEL,
    ),
]
Gpus = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="GPU indices to use, e.g. 0,1; `none` for a CPU-only host (default: all).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
RequestTimeout = Annotated[
    float,
    bounded(
        "--request-timeout",
        bounds.Seconds,
        "Seconds one benchmark request may take (> 0).",
        BACKEND_PANEL,
    ),
]
Trials = Annotated[
    int,
    bounded(
        "--trials",
        bounds.Trials,
        f"Trials to run now (all workers), 1 to {bounds.MAX_TRIALS}.",
        BUDGET_PANEL,
    ),
]

# One server config and its load, as the simulator's estimate takes them; same bounds as a space.
SpecTokens = Annotated[
    int,
    bounded(
        "--k", bounds.SpecTokens, f"Speculative tokens per step (1 to {bounds.MAX_SPEC_TOKENS})."
    ),
]
Temperature = Annotated[
    float, bounded("--temperature", bounds.Temperature, "Sampling temperature (0 to 2).")
]
GpuMemoryUtilization = Annotated[
    float,
    bounded(
        "--gpu-memory-utilization", bounds.Fraction, "Share of GPU memory vLLM may use (> 0, <= 1)."
    ),
]
BatchTokens = Annotated[
    int,
    bounded("--max-num-batched-tokens", bounds.BatchTokens, "Tokens per scheduler step (> 0)."),
]
MaxModelLen = Annotated[
    int, bounded("--max-model-len", bounds.ContextLength, "Longest sequence in tokens (> 0).")
]
Concurrency = Annotated[
    int,
    bounded(
        "--concurrency", bounds.Concurrency, f"Requests in flight (1 to {bounds.MAX_CONCURRENCY})."
    ),
]
InputTokens = Annotated[
    int, bounded("--input-tokens", bounds.Tokens, "Mean prompt length in tokens (> 0).")
]
OutputTokens = Annotated[
    int, bounded("--output-tokens", bounds.Tokens, "Output tokens per request (> 0).")
]


def backend_options(  # noqa: PLR0913  (one keyword per backend option the CLI declares)
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
    docker_env: list[str] | None = None,
) -> BackendOptions:
    """The backend flags shared by optimize, worker and confirm, as BackendOptions."""
    from tuner.trial.backends import BackendOptions, parse_docker_env, parse_volume

    env, by_name = parse_docker_env(docker_env or ())
    return BackendOptions(
        study=study,
        seed=seed,
        gpus=None if gpus is None else parse_gpus(gpus),
        vllm_command=_split("--vllm-command", vllm_command),
        image=image,
        docker_entrypoint=_split("--docker-entrypoint", docker_entrypoint),
        docker_volumes=tuple(parse_volume(v) for v in docker_volume or ()),
        docker_env=env,
        docker_secrets=by_name,
        ready_timeout_s=ready_timeout,
        request_timeout_s=request_timeout,
        sim_speed=sim_speed,
    )


def _split(flag: str, command: str) -> tuple[str, ...]:
    """A command line as a shell splits it; ConfigError for one no shell would run."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:  # an unclosed quote
        raise ConfigError(f"{flag} {command!r}: {exc}; quote it as a shell would") from None
    if not argv:
        raise ConfigError(f"{flag} is empty: name the program that runs vLLM, e.g. {flag} vllm")
    return argv


def parse_gpus(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("none", ""):
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--gpus {text!r}: write GPU indices like 0,1") from None
