"""Container deployments of an exported config: a docker-compose.yml and a ``docker run`` line.

Both look like what people write by hand for the ``vllm/vllm-openai`` image: the image's
entrypoint replaced by ``vllm serve`` (the images' own entrypoint changed between releases),
the GPUs reserved for the NVIDIA runtime, ``ipc: host`` (multi-GPU runs die with bus errors on
Docker's 64 MB ``/dev/shm``), port 8000, the host's Hugging Face cache, and local model folders
mounted read-only at the same path. Secrets pass through by name only (``HF_TOKEN``): compose
and docker copy the value from the user's environment at start, so it is never written here.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

import yaml

from tuner.config.trial import ServerConfig

__all__ = ["PORT", "compose_file", "docker_run_script", "local_paths"]

PORT = 8000
_HF_CACHE = "/root/.cache/huggingface"


def local_paths(server: ServerConfig) -> list[str]:
    """Model folders on the host (absolute paths): the container needs them mounted."""
    return [p for p in (server.model, server.draft_model) if p and PurePosixPath(p).is_absolute()]


def _comment(lines: Sequence[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


class _Flow(list[str]):
    """A short list written inline, as people write ``[gpu]``."""


class _Quoted(str):
    """A string written in double quotes, as compose files write ports."""

    __slots__ = ()


class _ComposeDumper(yaml.SafeDumper):
    """SafeDumper that knows :class:`_Flow` and :class:`_Quoted`."""


_ComposeDumper.add_representer(
    _Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)
_ComposeDumper.add_representer(
    _Quoted, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style='"')
)


def compose_file(
    argv: Sequence[str],
    *,
    image: str,
    gpus: int,
    server: ServerConfig,
    env: Sequence[str],
    header: Sequence[str],
) -> str:
    """A docker-compose.yml with one ``vllm`` service.

    Args:
        argv: what follows ``vllm serve`` (model first, host 0.0.0.0, port 8000).
        image: the vLLM image.
        gpus: GPUs to reserve.
        server: the config (for local model folders to mount).
        env: variable names to pass through from the host.
        header: provenance lines, written as comments.
    """
    volumes = [f"${{HOME}}/.cache/huggingface:{_HF_CACHE}"]
    volumes += [f"{p}:{p}:ro" for p in local_paths(server)]
    devices = [{"driver": "nvidia", "count": gpus, "capabilities": _Flow(["gpu"])}]
    service: dict[str, Any] = {
        "image": image,
        "entrypoint": _Flow(["vllm", "serve"]),
        "command": list(argv),
        "ports": [_Quoted(f"{PORT}:{PORT}")],
        "ipc": "host",
        "volumes": volumes,
        "environment": list(env),  # names only: compose copies the host's values
        "deploy": {"resources": {"reservations": {"devices": devices}}},
        "restart": "unless-stopped",
    }
    body = yaml.dump(
        {"services": {"vllm": service}}, Dumper=_ComposeDumper, sort_keys=False, width=1000
    )
    return _comment([*header, "use: docker compose up -d"]) + body


def docker_run_script(
    argv: Sequence[str],
    *,
    image: str,
    gpus: int,
    server: ServerConfig,
    env: Sequence[str],
    header: Sequence[str],
) -> str:
    """A ``#!/bin/sh`` script of one ``docker run`` command, one option per line.

    Arguments as for :func:`compose_file`.
    """
    options = [
        ["docker", "run", "-d", "--name", "vllm"],
        ["--gpus", str(gpus)],
        ["--ipc=host"],
        ["-p", f"{PORT}:{PORT}"],
        ["-v", f"$HOME/.cache/huggingface:{_HF_CACHE}"],
        *(["-v", f"{p}:{p}:ro"] for p in local_paths(server)),
        *(["-e", name] for name in env),
        ["--entrypoint", "vllm"],
        [image, "serve"],
    ]
    lines = [" ".join(_quote(part) for part in group) for group in options]
    lines += [shlex.join(group) for group in _flag_groups(argv)]
    return "#!/bin/sh\n" + _comment(header) + " \\\n  ".join(lines) + "\n"


def _quote(part: str) -> str:
    # $HOME must expand in the user's shell; everything else is quoted literally.
    return f'"{part}"' if part.startswith("$HOME") else shlex.quote(part)


def _flag_groups(argv: Sequence[str]) -> list[list[str]]:
    """The model, then each flag with its value (if it has one): one line each."""
    groups: list[list[str]] = []
    for token in argv:
        bare_flag = bool(groups) and groups[-1][0].startswith("--") and len(groups[-1]) == 1
        if bare_flag and not token.startswith("--"):
            groups[-1].append(token)
        else:
            groups.append([token])
    return groups
