"""What the process and docker backends share: a launcher's server, measured over HTTP.

The load generator (:func:`tuner.bench.measure.measure_endpoint`) measures the endpoint the
last :meth:`ServedBackend.start` returned; measuring without a running server is a
MeasurementError, never a request to a stale address. A measurement that lost requests asks
the launcher whether the server ended; if it did, that end is classified like a start-up's
(an OOM kill mid-benchmark is an OOM, a crash says why) and raised as the trial's failure.

The GPUs are sampled in the background from each start on (:class:`~tuner.catalog.nvml.
GpuSampler`): each measurement reports the peak memory of its window (start-up and warm-up
included, since they can be the peak) and what the GPUs did through its measured window only
(:class:`~tuner.results.GpuWindow`: energy, power, clocks, temperature, throttling, the memory
other processes hold). A process belongs to the server when it descends from the server's
first process, so its engine core and workers are never counted as another tenant's.

A measurement that heat or a hardware slowdown throttled (:attr:`~tuner.results.GpuWindow.
throttled`; a power cap is the study's condition, not a fault) is measured once more after
the GPUs cool down (bounded by ``cool_down_s``), and its note says so; where it throttles
again, the second measurement is kept marked, and the recommendation passes over it
(:mod:`tuner.analysis.picks`). The time it takes is the trial's, so a time budget counts it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from tuner.bench.measure import measure_endpoint
from tuner.bench.quality import complete
from tuner.catalog.gpu_state import Owns, summarise
from tuner.catalog.nvml import (
    GpuMonitor,
    GpuSampler,
    NoGpuMonitor,
    NvmlMonitor,
    detected_environment,
    open_gpu_monitor,
)
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import MeasurementError
from tuner.launch.base import Launcher
from tuner.launch.failures import end_failure
from tuner.launch.preflight import Preflight
from tuner.launch.runfiles import descends_from
from tuner.results import Endpoint, Source, TrialResult
from tuner.trial.run_facts import RunFacts

__all__ = ["ServedBackend"]

_END_VISIBLE_S = 3.0
_COOL_POLL_S = 1.0


class ServedBackend:
    """A backend whose servers are real (or fake) vLLM servers started by ``launcher``.

    Args:
        launcher: starts and stops the servers.
        request_timeout_s: limit on one benchmark request (and on each model-check call); a
            hung server fails the trial after it.
        gpu_monitor: where the GPUs are read; default NVML on ``gpus`` (without NVML nothing
            is recorded, which is logged once).
        gpus: the NVML indices the servers run on (None: all, ``()``: none).
        sample_interval_s: time between GPU readings.
        cool_down_s: the longest wait for throttled GPUs to cool before measuring again.
    """

    name: str = "served"
    source = Source.MEASURED

    def __init__(
        self,
        launcher: Launcher,
        *,
        request_timeout_s: float = 120.0,
        gpu_monitor: GpuMonitor | None = None,
        gpus: tuple[int, ...] | None = None,
        sample_interval_s: float = 0.5,
        cool_down_s: float = 60.0,
    ) -> None:
        self.launcher = launcher
        self.request_timeout_s = request_timeout_s
        self.sample_interval_s = sample_interval_s
        self.cool_down_s = cool_down_s
        self._endpoint: Endpoint | None = None
        self._monitor = gpu_monitor
        self._own_monitor = gpu_monitor is None
        self._gpus = gpus
        self._sampler: GpuSampler | None = None

    @property
    def endpoint(self) -> Endpoint | None:
        """The running server's endpoint; None when none runs."""
        return self._endpoint

    def facts(self, space: SearchSpace) -> RunFacts:
        del space  # the launcher knows the version it speaks (given, or detected at a start)
        return RunFacts(self.name, str(self.launcher.version), gpus=detected_environment())

    def prepare(self) -> None:
        """Nothing beyond what the launcher checks at its first start (see DockerBackend)."""

    def judge(self, space: SearchSpace) -> Preflight | None:
        """vLLM's own verdict on every config of ``space`` before the first trial, where this
        backend can ask the vLLM that will serve them (the docker backend's image); None."""
        del space
        return None

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self._endpoint = None  # the launcher stops the previous server first
        self._end_sampling()
        self._sampler = GpuSampler(self.gpu_monitor(), self.sample_interval_s)
        self._sampler.start()  # start-up peaks belong to the first measurement's window
        try:
            self._endpoint = self.launcher.start(server, context)
        except BaseException:
            self._end_sampling()
            raise
        return self._endpoint

    def gpu_monitor(self) -> GpuMonitor:
        """The monitor the GPUs are read through, opened on first use."""
        if self._monitor is None:  # --gpus none: nothing to read, nothing to warn about
            gpus = self._gpus
            self._monitor = NoGpuMonitor() if gpus == () else open_gpu_monitor(gpus)
        return self._monitor

    def server_pid(self) -> int | None:
        """The running server's first process as this host's kernel numbers it; None when
        unknown (then no process on the GPUs can be told apart as another tenant's)."""
        return None

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        del seed  # the workload carries its own seed; real servers bring their own noise
        result = self._measure_once(config, concurrency)
        first = result.gpu
        if first is None or not first.throttled:
            return result
        waited = self._cool_down()
        again = self._measure_once(config, concurrency)
        note = (
            f"measured while throttled ({first.reasons_text()}); measured again after "
            f"{waited:.0f} s of cool-down"
        )
        if again.gpu is not None and again.gpu.throttled:
            note += f", throttled again ({again.gpu.reasons_text()})"
        return replace(again, notes=(*again.notes, note))

    def _cool_down(self) -> float:
        """Waits until no GPU is held down by heat or a hardware slowdown, at most
        ``cool_down_s``; returns the seconds waited."""
        monitor, started = self.gpu_monitor(), time.monotonic()
        while time.monotonic() - started < self.cool_down_s:
            states = monitor.state()
            if not states or not any(r.distorts for s in states for r in s.throttle):
                break
            time.sleep(min(_COOL_POLL_S, self.cool_down_s))
        return time.monotonic() - started

    def _measure_once(self, config: TrialConfig, concurrency: int) -> TrialResult:
        if self._endpoint is None:
            raise MeasurementError(f"the {self.name} backend has no running server to measure")
        try:
            result = measure_endpoint(
                self._endpoint,
                config.client.sampling_temperature,
                config.client.workload,
                concurrency,
                request_timeout_s=self.request_timeout_s,
                check_timeout_s=self.request_timeout_s,
            )
        except MeasurementError:
            self._raise_if_ended()
            raise
        if result.errors:
            self._raise_if_ended()
        return self._with_gpu(result)

    def _with_gpu(self, result: TrialResult) -> TrialResult:
        """``result`` with the peaks of its window and what the GPUs did while measured, and a
        note where other processes' memory moved in it."""
        if self._sampler is None:
            return result
        sampled = self._sampler.take()
        window = result.window
        gpu = None if window is None else summarise(sampled.states, window, self._owns())
        notes = result.notes
        if gpu is not None and gpu.tenants_moved:
            notes = (
                *notes,
                f"other processes' GPU memory moved by {gpu.others_memory_change_gib:.1f} GiB "
                f"while measured (up to {gpu.others_memory_gib:.1f} GiB held)",
            )
        return replace(result, peak_memory_gib=sampled.peaks, gpu=gpu, notes=notes)

    def _owns(self) -> Owns | None:
        root = self.server_pid()
        return None if root is None else (lambda pid: descends_from(pid, root))

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        if self._endpoint is None:
            raise MeasurementError(f"the {self.name} backend has no running server to ask")
        return complete(self._endpoint, requests, timeout_s=self.request_timeout_s)

    def _raise_if_ended(self) -> None:
        """Raises the classified StartupFailure (stage measurement) of a server that died."""
        # A dropped connection is seen before the runtime reports the exit: wait a little.
        deadline = time.monotonic() + _END_VISIBLE_S
        while (end := self.launcher.ended()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if end is not None:
            self._endpoint = None
            raise end_failure(end)

    def stop(self) -> None:
        self._endpoint = None
        try:
            self.launcher.stop()
        finally:
            self._end_sampling()

    def close(self) -> None:
        self._endpoint = None
        try:
            self.launcher.close()
        finally:
            self._end_sampling()
            if self._own_monitor and isinstance(self._monitor, NvmlMonitor):
                self._monitor.close()
            if self._own_monitor:
                self._monitor = None

    def _end_sampling(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()
