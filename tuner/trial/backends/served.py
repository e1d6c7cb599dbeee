"""What the process and docker backends share: a launcher's server, measured over HTTP.

The load generator (:func:`tuner.bench.measure.measure_endpoint`) measures the endpoint the
last :meth:`ServedBackend.start` returned; measuring without a running server is a
MeasurementError, never a request to a stale address. A measurement that lost requests asks
the launcher whether the server ended; if it did, that end is classified like a start-up's
(an OOM kill mid-benchmark is an OOM, a crash says why) and raised as the trial's failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tuner.bench.measure import measure_endpoint
from tuner.bench.quality import complete
from tuner.catalog.nvml import detected_environment
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import MeasurementError
from tuner.launch.base import Launcher
from tuner.launch.failures import end_failure
from tuner.launch.preflight import Preflight
from tuner.results import Endpoint, Source, TrialResult
from tuner.trial.run_facts import RunFacts

__all__ = ["ServedBackend"]

_END_VISIBLE_S = 3.0


class ServedBackend:
    """A backend whose servers are real (or fake) vLLM servers started by ``launcher``.

    Args:
        launcher: starts and stops the servers.
        request_timeout_s: limit on one benchmark request (and on each model-check call); a
            hung server fails the trial after it.
    """

    name: str = "served"
    source = Source.MEASURED

    def __init__(self, launcher: Launcher, *, request_timeout_s: float = 120.0) -> None:
        self.launcher = launcher
        self.request_timeout_s = request_timeout_s
        self._endpoint: Endpoint | None = None

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
        self._endpoint = self.launcher.start(server, context)
        return self._endpoint

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        del seed  # the workload carries its own seed; real servers bring their own noise
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
        return result

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
        self.launcher.stop()

    def close(self) -> None:
        self._endpoint = None
        self.launcher.close()
