"""Runs each server config in its own ``vllm/vllm-openai`` container, through the docker SDK.

A container gets: the image and command of a :class:`~tuner.launch.container_spec.VllmImage`
(the tag also picks the vLLM flag dialect; entrypoint ``vllm serve``) and the argv of
:func:`~tuner.config.vllm_args.server_argv`; the study's GPUs as a device request and the
limits of a :class:`~tuner.launch.container_spec.ContainerResources` (``ipc_mode=host`` unless
a ``/dev/shm`` size is given: multi-GPU runs die with bus errors on a 64 MB one); the mounts
and environment of :class:`~tuner.launch.mounts.ContainerFiles` (secrets read at each start,
redacted from saved logs); port 8000 published on 127.0.0.1 (a port the engine cannot
allocate is retried once on another); ``spectune.*`` labels naming study, trial, run, GPUs and
the owning process; a name ``spectune-<study>-t<trial>-<run>``.

A container's end (exit code, ``OOMKilled``, the log's last lines, the stage) is read once into
a :class:`~tuner.launch.failures.ServerEnd`, at start-up and after a measurement alike.

Nothing outlives the study: ``stop`` removes the container after saving its log to
``<log_dir>/trial-<n>.log``; ``close`` (also on leaving ``with`` and at exit; SIGTERM and SIGHUP
unwind like Ctrl-C) removes every container of this run. The first start removes what dead runs
left and refuses a live run's container on our GPUs (:mod:`tuner.launch.containers`). A lost
engine is one :class:`~tuner.errors.EngineUnavailable`; the next run removes what it kept.
"""

from __future__ import annotations

import atexit
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

import docker
import docker.errors
from docker.models.containers import Container

from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import (
    VllmVersion,
    measurement_flags,
    server_argv,
    version_from_image,
)
from tuner.errors import EngineUnavailable, LaunchError
from tuner.launch.base import LOG_NOTE
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.containers import (
    LABEL_GPUS,
    LABEL_RUN,
    LABEL_STUDY,
    LABEL_TRIAL,
    clean_leftovers,
    container_name,
    device_requests,
    engine_picks,
    gpus_label,
    list_containers,
    probe_version,
    read_log,
    remove_all,
    remove_container,
    save_log,
)
from tuner.launch.engine import RunOwner, check_engine, check_engine_stays, engine_calls
from tuner.launch.exit_hooks import run_at_exit, signals_held
from tuner.launch.failures import ServerEnd, Stage, end_failure
from tuner.launch.images import ensure_image
from tuner.launch.mounts import ContainerFiles, default_hf_cache
from tuner.launch.preflight import Candidate, Preflight, image_python, preflight
from tuner.launch.readiness import StartupWatch, wait_until_ready
from tuner.results import Endpoint, OnStartup

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
# The engine's words when the host port cannot be had (docker-proxy's bind, the allocator).
_PORT_TAKEN = ("port is already allocated", "address already in use")
_STOPPED_FROM_OUTSIDE = (0, 128 + 15, 128 + 9)  # vLLM ends non-zero on a failure of its own


