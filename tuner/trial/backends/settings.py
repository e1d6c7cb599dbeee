"""Each backend's own settings, and the command-line flags that set them, declared once.

``sim`` has its speed; ``process`` its vLLM command; ``docker`` its image, entrypoint, mounts
and container environment; the two that start real servers share the ready and request
timeouts. The CLI builds its backend flags from :data:`FLAGS` (one declaration per flag, for
every command that runs servers) and the chosen backend's settings from what was given
(:func:`settings_from_flags`). They live here, not beside each backend, because ``--help``
reads them and must not import the docker SDK or the simulator.

Which backend runs where (its GPUs, the worker's name, the seed) is not a setting of the
backend: :class:`~tuner.trial.backends.base.BackendOptions` holds that, with these settings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from tuner.config.local_paths import absolute
from tuner.errors import ConfigError
from tuner.launch.base import READY_TIMEOUT_S

__all__ = [
    "FLAGS",
    "REQUEST_TIMEOUT_S",
    "BackendSettings",
    "DockerSettings",
    "Flag",
    "ProcessSettings",
    "ServedSettings",
    "SimSettings",
    "parse_docker_env",
    "parse_volume",
    "settings_class",
    "settings_from_flags",
    "split_command",
]

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REQUEST_TIMEOUT_S = 120.0  # one benchmark request; a hung server fails the trial after it


@dataclass(frozen=True)
class Flag:
    """One command-line flag that sets a backend setting.

    ``param`` names the CLI's parameter (and so its ``SPECTUNE_<COMMAND>_<PARAM>`` variable),
    ``kind`` is what the command line gives (``str``, ``float | None``, ``list[str] | None``),
    ``default`` the value when it is not given, ``bound`` the name of the
    :mod:`tuner.config.bounds` type the value must fit (a name: ``--help`` loads no pydantic).
    """

    flag: str
    param: str
    kind: Any
    default: Any
    help: str
    bound: str | None = None


@dataclass(frozen=True)
class SimSettings:
    """``--backend sim``."""

    backend: Literal["sim"] = "sim"
    speed: float | None = None  # simulated seconds per wall second; None: no waiting

    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--sim-speed",
            "sim_speed",
            float | None,
            None,
            "sim backend: simulated seconds per wall second, > 0 (default: no waiting).",
            "SimSpeed",
        ),
    )

    @classmethod
    def from_flags(cls, given: Mapping[str, Any]) -> SimSettings:
        return cls(speed=given["sim_speed"])


_SERVED_FLAGS = (
    Flag(
        "--ready-timeout",
        "ready_timeout",
        float,
        READY_TIMEOUT_S,
        "Seconds a server may take to become ready (> 0).",
        "Seconds",
    ),
    Flag(
        "--request-timeout",
        "request_timeout",
        float,
        REQUEST_TIMEOUT_S,
        "Seconds one benchmark request may take (> 0).",
        "Seconds",
    ),
)


@dataclass(frozen=True)
class ServedSettings:
    """What the backends that start real servers share."""

    ready_timeout_s: float = READY_TIMEOUT_S  # a start slower than this is a timeout failure
    request_timeout_s: float = REQUEST_TIMEOUT_S


@dataclass(frozen=True)
class ProcessSettings(ServedSettings):
    """``--backend process``: ``vllm serve`` on this host."""

    backend: Literal["process"] = "process"
    vllm_command: tuple[str, ...] = ("vllm",)

    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--vllm-command",
            "vllm_command",
            str,
            "vllm",
            "process backend: the vLLM executable to run.",
        ),
        *_SERVED_FLAGS,
    )

    @classmethod
    def from_flags(cls, given: Mapping[str, Any]) -> ProcessSettings:
        return cls(
            ready_timeout_s=given["ready_timeout"],
            request_timeout_s=given["request_timeout"],
            vllm_command=split_command("--vllm-command", given["vllm_command"]),
        )


@dataclass(frozen=True)
class DockerSettings(ServedSettings):
    """``--backend docker``: each server in a vLLM container."""

    backend: Literal["docker"] = "docker"
    image: str | None = None  # default: the space's vllm image
    entrypoint: tuple[str, ...] = ("vllm",)
    volumes: tuple[tuple[str, str], ...] = ()  # (host path, "container path[:ro]")
    env: tuple[tuple[str, str], ...] = ()  # non-secret container environment
    secrets: tuple[str, ...] = ("HF_TOKEN",)  # passed by name from this environment
    vllm_cache: Path | None = None  # host folder kept as the containers' ~/.cache/vllm

    flags: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--image",
            "image",
            str | None,
            None,
            "docker backend: vLLM image (default: the space's vllm.image).",
        ),
        Flag(
            "--docker-volume",
            "docker_volume",
            list[str] | None,
            None,
            "docker backend: extra HOST:CONTAINER[:ro] mount (repeatable), e.g. a local model "
            "folder.",
        ),
        Flag(
            "--docker-env",
            "docker_env",
            list[str] | None,
            None,
            "docker backend: container environment KEY=VALUE (repeatable, stored with the "
            "study), e.g. NCCL_P2P_DISABLE=1; a bare KEY passes this shell's value by name "
            "(secrets: never stored).",
        ),
        Flag(
            "--docker-entrypoint",
            "docker_entrypoint",
            str,
            "vllm",
            "docker backend: command that runs vLLM.",
        ),
        *_SERVED_FLAGS,
    )

    @classmethod
    def from_flags(cls, given: Mapping[str, Any]) -> DockerSettings:
        env, by_name = parse_docker_env(given["docker_env"] or ())
        return cls(
            ready_timeout_s=given["ready_timeout"],
            request_timeout_s=given["request_timeout"],
            image=given["image"],
            entrypoint=split_command("--docker-entrypoint", given["docker_entrypoint"]),
            volumes=tuple(parse_volume(v) for v in given["docker_volume"] or ()),
            env=env,
            secrets=by_name,
        )


BackendSettings = SimSettings | ProcessSettings | DockerSettings
_CLASSES: dict[str, type[SimSettings] | type[ProcessSettings] | type[DockerSettings]] = {
    "sim": SimSettings,
    "process": ProcessSettings,
    "docker": DockerSettings,
}


def _all_flags() -> tuple[Flag, ...]:
    seen: dict[str, Flag] = {}
    for kind in _CLASSES.values():
        for flag in kind.flags:
            seen.setdefault(flag.flag, flag)  # the served backends share their timeouts
    return tuple(seen.values())


FLAGS: tuple[Flag, ...] = _all_flags()  # every backend's flags, each once


def settings_class(backend: str) -> Callable[[], BackendSettings]:
    """The settings model of the backend called ``backend``.

    Raises:
        ConfigError: an unknown name; the message lists the known ones.
    """
    if backend not in _CLASSES:
        raise ConfigError(f"unknown backend {backend!r}: choose one of {', '.join(_CLASSES)}")
    return _CLASSES[backend]


def settings_from_flags(backend: str, given: Mapping[str, Any]) -> BackendSettings:
    """The settings of ``backend`` from the flags' values (by :attr:`Flag.param`).

    Every backend's flags are checked, so a bad value (a secret as ``--docker-env KEY=VALUE``)
    is refused whichever backend runs; only the chosen one's settings are kept.

    Raises:
        ConfigError: an unknown backend, or a flag's value no backend would take.
    """
    settings_class(backend)  # an unknown name: one line listing the known ones
    built = {name: kind.from_flags(given) for name, kind in _CLASSES.items()}
    return built[backend]


def split_command(flag: str, command: str | Sequence[str]) -> tuple[str, ...]:
    """A command line as a shell splits it; ConfigError for one no shell would run."""
    if not isinstance(command, str):
        return tuple(command)
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:  # an unclosed quote
        raise ConfigError(f"{flag} {command!r}: {exc}; quote it as a shell would") from None
    if not argv:
        raise ConfigError(f"{flag} is empty: name the program that runs vLLM, e.g. {flag} vllm")
    return argv


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
            # Here: it loads the server config's schema, which `--help` should not pay for.
            from tuner.launch.mounts import refuse_stored_secret

            refuse_stored_secret(key)
            env[key] = value
    return tuple(env.items()), tuple(names)
