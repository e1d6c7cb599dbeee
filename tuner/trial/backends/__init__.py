"""Backends by name: the simulator, ``vllm serve`` processes, and vLLM containers.

All three implement :class:`~tuner.trial.backends.base.Backend` (start, measure, stop, close)
and hand downstream the same TrialResult: ``sim`` (:class:`SimBackend`) runs the simulator in
virtual time; ``process`` (:class:`ProcessBackend`) starts ``vllm serve`` on this host and
``docker`` (:class:`DockerBackend`) runs the vllm/vllm-openai image; both of those are measured
over HTTP by the load generator.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence

from tuner.config.local_paths import absolute
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.launch.mounts import refuse_stored_secret
from tuner.trial.backends.base import Backend, BackendOptions

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFactory",
    "BackendOptions",
    "backend_factory",
    "parse_docker_env",
    "parse_volume",
]

BackendFactory = Callable[[SearchSpace, BackendOptions], Backend]
# Imported when chosen: the docker SDK and the HTTP clients cost seconds a `--help` should not pay.
_MODULES = {"sim": "SimBackend", "process": "ProcessBackend", "docker": "DockerBackend"}
BACKENDS = tuple(_MODULES)
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def backend_factory(name: str) -> BackendFactory:
    """How to build the backend called ``name``.

    Returned before the study opens, so a wrong name fails before anything is written.

    Raises:
        ConfigError: an unknown name; the message lists the known ones.
    """
    if name not in _MODULES:
        raise ConfigError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"tuner.trial.backends.{name}")
    factory: BackendFactory = getattr(module, _MODULES[name]).build
    return factory


def parse_volume(text: str) -> tuple[str, str]:
    """``HOST:CONTAINER[:ro]`` as given to ``--docker-volume``."""
    host, sep, rest = text.partition(":")
    if not sep or not host or not rest:
        raise ConfigError(f"--docker-volume {text!r}: write HOST_PATH:CONTAINER_PATH[:ro]")
    return str(absolute(host)), rest


def parse_docker_env(
    items: Sequence[str], secrets: tuple[str, ...] = ("HF_TOKEN",)
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """``--docker-env`` values as (environment, names passed from this process's environment).

    ``KEY=VALUE`` is stored with the study; a bare ``KEY`` is read from this environment at each
    start and only its name is kept. A ``KEY=VALUE`` whose key looks like a secret is refused,
    since its value would be stored.
    """
    env: dict[str, str] = {}
    names = list(secrets)
    for text in items:
        key, sep, value = text.partition("=")
        if not _ENV_KEY.match(key):
            raise ConfigError(f"--docker-env {text!r}: write KEY=VALUE, or KEY to pass it by name")
        if not sep:
            names += [key] if key not in names else []
        else:
            refuse_stored_secret(key)
            env[key] = value
    return tuple(env.items()), tuple(names)