class DockerLauncher:
    """Launcher for ``--backend docker``: one vLLM container per server config.

    Args:
        image: the image and the vLLM command in it (and its flag dialect, if known).
        study: the study name, for labels and names.
        resources: the GPUs, memory and ``/dev/shm`` each container may use; default all GPUs,
            no memory limit, the host's IPC namespace.
        files: the mounts and environment (secrets read at each start); default the host's
            Hugging Face cache and ``HF_TOKEN`` by name.
        timing: the ready timeout, the stop grace and the readiness poll.
        client: the docker client; default ``docker.from_env()`` (closed by ``close``).
        host_ports: the host port each creation asks for (default 0: the engine picks).
        on_startup: where a pull's progress and each start's phases (from its log) go.
    """

    name = "docker"

    def __init__(
        self,
        image: VllmImage,
        *,
        study: str,
        resources: ContainerResources | None = None,
        files: ContainerFiles | None = None,
        timing: ContainerTiming | None = None,
        client: docker.DockerClient | None = None,
        host_ports: Iterator[int] | None = None,
        on_startup: OnStartup | None = None,
    ) -> None:
        self.image = image
        self.study = study
        self.resources = resources if resources is not None else ContainerResources()
        self.files = files if files is not None else ContainerFiles()  # reads HF_HOME now
        self.timing = timing if timing is not None else ContainerTiming()
        self.run_id = uuid.uuid4().hex[:8]
        self.owner = RunOwner.current()
        self._host_ports = host_ports or engine_picks()
        self.on_startup = on_startup
        self._version = (
            image.version if image.version is not None else version_from_image(image.name)
        )
        self._client = client
        self._own_client = client is None
        self._cleaned = False  # dead runs' containers are removed once
        self._hooked = False
        self._container: Container | None = None
        self._log_path: Path | None = None
        self._secrets: tuple[str, ...] = ()

    @property
    def gpus(self) -> tuple[int, ...] | None:
        """The GPUs this run's containers may use (None: all, ``()``: none)."""
        return self.resources.gpus

    @property
    def server_pid(self) -> int | None:
        """The running container's first process as the engine's host numbers it; None when
        none runs or the engine does not say."""
        container = self._container
        if container is None:
            return None
        pid = container.attrs.get("State", {}).get("Pid")
        return int(pid) if pid else None

    @property
    def version(self) -> VllmVersion:
        """The dialect spoken: given, from the image tag, or asked of the image once."""
        if self._version is None:
            self._version = probe_version(
                self._docker(),
                self.image.name,
                self.image.entrypoint,
                labels={LABEL_STUDY: self.study, LABEL_RUN: self.run_id, **self.owner.labels()},
                environment=self.files.environment,
                volumes=self.files.volume_specs(),
            )
        return self._version

    def judge(self, candidates: Sequence[Candidate], gpus: int) -> Preflight:
        """Asks the vLLM inside the image to judge ``candidates`` (the pre-flight), with the
        models' ``config.json`` from this host's cache and no GPU; the image is pulled first
        where missing.

        Raises:
            ConfigError: the image cannot be pulled, or holds no Python with vLLM.
            LaunchError: the judge crashed or took too long.
            EngineUnavailable: the engine went away.
        """
        client = self._docker()
        ensure_image(client, self.image.name, self.on_startup)
        return preflight(
            client,
            self.image,
            candidates,
            hf_cache=self.files.hf_cache,
            python=image_python(self.image.entrypoint),
            gpus=gpus,
            volumes=self.files.volumes,
            environment=self.files.environment,
            labels={LABEL_STUDY: self.study, LABEL_RUN: self.run_id},
        )

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Runs ``server`` in a new container (stopping the previous one) and waits until ready.

        Raises:
            ConfigError: an image that cannot be pulled, a config this version or these GPUs
                cannot run, or a live run's container on our GPUs; nothing was started.
            StartupFailure: it exited or was not ready in time; it has been removed.
            LaunchError: the engine refused the container.
            EngineUnavailable: the engine went away.
        """
        self.stop()
        client = self._docker()
        ensure_image(client, self.image.name, self.on_startup)
        argv = server_argv(server, self.version, host="0.0.0.0", port=CONTAINER_PORT)
        argv += measurement_flags(server, self.version)
        requests = device_requests(self.resources.gpus, server.tensor_parallel_size)
        watch = StartupWatch(self.on_startup)  # a config refused above never started
        if not self._hooked:
            run_at_exit(self.close)
            self._hooked = True
        if not self._cleaned:
            self.cleanup_stale()
        context.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_path = context.log_dir / f"trial-{context.trial}.log"
        self.files.ensure()
        environment, self._secrets = self.files.container_environment()
        name = container_name(self.study, context.trial, self.run_id)
        try:
            for attempt in (1, 2):
                # Held: the engine finishes a create the client gave up on, after cleanup.
                with signals_held(), engine_calls(f"creating container {name}"):
                    self._container = client.containers.create(
                        self.image.name,
                        argv,
                        name=name,
                        entrypoint=[*self.image.entrypoint, *self.image.subcommand],
                        labels=self._labels(context.trial),
                        environment=environment,
                        device_requests=requests,
                        ipc_mode=None if self.resources.shm_size else "host",
                        shm_size=self.resources.shm_size,
                        mem_limit=self.resources.mem_limit,
                        # equal: no swap, over it means killed
                        memswap_limit=self.resources.mem_limit,
                        ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", next(self._host_ports))},
                        volumes=self.files.volume_specs(server),
                        detach=True,
                    )
                try:
                    with engine_calls(f"starting container {name}"):
                        self._container.start()
                    break
                except docker.errors.APIError as error:
                    if attempt == 2 or not any(t in str(error) for t in _PORT_TAKEN):
                        raise
                    _log.info("port for %s not available (%s): another port", name, error)
                    self._discard(quiet=True)
            endpoint = self._wait_ready(server, watch)
        except docker.errors.APIError as error:
            self._discard(quiet=True)
            raise LaunchError(
                f"docker could not run {self.image.name}: {error.explanation or error}"
            ) from error
        except BaseException:  # StartupFailure, Ctrl-C, SystemExit from SIGTERM: no orphans
            self._discard(quiet=True)
            raise
        assert self._container is not None
        self._save_log(self._container)
        return endpoint

    def ended(self) -> ServerEnd | None:
        """How the running container ended, read after a measurement; None while it runs."""
        return self._read_end(Stage.MEASURING)

    def stop(self) -> None:
        """Stops and removes the running container, keeping its log; idempotent.

        Raises LaunchError (not removed) or EngineUnavailable (the next run removes it).
        """
        container = self._container
        if container is None:
            return
        grace = self.timing.stop_timeout_s
        note = None
        try:
            with engine_calls(f"stopping container {container.name}"):
                began = time.monotonic()
                container.stop(timeout=grace)
                waited = time.monotonic() - began
                container.reload()
            if _killed_after_grace(container, waited, grace):
                # In the log the trial points to: a server that ignores SIGTERM is a fault to see.
                note = (
                    f"{LOG_NOTE}container {container.name} ignored SIGTERM for {grace:g} s; "
                    "docker killed it (SIGKILL)"
                )
        except docker.errors.APIError as error:  # gone already, or stuck: removed by force
            _log.debug("docker stop %s: %s", container.name, error)
        except EngineUnavailable:
            self._container = None  # nothing more to ask of it here
            raise
        self._discard(quiet=False, note=note)

    def cleanup_stale(self) -> list[str]:
        """Removes what dead runs left (returns their names); refuses a live run's container
        on our GPUs with a ConfigError naming it (every trial here would run out of memory).
        """
        self._cleaned = True
        return clean_leftovers(self._docker(), self.study, self.run_id, gpus_label(self.gpus))

    def ensure_image(self) -> None:
        """Pulls the image unless this host has it (before a study stores anything)."""
        ensure_image(self._docker(), self.image.name, self.on_startup)

    def check_conflicts(self) -> None:
        """The engine answers and no live run holds our GPUs (before a study stores anything)."""
        self._client = check_engine(self._client)
        clean_leftovers(self._client, self.study, self.run_id, gpus_label(self.gpus), remove=False)

    def close(self) -> None:
        """Stops and removes every container of this run; idempotent. A lost engine is not
        raised: the next run removes what it kept."""
        try:
            self.stop()
        except EngineUnavailable as error:
            _log.debug("close: %s", error)
        finally:
            atexit.unregister(self.close)
            self._hooked = False
            if self._client is not None:
                try:
                    remove_all(list_containers(self._client, f"{LABEL_RUN}={self.run_id}"))
                except (EngineUnavailable, LaunchError) as error:
                    _log.debug("close: %s", error)
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
            self._client = check_engine()
        return self._client

    def _labels(self, trial: int) -> dict[str, str]:
        return {
            LABEL_STUDY: self.study,
            LABEL_TRIAL: str(trial),
            LABEL_RUN: self.run_id,
            LABEL_GPUS: gpus_label(self.gpus),
            **self.owner.labels(),
        }

    def _wait_ready(self, server: ServerConfig, watch: StartupWatch) -> Endpoint:
        container = self._container
        assert container is not None
        with engine_calls(f"inspecting container {container.name}"):
            container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"] or {}
        bindings = ports.get(f"{CONTAINER_PORT}/tcp")
        if not bindings:  # it exited before Docker published the port
            end = self._read_end(Stage.STARTING)
            if end is None:
                raise LaunchError(f"docker published no port for container {container.name}")
            raise end_failure(end)
        base_url = f"http://127.0.0.1:{bindings[0]['HostPort']}"
        model = server.served_model_name or server.model
        wait_until_ready(
            base_url,
            timeout_s=self.timing.ready_timeout_s,
            exited=self._exit_code,
            log_tail=lambda: self._logs(container),
            poll_s=self.timing.poll_s,
            model=model,
            oom_killed=self._oom_killed,
            watch=watch,
        )
        return Endpoint(base_url, model, self._log_path)

    def _read_end(self, stage: Stage) -> ServerEnd | None:
        container = self._container
        code = self._exit_code()
        if container is None or code is None:
            return None
        return ServerEnd(code, self._logs(container), oom_killed=self._oom_killed(), stage=stage)

    def _exit_code(self) -> int | None:
        container = self._container
        if container is None:
            return None
        try:
            with engine_calls(f"inspecting container {container.name}"):
                container.reload()
        except docker.errors.NotFound as error:
            raise LaunchError(f"container {container.name} was removed while it ran") from error
        if container.status not in ("exited", "dead"):
            return None
        code = int(container.attrs["State"]["ExitCode"])
        if code in _STOPPED_FROM_OUTSIDE and not self._oom_killed():
            check_engine_stays(self._docker(), f"container {container.name} was stopped")
        return code

    def _oom_killed(self) -> bool:
        container = self._container
        return container is not None and bool(container.attrs["State"].get("OOMKilled"))

    def _logs(self, container: Container) -> str:
        return read_log(container, self._secrets)

    def _save_log(self, container: Container, note: str | None = None) -> None:
        if self._log_path is not None:
            text = self._logs(container)
            if note is not None:
                text = f"{text.rstrip()}\n{note}\n"
            save_log(self._log_path, self.image.name, container, text)

    def _discard(self, *, quiet: bool, note: str | None = None) -> None:
        """Saves the log (``note`` last) and removes the container; ``quiet``: another
        exception is on its way up, so a lost engine is only logged (the next run removes the
        container)."""
        container, self._container = self._container, None
        if container is None:
            return
        try:
            self._save_log(container, note)
        finally:
            try:
                remove_container(container)
            except EngineUnavailable as error:
                if not quiet:
                    raise
                _log.debug("%s", error)


def _killed_after_grace(container: Container, waited_s: float, grace_s: float) -> bool:
    """Whether ``docker stop`` had to kill the container: SIGKILL's status after the whole
    grace, not the kernel's OOM killer."""
    state = container.attrs["State"]
    return state["ExitCode"] == 128 + 9 and not state.get("OOMKilled") and waited_s >= grace_s
