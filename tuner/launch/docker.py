"""Runs each server config in its own ``vllm/vllm-openai`` container, through the docker SDK.

A container gets: the image (its tag also picks the vLLM flag dialect); entrypoint ``vllm serve``
(the images' own entrypoint changed between releases) and the argv of
:func:`~tuner.config.vllm_args.server_argv`; the study's GPUs by index as a device request;
``ipc_mode=host`` (multi-GPU runs die with bus errors on Docker's 64 MB ``/dev/shm``); the
Hugging Face cache; ``HF_TOKEN`` copied from the environment at start into the container's
environment only, never into labels, names or saved logs (a log line printing it is redacted);
port 8000 published on a free port of 127.0.0.1 that the engine picks; ``spectune.*`` labels
naming study, trial, run and GPUs; a name ``spectune-<study>-t<trial>-<run>``.

Readiness polls the container state and ``/health`` together and classifies failures with the
code the process launcher uses (:mod:`tuner.launch.readiness`, :mod:`tuner.launch.failures`),
adding the engine's ``OOMKilled`` flag.

Nothing outlives the study: ``stop`` removes the container after saving its log to
``<log_dir>/trial-<n>.log``; ``close`` (also on leaving ``with``, and at interpreter exit) also
removes any container of this run, one whose creation a signal cut short included; SIGTERM and
SIGHUP unwind like Ctrl-C (``tuner.launch.exit_hooks``). The first start removes what a crashed
earlier run of the same study left (by label, :mod:`tuner.launch.containers`). Containers
without this study's label are never touched. GPU memory is the docker backend's business
(``tuner.trial.backends.docker``), not the launcher's.
"""

from __future__ import annotations

import atexit
import logging
import os
import shlex
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import docker
import docker.errors
from docker.models.containers import Container
from docker.types import DeviceRequest

from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import VllmVersion, server_argv, version_from_image
from tuner.errors import ConfigError, LaunchError
from tuner.launch.containers import (
    LABEL_GPUS,
    LABEL_RUN,
    LABEL_STUDY,
    LABEL_TRIAL,
    check_image,
    container_name,
    default_hf_cache,
    gpus_overlap,
    list_containers,
    probe_version,
    remove_container,
)
from tuner.launch.exit_hooks import run_at_exit
from tuner.launch.failures import startup_failure
from tuner.launch.readiness import wait_until_ready
from tuner.results import Endpoint

__all__ = [
    "CONTAINER_PORT",
    "LABEL_GPUS",
    "LABEL_RUN",
    "LABEL_STUDY",
    "LABEL_TRIAL",
    "DockerLauncher",
    "default_hf_cache",
]

_log = logging.getLogger(__name__)

CONTAINER_PORT = 8000
_CONTAINER_HF_CACHE = "/root/.cache/huggingface"
_REDACTED = "[redacted]"


