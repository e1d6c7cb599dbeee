"""Backends by name: the simulator, ``vllm serve`` processes, and vLLM containers.

All three implement :class:`~tuner.trial.backends.base.Backend` (start, measure, stop, close)
and hand downstream the same TrialResult: ``sim`` (:class:`SimBackend`) runs the simulator in
virtual time; ``process`` (:class:`ProcessBackend`) starts ``vllm serve`` on this host and
``docker`` (:class:`DockerBackend`) runs the vllm/vllm-openai image; both of those are measured
over HTTP by the load generator.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tuner.trial.backends.kinds import BackendKind
from tuner.trial.backends.settings import (
    BackendSettings,
    DockerSettings,
    ProcessSettings,
    SimSettings,
    parse_docker_env,
    parse_volume,
)

# `--help` reads the settings' flags (tuner.cli.options); the backends' base, which loads the
# search space and the run's records, is imported on first use of its names (PEP 562).
if TYPE_CHECKING:
    from tuner.config.space import SearchSpace
    from tuner.trial.backends.base import Backend, BackendOptions

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFactory",
    "BackendKind",
    "BackendOptions",
    "BackendSettings",
    "DockerSettings",
    "ProcessSettings",
    "SimSettings",
    "backend_factory",
    "parse_docker_env",
    "parse_volume",
]

BackendFactory = Callable[["SearchSpace", "BackendOptions"], "Backend"]
# Imported when chosen: the docker SDK and the HTTP clients cost seconds a `--help` should not pay.
_CLASSES = {
    BackendKind.SIM: "SimBackend",
    BackendKind.PROCESS: "ProcessBackend",
    BackendKind.DOCKER: "DockerBackend",
}
BACKENDS = tuple(kind.value for kind in BackendKind)


def backend_factory(name: str) -> BackendFactory:
    """How to build the backend called ``name``.

    Returned before the study opens, so a wrong name fails before anything is written.

    Raises:
        ConfigError: an unknown name; the message lists the known ones.
    """
    kind = BackendKind.parse(name)
    module = importlib.import_module(f"tuner.trial.backends.{kind}")
    factory: BackendFactory = getattr(module, _CLASSES[kind]).build
    return factory


def __getattr__(name: str) -> Any:
    if name in ("Backend", "BackendOptions"):
        from tuner.trial.backends import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
