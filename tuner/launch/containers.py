"""What the docker launcher knows about containers apart from running one: labels, names,
which leftovers are whose, removal, and asking an image for its vLLM version.

Every container spectune creates carries ``spectune.*`` labels naming study, trial, run, GPUs
and its owner (:class:`~tuner.launch.engine.RunOwner`). Cleanup removes only what a dead run
left (of any study: its owner is provably gone) and this study's containers from before owners
were labelled; a live run's container is never touched, and one running on our GPUs is a
conflict named before any trial. Containers without spectune's labels are never touched.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DeviceRequest

from tuner.config.redact import Redactor
from tuner.config.vllm_args import VllmVersion, parse_version
from tuner.errors import ConfigError, EngineUnavailable, LaunchError
from tuner.launch.engine import RunOwner, engine_calls
from tuner.launch.images import ensure_image

__all__ = [
    "LABEL_GPUS",
    "LABEL_RUN",
    "LABEL_STUDY",
    "LABEL_TRIAL",
    "Leftovers",
    "clean_leftovers",
    "container_name",
    "device_requests",
    "engine_picks",
    "gpus_label",
    "gpus_overlap",
    "list_containers",
    "probe_version",
    "read_log",
    "remove_all",
    "remove_container",
    "save_log",
    "sort_leftovers",
]

_log = logging.getLogger(__name__)

LABEL_STUDY = "spectune.study"
LABEL_TRIAL = "spectune.trial"
LABEL_RUN = "spectune.run"
LABEL_GPUS = "spectune.gpus"
_VERSION_PROBE_TIMEOUT_S = 180  # importing vLLM takes 10-15 s; a cold image disk more


def container_name(study: str, trial: int, run_id: str) -> str:
    """``spectune-<study>-t<trial>-<run>``, the study name cut to what Docker allows."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", study).strip("-.") or "study"
    return f"spectune-{safe}-t{trial}-{run_id}"


def gpus_overlap(theirs: str, ours: str) -> bool:
    """Whether two GPU labels share a GPU: ``none`` shares nothing, ``all`` everything else."""
    if "none" in (theirs, ours):
        return False
    if "all" in (theirs, ours):
        return True
    return bool(set(theirs.split(",")) & set(ours.split(",")))


def list_containers(client: docker.DockerClient, label: str) -> list[Container]:
    """Every container (running or not) carrying ``label`` (``key`` or ``key=value``).

    A container removed between the engine's listing and its inspection (another run's
    cleanup, or this run's own stop meeting a signal's) is left out: it is what a removal wanted.
    """
    try:
        with engine_calls("listing containers"):
            return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    except docker.errors.APIError as error:
        raise LaunchError(f"docker could not list containers: {error}") from error


def remove_container(container: Container) -> None:
    """Removes ``container`` by force, with its anonymous volumes.

    Gone already, or a removal already in progress (a 409 when a signal cut an earlier
    removal short, or two cleanups meet), counts as done.
    """
    try:
        with engine_calls(f"removing container {container.name}"):
            container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as error:
        if error.status_code == 409 and "already in progress" in str(error):
            return
        raise LaunchError(f"docker could not remove container {container.name}: {error}") from error


def remove_all(containers: list[Container]) -> list[str]:
    """Removes each container, going on past any failure; returns those left, with why.

    Raises:
        EngineUnavailable: the engine went away; the others were not tried (the next run
            removes them).
    """
    left = []
    for container in containers:
        try:
            remove_container(container)
        except LaunchError as error:
            _log.warning("%s", error)
            left.append(f"{container.name}: {error}")
    return left


@dataclass(frozen=True)
class Leftovers:
    """The spectune containers a run finds before its first start."""

    dead: tuple[Container, ...]  # a dead run's, or this study's from before owners: removed
    conflicts: tuple[str, ...]  # a live run's container running on our GPUs, described