class DockerLauncher:
    """Launcher for ``--backend docker``: one vLLM container per server config.

    Args:
        image: the vLLM image, e.g. ``vllm/vllm-openai:v0.8.5``.
        study: the study name, for labels, names and finding a crashed run's containers.
        client: the docker client; default ``docker.from_env()`` (then closed by ``close``).
        gpus: NVML indices the study may use (a container gets the first
            ``tensor_parallel_size`` of them); None for all GPUs, ``()`` for none (CPU).
        hf_cache: host folder mounted as the container's Hugging Face cache; default
            :func:`default_hf_cache`; mounted only if it exists.
        env_passthrough: variables copied from this process's environment at each start, if
            set; their values are secrets, redacted from saved logs.
        version: the vLLM flag dialect; default from the image tag, else ``vllm --version``
            run once in the image.
        ready_timeout_s: how long a start may take before it is a ``timeout`` failure.
        entrypoint: the vLLM command in the image; it must answer ``--version`` unless the
            tag or ``version`` names the version.
        subcommand: between ``entrypoint`` and the argv; ``()`` for a server without one.
        volumes: extra bind mounts, host path to ``container_path[:ro]``.
        environment: extra, non-secret container environment.
        mem_limit: container memory limit, swap included (e.g. ``"8g"``).
        shm_size: a ``/dev/shm`` size instead of sharing the host's IPC namespace.
        stop_timeout_s: grace between SIGTERM and SIGKILL on stop.
        poll_s: pause between readiness probes.
    """

    name = "docker"

    def __init__(
        self,
        image: str,
        *,
        study: str,
        client: docker.DockerClient | None = None,
        gpus: Sequence[int] | None = None,
        hf_cache: Path | None = None,
        env_passthrough: Sequence[str] = ("HF_TOKEN",),
        version: VllmVersion | None = None,
        ready_timeout_s: float = 900.0,
        entrypoint: Sequence[str] = ("vllm",),
        subcommand: Sequence[str] = ("serve",),
        volumes: Mapping[str, str] | None = None,
        environment: Mapping[str, str] | None = None,
        mem_limit: str | None = None,
        shm_size: str | None = None,
        stop_timeout_s: float = 30.0,
        poll_s: float = 0.5,
    ) -> None:
        self.image = image
        self.study = study
        self.gpus = None if gpus is None else tuple(gpus)
        self.hf_cache = hf_cache if hf_cache is not None else default_hf_cache()
        self.env_passthrough = tuple(env_passthrough)
        self.ready_timeout_s = ready_timeout_s
        self.entrypoint = list(entrypoint)
        self.subcommand = list(subcommand)
        self.volumes = dict(volumes or {})
        self.environment = dict(environment or {})
        self.mem_limit = mem_limit
        self.shm_size = shm_size
        self.stop_timeout_s = stop_timeout_s
        self.poll_s = poll_s
        self.run_id = uuid.uuid4().hex[:8]
        self._version = version if version is not None else version_from_image(image)
        self._client = client
        self._own_client = client is None
        self._cleaned = False  # a crashed earlier run's containers are removed once
        self._hooked = False
        self._container: Container | None = None
        self._log_path: Path | None = None
        self._secrets: tuple[str, ...] = ()

    @property
    def version(self) -> VllmVersion:
        """The dialect spoken: given, from the image tag, or asked of the image once."""
        if self._version is None:
            self._version = probe_version(
                self._docker(),
                self.image,
                self.entrypoint,
                labels={LABEL_STUDY: self.study, LABEL_RUN: self.run_id},
                environment=self.environment,
                volumes=self._volume_specs(),
            )
        return self._version

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Runs ``server`` in a new container (stopping the previous one) and waits until ready.

        Raises:
            ConfigError: the image is not on this host, the vLLM version cannot run the
                config, or the config needs more GPUs than allowed; nothing was started.
            StartupFailure: the container exited or was not ready in time; it has been removed.
            LaunchError: the engine refused or lost the container.
        """
        self.stop()
        client = self._docker()
        check_image(client, self.image)
        argv = server_argv(server, self.version, host="0.0.0.0", port=CONTAINER_PORT)
        device_requests = self._device_requests(server)
        if not self._hooked:
            run_at_exit(self.close)
            self._hooked = True
        if not self._cleaned:
            self.cleanup_stale()
        context.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = context.log_dir / f"trial-{context.trial}.log"
        # Read at each start, so a token is held only by the container that needs it.
        passed = {k: os.environ[k] for k in self.env_passthrough if os.environ.get(k)}
        self._secrets = tuple(passed.values())
        try:
            self._container = client.containers.create(
                self.image,
                argv,
                name=container_name(self.study, context.trial, self.run_id),
                entrypoint=[*self.entrypoint, *self.subcommand],
                labels=self._labels(context.trial),
                environment={**self.environment, **passed},
                device_requests=device_requests,
                ipc_mode=None if self.shm_size else "host",
                shm_size=self.shm_size,
                mem_limit=self.mem_limit,
                memswap_limit=self.mem_limit,  # equal: no swap, over the limit means killed
                ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", 0)},
                volumes=self._volume_specs(),
                detach=True,
            )
            self._container.start()
            endpoint = self._wait_ready(server)
        except docker.errors.APIError as error:
            self._discard()
            raise LaunchError(
                f"docker could not run {self.image}: {error.explanation or error}"
            ) from error
        except BaseException:  # StartupFailure, Ctrl-C, SystemExit from SIGTERM: no orphans
            self._discard()
            raise
        self._save_log(self._container)
        return endpoint

    def stop(self) -> None:
        """Stops and removes the running container, keeping its log; idempotent.

        Raises:
            LaunchError: the engine could not remove the container.
        """
        if self._container is None:
            return
        try:
            self._container.stop(timeout=self.stop_timeout_s)
        except docker.errors.APIError as error:  # gone already, or stuck: removed by force
            _log.debug("docker stop %s: %s", self._container.name, error)
        self._discard()

    def cleanup_stale(self) -> list[str]:
        """Removes the containers a crashed earlier run of this study left behind.

        Candidates carry this study's label; of those, this run's own stay, and so do those
        pinned to GPUs disjoint from ours (another worker of the same study).

        Returns:
            The names of the removed containers.
        """
        self._cleaned = True
        removed = []
        for container in list_containers(self._docker(), f"{LABEL_STUDY}={self.study}"):
            labels = container.labels
            if labels.get(LABEL_RUN) == self.run_id or not gpus_overlap(
                labels.get(LABEL_GPUS, "all"), self._gpus_label()
            ):
                continue
            _log.warning(
                "removing container %s, left by an earlier run of study %s",
                container.name,
                self.study,
            )
            remove_container(container)
            removed.append(container.name or container.id or "")
        return removed

    def close(self) -> None:
        """Stops the server and removes every container of this run; idempotent."""
        try:
            self.stop()
        finally:
            atexit.unregister(self.close)
            self._hooked = False
            if self._client is not None:
                for container in list_containers(self._client, f"{LABEL_RUN}={self.run_id}"):
                    remove_container(container)
                if self._own_client:
                    self._client.close()
                    self._client = None

    def __enter__(self) -> DockerLauncher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _docker(self) -> docker.DockerClient:
        if self._client is None:
            try:
                self._client = docker.from_env()
            except docker.errors.DockerException as error:
                raise LaunchError(
                    f"cannot reach the Docker Engine ({error}): is dockerd "
                    "running, and its socket mounted?"
                ) from error
        return self._client

    def _device_requests(self, server: ServerConfig) -> list[DeviceRequest]:
        if self.gpus is None:
            return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if not self.gpus:
            return []
        needed = server.tensor_parallel_size
        if needed > len(self.gpus):
            raise ConfigError(
                f"tensor-parallel-size {needed} needs {needed} GPUs but --gpus "
                f"allows {len(self.gpus)}: allow more GPUs or lower it"
            )
        ids = [str(index) for index in self.gpus[:needed]]
        return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]

    def _gpus_label(self) -> str:
        if self.gpus is None:
            return "all"
        return ",".join(str(i) for i in self.gpus) or "none"

    def _labels(self, trial: int) -> dict[str, str]:
        return {
            LABEL_STUDY: self.study,
            LABEL_TRIAL: str(trial),
            LABEL_RUN: self.run_id,
            LABEL_GPUS: self._gpus_label(),
        }

    def _volume_specs(self) -> list[str]:
        specs = [f"{host}:{target}" for host, target in self.volumes.items()]
        if self.hf_cache.is_dir():
            specs.append(f"{self.hf_cache}:{_CONTAINER_HF_CACHE}")
        return specs

    def _wait_ready(self, server: ServerConfig) -> Endpoint:
        container = self._container
        assert container is not None
        container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"] or {}
        bindings = ports.get(f"{CONTAINER_PORT}/tcp")
        if not bindings:  # it exited before Docker published the port
            code = self._exit_code()
            if code is None:
                raise LaunchError(f"docker published no port for container {container.name}")
            raise startup_failure(code, self._logs(container), oom_killed=self._oom_killed())
        base_url = f"http://127.0.0.1:{bindings[0]['HostPort']}"
        model = server.served_model_name or server.model
        wait_until_ready(
            base_url,
            timeout_s=self.ready_timeout_s,
            exited=self._exit_code,
            log_tail=lambda: self._logs(container),
            poll_s=self.poll_s,
            model=model,
            oom_killed=self._oom_killed,
        )
        return Endpoint(base_url, model, self._log_path)

    def _exit_code(self) -> int | None:
        container = self._container
        if container is None:
            return None
        try:
            container.reload()
        except docker.errors.NotFound as error:
            raise LaunchError(f"container {container.name} was removed during start-up") from error
        if container.status in ("exited", "dead"):
            return int(container.attrs["State"]["ExitCode"])
        return None

    def _oom_killed(self) -> bool:
        container = self._container
        return container is not None and bool(container.attrs["State"].get("OOMKilled"))

    def _logs(self, container: Container) -> str:
        try:
            text = container.logs(stdout=True, stderr=True).decode("utf-8", errors="replace")
        except docker.errors.APIError:
            return ""
        for secret in self._secrets:
            text = text.replace(secret, _REDACTED)
        return text

    def _save_log(self, container: Container) -> None:
        if self._log_path is None:
            return
        config = container.attrs["Config"]
        argv = [*(config["Entrypoint"] or []), *(config["Cmd"] or [])]
        header = f"# {self.image} as container {container.name}\n$ {shlex.join(argv)}\n"
        self._log_path.write_text(header + self._logs(container), encoding="utf-8")

    def _discard(self) -> None:
        """Saves the container's log and removes the container."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            self._save_log(container)
        finally:
            remove_container(container)
