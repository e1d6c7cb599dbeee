"""A slot: one Ray actor on one node, holding the GPUs of one trial, running trial after trial.

Ray hands the actor its GPUs (``ray.get_gpu_ids()``, also its ``CUDA_VISIBLE_DEVICES``); the
slot builds the study's backend on exactly those and keeps a TrialRunner, so the node keeps its
server while only request-side settings change. It measures over the node's own loopback and
returns each trial's record: the driver only writes it.

Cancelling: Ray stops a running actor task only by a flag the task would have to poll, and a
trial sits in a launcher's readiness wait or a benchmark. So the slot runs two threads (Ray's
``max_concurrency=2``): :meth:`TrialSlot.cancel` raises KeyboardInterrupt in the thread running
the trial, which unwinds as Ctrl-C does on one host (launchers stop what they started), then
closes the backend: no server or container is left on the node.
"""

from __future__ import annotations

import ctypes
import socket
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.catalog.nvml import gpu_names
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import (
    ConfigError,
    FailureKind,
    LaunchError,
    MeasurementError,
    SpectuneError,
    StartupFailure,
)
from tuner.results import Endpoint, TrialResult
from tuner.study.cluster.connect import ray_module
from tuner.study.handoff import load_record
from tuner.study.host import check_host_hardware
from tuner.trial.backends import BackendOptions, backend_factory
from tuner.trial.race import Race
from tuner.trial.record import RunFacts, TrialRecord
from tuner.trial.runner import TrialRunner

__all__ = ["SlotRequest", "SlotResult", "TrialSlot", "WireError"]

_UNWIND_S = 60.0  # how long a cancelled trial may take to stop its server


@dataclass(frozen=True)
class SlotRequest:
    """How a slot runs servers: the one record the driver hands each slot (as JSON)."""

    backend: str  # docker, process or sim
    options: BackendOptions  # the GPUs are Ray's and the worker name the slot's


@dataclass(frozen=True)
class SlotResult:
    """One trial as a slot returns it."""

    record: TrialRecord  # COMPLETE, or FAIL with the failure
    facts: RunFacts | None = None  # what ran the server, on the slot's first start
    fatal: str | None = None  # a config error: every trial would fail this way, stop the study


@dataclass(frozen=True)
class WireError:
    """A SpectuneError sent back from a node (exceptions lose their fields when pickled)."""

    kind: str  # the class name
    message: str
    failure: str | None = None  # StartupFailure's kind
    exit_code: int | None = None
    log_tail: str = ""

    @classmethod
    def of(cls, exc: SpectuneError) -> WireError:
        if isinstance(exc, StartupFailure):
            return cls(type(exc).__name__, str(exc), exc.kind.value, exc.exit_code, exc.log_tail)
        return cls(type(exc).__name__, str(exc))

    def error(self) -> SpectuneError:
        if self.failure is not None:
            kind = FailureKind(self.failure)
            return StartupFailure(kind, self.message, self.exit_code, self.log_tail)
        known: dict[str, type[SpectuneError]] = {
            "ConfigError": ConfigError,
            "LaunchError": LaunchError,
            "MeasurementError": MeasurementError,
        }
        return known.get(self.kind, SpectuneError)(self.message)


class TrialSlot:
    """Runs the study's trials on the GPUs Ray assigned to this actor.

    Args:
        space: the study's search space.
        record: a :class:`SlotRequest` as JSON: the backend and how it runs servers.
        slot: the slot's number, for container names and the trials' ``worker``.

    Raises:
        ConfigError: NVML names GPUs here that are not the study's.
    """

    def __init__(self, space: SearchSpace, record: bytes, slot: int) -> None:
        request = load_record(SlotRequest, record, "the slot's record")
        options = request.options
        self.gpus = tuple(int(g) for g in ray_module().get_gpu_ids())
        self.host = socket.gethostname()
        self.worker = f"{self.host}/ray-{slot}"
        check_host_hardware(options.study, space.hardware, None, gpu_names(self.gpus))
        self.space = space
        self.study = options.study
        own = replace(options, gpus=self.gpus, worker=f"ray-{slot}")
        self.backend = backend_factory(request.backend)(space, own)
        self.runner = TrialRunner.for_space(self.backend, space)
        # The driver's studies folder is on another host: logs stay on this node.
        self.log_dir = Path(tempfile.gettempdir()) / "spectune" / options.study / "logs"
        self._guard = threading.Lock()
        self._active: int | None = None  # the thread running a trial
        self._done = threading.Event()
        self._done.set()
        self._started = False

    def where(self) -> tuple[str, tuple[int, ...]]:
        """This node's host name and the GPU indices Ray assigned (answers once ready)."""
        return self.host, self.gpus

    def run(
        self, number: int, config: TrialConfig, seed: int, race: Race | None = None
    ) -> SlotResult:
        """Runs trial ``number`` (in rounds against ``race``'s incumbent when given, settled
        by the driver); a cancelled trial comes back FAIL."""
        self._done.clear()
        try:
            try:
                with self._guard:
                    self._active = threading.get_ident()
                return self._run(number, config, seed, race)
            finally:
                with self._guard:
                    self._active = None
        except KeyboardInterrupt:  # from cancel(): the launcher stopped what it started
            error = LaunchError(f"trial {number} was cancelled on {self.host}")
            return SlotResult(self._failed(number, config, error))
        finally:
            self._done.set()

    def _run(self, number: int, config: TrialConfig, seed: int, race: Race | None) -> SlotResult:
        context = LaunchContext(self.study, number, self.log_dir)
        try:
            outcome = self.runner.run(config, context, seed, race)
        except (LaunchError, MeasurementError) as exc:
            return SlotResult(self._failed(number, config, exc))
        except SpectuneError as exc:  # a config error: the study stops, as on one host
            return SlotResult(self._failed(number, config, exc), fatal=str(exc))
        record = TrialRecord.from_outcome(number, outcome, self.backend.source, self.worker)
        facts = None
        if outcome.restarted and not self._started:  # a server ran: its version is known now
            self._started = True
            facts = self.backend.facts(self.space)
        return SlotResult(record, facts)

    def _failed(self, number: int, config: TrialConfig, exc: SpectuneError) -> TrialRecord:
        return TrialRecord.failed(number, config, exc, self.backend.source, self.worker)

    def cancel(self) -> None:
        """Interrupts the running trial (if any) and stops everything this slot started."""
        with self._guard:
            if self._active is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._active), ctypes.py_object(KeyboardInterrupt)
                )
        self._done.wait(_UNWIND_S)
        self.close()

    def close(self) -> None:
        """Stops the slot's server and releases what its backend holds; idempotent."""
        self.runner.close()

    # The Backend protocol, for confirmation runs through tuner.study.cluster.remote.

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint | WireError:
        own = replace(context, log_dir=self.log_dir)
        try:
            return self.backend.start(server, own)
        except SpectuneError as exc:
            return WireError.of(exc)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult | WireError:
        try:
            return self.backend.measure(config, concurrency, seed)
        except SpectuneError as exc:
            return WireError.of(exc)

    def answer(self, requests: tuple[PromptRequest, ...]) -> tuple[str, ...] | WireError:
        try:
            return self.backend.answer(requests)
        except SpectuneError as exc:
            return WireError.of(exc)

    def stop(self) -> None:
        self.backend.stop()

    def facts(self) -> RunFacts:
        return self.backend.facts(self.space)
