"""Backends by name: a launcher plus the way its endpoints are measured.

``sim`` runs the simulator in virtual time; ``process`` starts ``vllm serve`` on this host and
``docker`` runs the vllm/vllm-openai image; both of those are measured over HTTP by the load
generator. Everything downstream gets the same TrialResult from all three.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.bench.measure import measure_endpoint
from tuner.catalog.models import load_model
from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig, load_draft
from tuner.config.vllm_args import VllmVersion, parse_version
from tuner.errors import ConfigError
from tuner.launch.base import Launcher
from tuner.launch.docker import DockerLauncher
from tuner.launch.process import ProcessLauncher
from tuner.results import Endpoint, Source, TrialResult
from tuner.sim.engine import simulate
from tuner.trial.backends.sim_launcher import SimLauncher

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendOptions",
    "Measure",
    "backend_factory",
    "http_measure",
]


# (endpoint, trial config, concurrency level, seed) -> one benchmark run
Measure = Callable[[Endpoint, TrialConfig, int, int], TrialResult]


@dataclass
class Backend:
    name: str
    launcher: Launcher
    measure: Measure
    source: Source = Source.MEASURED  # how this backend's numbers are labelled


@dataclass(frozen=True)
class BackendOptions:
    """How one worker runs servers; the search space says what they run."""

    study: str
    seed: int = 0
    gpus: tuple[int, ...] | None = None  # GPU indices this worker may use (None: all)
    worker: str = "0"  # tells one study's workers on a host apart (container names, labels)
    vllm_command: tuple[str, ...] = ("vllm",)  # process backend
    image: str | None = None  # docker backend; default: the space's vllm image
    docker_entrypoint: tuple[str, ...] = ("vllm",)
    docker_volumes: tuple[tuple[str, str], ...] = ()  # (host path, "container path[:ro]")
    ready_timeout_s: float = 900.0
    request_timeout_s: float = 120.0  # one request; a hung server fails the trial after this
    sim_speed: float | None = None  # sim: simulated seconds per wall second; None: no waiting


def http_measure(options: BackendOptions) -> Measure:
    """Measures a real (or fake) vLLM server through its OpenAI API."""

    def measure(
        endpoint: Endpoint, config: TrialConfig, concurrency: int, seed: int
    ) -> TrialResult:
        del seed  # the workload carries its own seed; real servers bring their own noise
        return measure_endpoint(
            endpoint,
            config.client.temperature,
            config.client.workload,
            concurrency,
            request_timeout_s=options.request_timeout_s,
            check_timeout_s=options.request_timeout_s,
        )

    return measure


def _sim(space: SearchSpace, options: BackendOptions) -> Backend:
    hardware = space.hardware

    def measure(
        endpoint: Endpoint, config: TrialConfig, concurrency: int, seed: int
    ) -> TrialResult:
        server = config.server
        result = simulate(
            hardware,
            load_model(server.model),
            load_draft(server),
            server,
            config.client.temperature,
            config.client.workload,
            concurrency,
            seed,
        )
        if options.sim_speed:  # a study that takes (scaled) real time, like a real one
            time.sleep(result.duration_s / options.sim_speed)
        return result

    return Backend("sim", SimLauncher(hardware, options.seed), measure, Source.SIMULATED)


def _process(space: SearchSpace, options: BackendOptions) -> Backend:
    env = (
        {}
        if options.gpus is None
        else {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in options.gpus)}
    )
    launcher = ProcessLauncher(
        options.vllm_command,
        version=_explicit_version(space),
        ready_timeout_s=options.ready_timeout_s,
        env=env,
    )
    return Backend("process", launcher, http_measure(options))


def _docker(space: SearchSpace, options: BackendOptions) -> Backend:
    launcher = DockerLauncher(
        options.image or space.vllm_image,
        study=options.study,
        gpus=options.gpus,
        version=_explicit_version(space),
        ready_timeout_s=options.ready_timeout_s,
        entrypoint=options.docker_entrypoint,
        volumes=dict(options.docker_volumes) or None,
    )

    measure_http = http_measure(options)

    def measure(
        endpoint: Endpoint, config: TrialConfig, concurrency: int, seed: int
    ) -> TrialResult:
        result = measure_http(endpoint, config, concurrency, seed)
        return replace(result, peak_memory_gib=launcher.take_peak_memory())

    return Backend("docker", launcher, measure)


def _explicit_version(space: SearchSpace) -> VllmVersion | None:
    """The version the user gave; otherwise the launcher asks the image tag or `vllm --version`."""
    return parse_version(space.vllm_version) if space.vllm_version else None


BackendFactory = Callable[[SearchSpace, BackendOptions], Backend]
_FACTORIES: dict[str, BackendFactory] = {"sim": _sim, "process": _process, "docker": _docker}
BACKENDS = tuple(_FACTORIES)


def backend_factory(name: str) -> BackendFactory:
    """How to build the backend called ``name``.

    Returned before the study opens, so a wrong name fails before anything is written.
    """
    try:
        return _FACTORIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}"
        ) from None


def parse_volume(text: str) -> tuple[str, str]:
    """``HOST:CONTAINER[:ro]`` as given to ``--docker-volume``."""
    host, sep, rest = text.partition(":")
    if not sep or not host or not rest:
        raise ConfigError(f"--docker-volume {text!r}: write HOST_PATH:CONTAINER_PATH[:ro]")
    return str(Path(host).expanduser().resolve()), rest
