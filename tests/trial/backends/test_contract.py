"""The Backend contract, the same assertions for sim, process and docker.

Process and docker drive the shipped fake server (``python -m tuner.sim.server``); its
start-up failures come from the same memory model and flag parser the simulator uses, so one
config fails the same way on all three. Each test starts a few servers of about a second each.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from tests.trial.backends.contract_support import CONFIG, FITS, HARDWARE, SMALL, TOO_BIG, Case
from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import ConfigError, FailureKind, MeasurementError, StartupFailure
from tuner.results import Endpoint, Source, TrialResult
from tuner.trial.backends import Backend, BackendOptions, backend_factory
from tuner.trial.backends.docker import DockerBackend
from tuner.trial.backends.process import ProcessBackend
from tuner.trial.backends.sim import SimBackend
from tuner.trial.run_facts import RunFacts
from tuner.trial.runner import TrialRunner
from tuner.trial.scoring import Limits, TrialStatus


def _start_failure(
    backend: Backend, server: ServerConfig, context: LaunchContext
) -> StartupFailure:
    with pytest.raises(StartupFailure) as caught:
        backend.start(server, context)
    return caught.value


def test_start_measure_stop_close(case: Case, context: LaunchContext) -> None:
    backend = case.make()
    assert backend.name == case.name
    endpoint = backend.start(FITS, context)
    assert endpoint.model == "qwen"

    result = backend.measure(CONFIG, 2, seed=1)

    assert result.source is backend.source
    assert backend.source is (Source.SIMULATED if case.name == "sim" else Source.MEASURED)
    assert result.concurrency == 2
    assert len(result.requests) == SMALL.requests and all(r.ok for r in result.requests)
    assert result.output_tokens == SMALL.requests * SMALL.output_tokens
    backend.stop()
    assert case.leftovers() == []
    backend.stop()  # idempotent
    with pytest.raises(MeasurementError, match="no running server"):
        backend.measure(CONFIG, 1, seed=1)
    backend.close()
    backend.close()  # idempotent
    assert case.leftovers() == []


def test_out_of_memory_at_start_up_is_oom_and_the_backend_recovers(
    case: Case, context: LaunchContext
) -> None:
    backend = case.make()

    failure = _start_failure(backend, TOO_BIG, context)

    assert failure.kind is FailureKind.OOM
    assert failure.exit_code == 1
    assert "out of memory" in str(failure).lower()
    assert case.leftovers() == []
    assert backend.start(FITS, context).model == "qwen"  # the next config starts as usual


def test_an_unknown_flag_is_a_bad_argument(case: Case, context: LaunchContext) -> None:
    backend = case.make()
    failure = _start_failure(backend, replace(FITS, extra_flags=(("no-such-flag", True),)), context)
    assert failure.kind is FailureKind.BAD_ARGUMENT
    assert failure.exit_code == 2
    assert "unrecognized arguments: --no-such-flag" in str(failure)
    assert case.leftovers() == []


def test_an_early_exit_is_a_crash_noticed_at_once(served: Case, context: LaunchContext) -> None:
    backend = served.make("crash-at-start", ready_timeout_s=120)
    started = time.monotonic()

    failure = _start_failure(backend, FITS, context)

    assert time.monotonic() - started < 30  # on exit, not at the 120-s timeout
    assert failure.kind is FailureKind.CRASH
    assert failure.exit_code == 1
    assert "KeyError: 'model_type'" in str(failure)
    assert "KeyError: 'model_type'" in (context.log_dir / "trial-1.log").read_text()
    assert served.leftovers() == []


def test_a_server_never_ready_times_out_and_is_removed(
    served: Case, context: LaunchContext
) -> None:
    backend = served.make("slow-start=120", ready_timeout_s=2)
    failure = _start_failure(backend, FITS, context)
    assert failure.kind is FailureKind.TIMEOUT
    assert failure.exit_code is None
    assert served.leftovers() == []


def test_a_server_that_ignores_sigterm_and_has_a_child_leaves_nothing(
    served: Case, context: LaunchContext
) -> None:
    backend = served.make("ignore-sigterm", "spawn-child", stop_timeout_s=1)
    backend.start(FITS, context)
    assert len(served.leftovers()) >= 1
    backend.close()
    assert served.leftovers() == []


@dataclass
class Counting:
    """A backend that counts its starts (the runner's reuse is what is under test)."""

    inner: Backend
    starts: list[ServerConfig] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def source(self) -> Source:
        return self.inner.source

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.starts.append(server)
        return self.inner.start(server, context)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        return self.inner.measure(config, concurrency, seed)

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        return self.inner.answer(requests)

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def facts(self, space: SearchSpace) -> RunFacts:
        return self.inner.facts(space)


def test_only_a_server_config_change_restarts(case: Case, context: LaunchContext) -> None:
    backend = Counting(case.make())
    runner = TrialRunner(backend, HARDWARE, Limits(60_000))

    first = runner.run(CONFIG, context, seed=1)
    warmer = runner.run(CONFIG.with_temperature(0.7), replace(context, trial=2), seed=2)
    other = replace(CONFIG, server=replace(FITS, max_num_batched_tokens=1024))
    changed = runner.run(other, replace(context, trial=3), seed=3)

    assert [first.restarted, warmer.restarted, changed.restarted] == [True, False, True]
    assert backend.starts == [FITS, other.server]
    # Each start-up is timed where it takes a host's time; a reused server took none, and the
    # simulator's start has no clock (its wall time is this CPU's, not a GPU host's).
    timed = [first.startup_s, warmer.startup_s, changed.startup_s]
    if backend.source is Source.SIMULATED:
        assert timed == [None, None, None]
    else:
        assert timed[1] is None and all(t is not None and t > 0 for t in (timed[0], timed[2]))
    assert {o.status for o in (first, warmer, changed)} == {TrialStatus.OK}
    runner.close()
    assert case.leftovers() == []


@pytest.mark.parametrize(
    ("name", "kind"), [("sim", SimBackend), ("process", ProcessBackend), ("docker", DockerBackend)]
)
def test_each_backend_is_built_by_its_name(name: str, kind: type) -> None:
    backend = backend_factory(name)(load_space(), BackendOptions(study="s"))  # starts nothing
    assert isinstance(backend, kind) and backend.name == name
    with pytest.raises(ConfigError, match="unknown backend 'cloud': choose one of sim, process"):
        backend_factory("cloud")
