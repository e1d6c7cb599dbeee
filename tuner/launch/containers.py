"""What the docker launcher knows about containers apart from running one: labels, names,
which leftovers are whose, removal, and asking an image for its vLLM version.

Every container spectune creates carries ``spectune.*`` labels naming study, trial, run and
GPUs; nothing without this study's label is ever touched.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container

from tuner.config.vllm_args import VllmVersion, parse_version
from tuner.errors import ConfigError, LaunchError

__all__ = [
    "LABEL_GPUS",
    "LABEL_RUN",
    "LABEL_STUDY",
    "LABEL_TRIAL",
    "check_image",
    "container_name",
    "default_hf_cache",
    "gpus_overlap",
    "list_containers",
    "probe_version",
    "remove_container",
]

_log = logging.getLogger(__name__)

LABEL_STUDY = "spectune.study"
LABEL_TRIAL = "spectune.trial"
LABEL_RUN = "spectune.run"
LABEL_GPUS = "spectune.gpus"
_VERSION_PROBE_TIMEOUT_S = 180  # importing vLLM takes 10-15 s; a cold image disk more


def default_hf_cache() -> Path:
    """The host's Hugging Face cache: ``$HF_HOME`` or ``~/.cache/huggingface``."""
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def container_name(study: str, trial: int, run_id: str) -> str:
    """``spectune-<study>-t<trial>-<run>``, the study name cut to what Docker allows."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", study).strip("-.") or "study"
    return f"spectune-{safe}-t{trial}-{run_id}"


def gpus_overlap(theirs: str, ours: str) -> bool:
    """Whether two GPU labels may share a GPU: only two explicit, disjoint lists do not."""
    if {theirs, ours} & {"all", "none"}:
        return True
    return bool(set(theirs.split(",")) & set(ours.split(",")))


def list_containers(client: docker.DockerClient, label: str) -> list[Container]:
    """Every container (running or not) carrying ``label`` (``key=value``)."""
    try:
        return client.containers.list(all=True, filters={"label": label})
    except docker.errors.APIError as error:
        raise LaunchError(f"docker could not list containers: {error}") from error


def remove_container(container: Container) -> None:
    """Removes ``container`` by force, with its anonymous volumes; gone already is fine."""
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as error:
        raise LaunchError(f"docker could not remove container {container.name}: {error}") from error


def check_image(client: docker.DockerClient, image: str) -> None:
    """Checked before create, which would otherwise try a pull and fail less clearly."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as error:
        raise ConfigError(
            f"docker image {image} is not on this host: docker pull {image} or build it"
        ) from error
    except docker.errors.APIError as error:
        raise LaunchError(f"docker could not inspect image {image}: {error}") from error


def probe_version(
    client: docker.DockerClient,
    image: str,
    entrypoint: Sequence[str],
    *,
    labels: Mapping[str, str],
    environment: Mapping[str, str],
    volumes: list[str],
) -> VllmVersion:
    """Runs ``<entrypoint> --version`` in ``image`` once, for a tag that names no version."""
    check_image(client, image)
    container: Container | None = None
    try:
        container = client.containers.create(
            image,
            ["--version"],
            entrypoint=list(entrypoint),
            labels=dict(labels),
            environment=dict(environment),
            volumes=volumes,
            detach=True,
        )
        container.start()
        container.wait(timeout=_VERSION_PROBE_TIMEOUT_S)
        output = container.logs().decode("utf-8", errors="replace")
    except Exception as error:  # a timeout surfaces as requests' ConnectionError
        raise LaunchError(f"{entrypoint[0]} --version in {image} failed: {error}") from error
    finally:
        if container is not None:
            remove_container(container)
    for line in reversed(output.splitlines()):
        if line.strip()[:1].isdigit():
            return parse_version(line)
    raise ConfigError(
        f"cannot tell the vLLM version of image {image} (its --version printed none): "
        "use a version tag or pass the version"
    )
