"""``--backend sim``: the simulator behind the backend protocol, in virtual time.

Nothing runs. ``start`` judges a server config the way a real start-up would fail:

- its flags go through the fake server's parser (:mod:`tuner.sim.server.args`, vLLM's own
  flags in the newest dialect), so an unknown flag or a value vLLM rejects is a
  ``bad-argument`` failure, as from ``vllm serve``;
- its memory goes through the memory model with a small hidden overhead per config (seeded),
  like the fragmentation and library workspaces that make a real start-up fail near the
  limit, so a config the pre-screen accepts can still run out of memory here.

Failures are classified by the same code as real vLLM logs. ``measure`` runs the benchmark
in virtual time (:func:`tuner.sim.virtual_time.simulate`) on the started config; with ``speed``
set it also takes (scaled) real time, like a real study. Its result carries the window's energy
from the power model (:mod:`tuner.sim.power`), as a real backend's carries NVML's readings, so
that J/token and tok/J show for simulated trials too (labelled simulated, energy from ``model``);
none for a GPU whose board power the catalog lacks.
"""

from __future__ import annotations

import contextlib
import io
import random
import time
from collections.abc import Sequence

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import load_model
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig, load_draft
from tuner.config.vllm_args import NEWEST_KNOWN, VllmVersion, server_argv
from tuner.errors import MeasurementError
from tuner.launch.failures import startup_failure
from tuner.results import Endpoint, Source, TrialResult
from tuner.sim.answers import simulated_answers
from tuner.sim.memory import estimate_memory
from tuner.sim.power import power_model
from tuner.sim.server.args import ConfigValidationError, parse_serve_args
from tuner.sim.virtual_time import simulate
from tuner.trial.backends.base import BackendOptions
from tuner.trial.backends.settings import SimSettings
from tuner.trial.run_facts import RunFacts

__all__ = ["SimBackend"]

_MAX_JITTER_GIB = 0.5


class SimBackend:
    """Simulated servers on ``hardware``; numbers labelled ``simulated``.

    Args:
        hardware: the GPUs simulated.
        seed: seeds the hidden memory overhead of each config.
        speed: simulated seconds per wall second a measurement takes; None: no waiting.
        version: the vLLM release simulated (its memory rules and runner); None: the newest.
    """

    name = "sim"
    source = Source.SIMULATED

    def __init__(
        self,
        hardware: Hardware,
        seed: int = 0,
        speed: float | None = None,
        version: VllmVersion | None = None,
    ) -> None:
        self.hardware = hardware
        self.seed = seed
        self.speed = speed
        self.version = version
        self._server: ServerConfig | None = None

    @classmethod
    def build(cls, space: SearchSpace, options: BackendOptions) -> SimBackend:
        """The backend ``--backend sim`` runs: the space's hardware."""
        speed = options.settings_of(SimSettings).speed
        return cls(space.hardware, options.seed, speed, space.version)

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        del context  # nothing to name or log
        self.stop()
        _check_flags(server, self.version)
        target = load_model(server.model)
        draft = load_draft(server)
        jitter = random.Random(f"{self.seed}:{server!r}").uniform(0.0, _MAX_JITTER_GIB)
        memory = estimate_memory(
            self.hardware, target, draft, server, jitter_gib=jitter, version=self.version
        )
        if not memory.fits:
            log = (
                f"INFO [simulated] Loading weights took {memory.weights_gib:.2f} GiB per GPU\n"
                f"ERROR [simulated] {memory.reason}\n"
                "RuntimeError: Engine core initialization failed. See root cause above.\n"
            )
            raise startup_failure(1, log)
        self._server = server
        served = server.served_model_name or server.model
        return Endpoint(f"simulator:{self.hardware.label}", served)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        server = self._server
        if server is None:
            raise MeasurementError("the sim backend has no running server to measure")
        result = simulate(
            self.hardware,
            load_model(server.model),
            load_draft(server),
            server,
            config.client.sampling_temperature,
            config.client.workload,
            concurrency,
            seed,
            version=self.version,
            power=power_model(self.hardware.gpu),
        )
        if self.speed:  # a study that takes (scaled) real time, like a real one
            time.sleep(result.duration_s / self.speed)
        return result

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        """The fake server's answers: a lossy verifier's changes drawn from the acceptance
        model (:mod:`tuner.sim.answers`)."""
        if self._server is None:
            raise MeasurementError("the sim backend has no running server to ask")
        return simulated_answers(self._server, requests)

    def stop(self) -> None:
        """Forgets the running config: a simulated server holds no resources."""
        self._server = None

    def close(self) -> None:
        self.stop()

    def facts(self, space: SearchSpace) -> RunFacts:
        return RunFacts(self.name, str(space.version))  # simulated: no GPUs to read


def _check_flags(server: ServerConfig, version: VllmVersion | None) -> None:
    """Fails like ``vllm serve`` of ``version`` (None: the newest known) on flags it would
    refuse (argparse or pydantic).

    Raises:
        StartupFailure: of kind bad-argument, with vLLM's wording.
    """
    release = version or NEWEST_KNOWN
    argv = server_argv(server, release, host="127.0.0.1", port=8000)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parse_serve_args([*argv, "--sim-vllm-version", str(release)], env={})
    except SystemExit as exc:  # argparse: "vllm serve: error: unrecognized arguments: ..."
        code = exc.code if isinstance(exc.code, int) else 2
        raise startup_failure(code, errors.getvalue()) from None
    except ConfigValidationError as exc:
        log = f"pydantic_core.ValidationError: 1 validation error for {exc.config_class}\n{exc}"
        raise startup_failure(1, log) from None