def sort_leftovers(client: docker.DockerClient, study: str, run_id: str, gpus: str) -> Leftovers:
    """Sorts every spectune container by whether its run is alive.

    Args:
        client: the engine.
        study: this run's study (its containers without an owner label count as dead).
        run_id: this run's ID (its own containers are neither dead nor conflicts).
        gpus: this run's GPU label (``all``, ``none`` or ``0,1``).
    """
    dead, conflicts = [], []
    for container in list_containers(client, LABEL_STUDY):
        labels = container.labels
        if labels.get(LABEL_RUN) == run_id:
            continue
        owner = RunOwner.from_labels(labels)
        alive = owner.alive(client) if owner is not None else None
        if alive is False or (owner is None and labels.get(LABEL_STUDY) == study):
            dead.append(container)
        elif container.status == "running" and gpus_overlap(labels.get(LABEL_GPUS, "all"), gpus):
            whose = f"run {owner}" if owner is not None else "a run of unknown owner"
            conflicts.append(
                f"{container.name} (study {labels.get(LABEL_STUDY)}, {whose}, GPUs "
                f"{labels.get(LABEL_GPUS, 'all')})"
            )
    return Leftovers(tuple(dead), tuple(conflicts))


def clean_leftovers(
    client: docker.DockerClient, study: str, run_id: str, gpus: str, *, remove: bool = True
) -> list[str]:
    """Removes (with ``remove``) what dead runs left; returns the names of those containers.

    Raises:
        ConfigError: a live run's container runs on our GPUs; it is named and left alone.
    """
    found = sort_leftovers(client, study, run_id, gpus)
    if found.conflicts:
        raise ConfigError(
            f"GPUs {gpus} are in use by {'; '.join(found.conflicts)}: wait for that run, "
            "stop it (docker rm -f NAME), or choose other --gpus"
        )
    if remove:
        for container in found.dead:
            _log.warning("removing container %s, left by a run that has ended", container.name)
        remove_all(list(found.dead))
    return [c.name or c.id or "" for c in found.dead]


def engine_picks() -> Iterator[int]:
    """Host ports that let the engine pick a free port of 127.0.0.1 at each creation."""
    while True:
        yield 0


def gpus_label(gpus: Sequence[int] | None) -> str:
    """``all`` (None), ``none`` (no GPU) or the indices, ``0,1``."""
    if gpus is None:
        return "all"
    return ",".join(str(i) for i in gpus) or "none"


def device_requests(gpus: Sequence[int] | None, needed: int) -> list[DeviceRequest]:
    """The engine's device request for the first ``needed`` of ``gpus`` (None: all GPUs).

    Raises:
        ConfigError: more GPUs needed than allowed.
    """
    if gpus is None:
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if not gpus:
        return []
    if needed > len(gpus):
        raise ConfigError(
            f"tensor-parallel-size {needed} needs {needed} GPUs but --gpus "
            f"allows {len(gpus)}: allow more GPUs or lower it"
        )
    return [DeviceRequest(device_ids=[str(i) for i in gpus[:needed]], capabilities=[["gpu"]])]


def read_log(container: Container, secrets: Sequence[str] = ()) -> str:
    """The container's log with ``secrets`` and this process's own secrets redacted (the one
    :class:`~tuner.config.redact.Redactor` of every server log); empty when it cannot be read."""
    try:
        with engine_calls(f"reading the log of container {container.name}"):
            raw: bytes = container.logs(stdout=True, stderr=True)
    except (docker.errors.APIError, EngineUnavailable):
        return ""
    redactor = Redactor([*secrets, *Redactor.from_environment().values])
    return redactor.redact(raw.decode("utf-8", errors="replace"))


def save_log(path: Path, image: str, container: Container, text: str) -> None:
    """Writes the log under a header with the command; a lost engine's empty read keeps
    what an earlier save wrote."""
    config = container.attrs["Config"]
    argv = [*(config["Entrypoint"] or []), *(config["Cmd"] or [])]
    header = f"# {image} as container {container.name}\n$ {shlex.join(argv)}\n"
    if text or not path.exists():
        path.write_text(header + text, encoding="utf-8")


def probe_version(
    client: docker.DockerClient,
    image: str,
    entrypoint: Sequence[str],
    *,
    labels: Mapping[str, str],
    environment: Mapping[str, str],
    volumes: list[str],
) -> VllmVersion:
    """Runs ``<entrypoint> --version`` in ``image`` once, for a tag that names no version
    (pulling the image first when this host lacks it)."""
    ensure_image(client, image)
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
