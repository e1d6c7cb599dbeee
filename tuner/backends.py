"""Backends by name: a launcher plus the way its endpoints are measured.

``sim`` runs the simulator in virtual time; ``process`` starts ``vllm serve`` on this host and
``docker`` runs the vllm/vllm-openai image; both of those are measured over HTTP by the load
generator. Everything downstream gets the same TrialResult from all three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.bench.measure import measure_endpoint
from tuner.errors import ConfigError
from tuner.hardware import Hardware
from tuner.launch.base import Endpoint, Launcher
from tuner.launch.sim import SimLauncher
from tuner.models import load_model
from tuner.results import Source, TrialResult
from tuner.sim.engine import simulate
from tuner.space import SearchSpace
from tuner.trial_config import TrialConfig

__all__ = ["BACKENDS", "Backend", "Measure", "http_measure", "backend_factory", "sim_backend"]

BACKENDS = ("sim", "process", "docker")

# (endpoint, trial config, concurrency level, seed) -> one benchmark run
Measure = Callable[[Endpoint, TrialConfig, int, int], TrialResult]


@dataclass
class Backend:
    name: str
    launcher: Launcher
    measure: Measure
    source: Source = Source.MEASURED  # how this backend's numbers are labelled


def http_measure(
    endpoint: Endpoint, config: TrialConfig, concurrency: int, seed: int
) -> TrialResult:
    """Measures a real (or fake) vLLM server through its OpenAI API."""
    del seed  # the workload carries its own seed; real servers add their own noise
    return measure_endpoint(
        endpoint, config.client.temperature, config.client.workload, concurrency
    )


def sim_backend(hardware: Hardware, seed: int = 0) -> Backend:
    def measure(
        endpoint: Endpoint, config: TrialConfig, concurrency: int, trial_seed: int
    ) -> TrialResult:
        server = config.server
        draft_id = server.speculative.model if server.speculative else None
        return simulate(
            hardware,
            load_model(server.model),
            load_model(draft_id) if draft_id else None,
            server,
            config.client.temperature,
            config.client.workload,
            concurrency,
            trial_seed,
        )

    return Backend("sim", SimLauncher(hardware, seed), measure, Source.SIMULATED)


BackendFactory = Callable[[SearchSpace, int], Backend]


def backend_factory(name: str) -> BackendFactory:
    """How to build the backend called ``name`` for a space and seed.

    Returned before the study opens, so a wrong name fails before anything is written.
    """
    factories: dict[str, BackendFactory] = {
        "sim": lambda space, seed: sim_backend(space.hardware, seed),
    }
    try:
        return factories[name]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}"
        ) from None
