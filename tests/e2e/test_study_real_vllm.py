"""A real study against real ``vllm serve`` (CPU build), through the process backend.

Six trials: ngram at K=2, the same server at another temperature (a request-side change that
must reuse it), a draft model at K=2, then ngram at K=4, the draft at K=3 and ngram at K=3.
Every other trial restarts the server and reads the spec-decode counters from vLLM's own
/metrics; no server is left once the study ends; what vLLM says it ran is read from its log.
(This is also the backend contract's case on real vLLM.)

It is also the twin's proof on real data (issue 14), in two parts, judged on the last three
trials with the twin fitted on the first three:
- **Acceptance**: the fitted twin predicts the accepted tokens per draft step better than the
  shipped model. Prompt lookup on the tiny random model accepts about nine drafts in ten at
  temperature 0, the tiny draft model nearly all (the shipped prior, fitted to real LLMs, far
  fewer); the fit reads that from vLLM's per-position counters, which do not depend on how
  fast the host is.
- **Speed**: the fitted twin's tok/s is within a factor of 2 of what was measured (mean log
  error under log 2). It learns this host's step times; a start-up of the same config here
  runs up to 1.5x faster or slower than the one before (ngram at K=3 measured 2.99 ms a step
  where K=2 took 4.53 in one run on an idle machine).
The speed verdict used to be "fitted closer than shipped", as for acceptance. On slow cores
that held with room to spare (fitted 0.12-0.63, shipped 0.77-1.5 in six runs), but the
shipped model forecasts a 4090, not this CPU, and on faster cores it lands close by chance:
in two CI runs (2026-12-04) its mean log error was 0.14 and 0.18 (in the second within 2
and 8 % on two of the three trials), and one start-up's drift put the fitted twin behind it
(0.24 and 0.23). Which of two models is nearer a host neither was built for is not a
property of the twin.

Four runs on 2 cores shared with four other engineers' suites (issue 23) took 556-627 s, five
server starts of 60-90 s each under that load, hence the long timeout; on an idle CI machine
of 2026-12 it takes about 110 s.

What is tested elsewhere on real vLLM, so not started again here: the exported best.yaml under
``vllm serve --config`` and ``spectune bench`` on it (tests/export/test_vllm.py), vLLM
without speculation in a container (tests/launch/docker/test_vllm.py); a KV cache too small is
classified from the real build's own log (tests/launch/test_failures.py).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tests.testbed import TinyModels, vllm_command, vllm_env
from tuner.config.space import SearchSpace, space_from_dict
from tuner.search.twin_steer import observations, stored_twin
from tuner.sim.acceptance import expected_accepted
from tuner.sim.twin.fit import FittedTwin, fit
from tuner.sim.twin.model import TwinPhysics
from tuner.sim.virtual_time import predict
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import make_sampler, open_study
from tuner.trial.backends import BackendOptions, ProcessSettings
from tuner.trial.record import TrialRecord, records
from tuner.trial.scoring import TrialStatus

pytestmark = pytest.mark.vllm

OUTPUT_TOKENS = 64
REQUESTS = 8
MAX_MODEL_LEN = 512
FITTED_ON = 3  # the trials the twin is fitted on; it predicts the ones after them


def _space(models: TinyModels) -> dict[str, Any]:
    return {
        "name": "tiny",
        "hardware": "4090x1",  # the pre-screen sizes these tiny models against one 4090
        "target": str(models.target),
        "server": {
            "max_model_len": MAX_MODEL_LEN,
            "extra_flags": {"enforce-eager": True, "kv-cache-memory-bytes": "64M"},
        },
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 60000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 48,
            "output_tokens": OUTPUT_TOKENS,
            "concurrency": [1],
            "requests": REQUESTS,
            # The CPU build runs a new server's first requests slowly (kernels made on first use).
            "warmup": 3,
        },
        "search": {
            "draft": ["none", "ngram", str(models.draft)],
            "num_speculative_tokens": {"low": 2, "high": 4},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [512],
            "temperature": {"low": 0.0, "high": 0.5, "step": 0.5},
        },
    }


@pytest.fixture
def server_prefix(
    tmp_path: Path, vllm_cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, ...]]:
    """vLLM's environment, and a quiet host: yields the prefix that keeps the server on the
    first core while the test (the load generator) runs on the others.

    vLLM's CPU build binds its OpenMP threads to every core by default
    (``VLLM_CPU_OMP_THREADS_BIND=auto``, vllm/envs.py), where they fight the load generator on
    a 2-core machine: the same config then measured 1.5 to 4.7 ms a step from one start to the
    next. One thread on core 0 and the test on core 1 made it 1.4 to 1.8 ms.

    The suite's other workers (pytest-xdist) and everything they started move off core 0 too,
    for as long as the fixture holds: their simulated studies took half that core at random
    moments, and the twin's proof then compared trials measured at different speeds (a CI run
    measured the later trials at half the speed of the ones the twin was fitted on).
    """
    for key, value in vllm_env(tmp_path / "run", vllm_cache_root).items():
        monkeypatch.setenv(key, value)
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield ()
        return
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", str(cores[0]))
    _pin([os.getpid(), *_rest_of_suite()], cores[1:])
    try:
        yield ("taskset", "-c", str(cores[0]))
    finally:
        _pin([os.getpid(), *_rest_of_suite()], cores)


def _rest_of_suite() -> list[int]:
    """The other pytest-xdist workers of this run and every process they started (none alone)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return []
    found: list[int] = []
    todo = [pid for pid in _children(os.getppid()) if pid != os.getpid()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (/proc lists them per thread)."""
    found = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _pin(pids: list[int], cores: list[int]) -> None:
    """Pins every thread of ``pids``: Linux keeps an affinity per thread, and a process forked
    from a thread pinned before (a pool's, an executor's) would otherwise run on every core."""
    for pid in pids:
        with contextlib.suppress(OSError):  # it ended meanwhile
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), cores)


@pytest.mark.timeout(1500)  # five real starts: 556-627 s measured on a shared 2-core machine
def test_a_study_on_real_vllm_measures_every_method_and_its_twin_learns(
    tiny_models: TinyModels, tmp_path: Path, server_prefix: tuple[str, ...]
) -> None:
    space = space_from_dict(_space(tiny_models))
    storage = open_storage(default_storage("tiny", tmp_path))
    study, _ = open_study("tiny", storage, space, make_sampler("spectune", 0))
    draft = str(tiny_models.draft)
    plan = [
        ("ngram", 2, 0.0),
        ("ngram", 2, 0.5),
        (draft, 2, 0.0),
        ("ngram", 4, 0.0),
        (draft, 3, 0.0),
        ("ngram", 3, 0.0),
    ]
    for method, k, temperature in plan:
        study.enqueue_trial(
            {"draft": method, "num_speculative_tokens": k, "temperature": temperature}
        )
    command = server_prefix + vllm_command()
    options = BackendOptions(
        study="", settings=ProcessSettings(vllm_command=command, ready_timeout_s=300)
    )
    # No confirmation runs: each would be one more real start (about 30 s on 2 cores); the
    # confirmation path itself is tested on the simulator and the fake server.
    request = OptimizeRequest(
        "tiny", space, "process", len(plan), tmp_path, backend_options=options, confirm_top=0
    )
    result = optimize(request)

    done = optuna.load_study(study_name="tiny", storage=storage).get_trials()
    assert [t.state for t in done] == [TrialState.COMPLETE] * len(plan)
    ran = [
        (t.params["draft"], t.params["num_speculative_tokens"], t.params["temperature"])
        for t in done
    ]
    assert ran == plan
    assert [t.user_attrs["restarted"] for t in done] == [True, False, True, True, True, True]
    # Each real start is timed and stored; the reused server's trial took none.
    timed = [t.user_attrs.get("startup_s") for t in done]
    assert timed[1] is None and all(s is not None and s > 0 for s in timed[:1] + timed[2:])
    assert _servers_of(tiny_models.target) == []  # (children: the contract suite's fake server)
    assert all(t.user_attrs["source"] == "measured" for t in done)
    assert all(t.user_attrs["status"] == "ok" for t in done)
    summaries = [t.user_attrs["summary"] for t in done]
    assert all(s["acceptance_rate"] is not None and s["errors"] == 0 for s in summaries)
    assert summaries[0]["acceptance_rate"] > 0  # ngram on code prompts finds its n-grams
    for (_, _, temperature), summary in zip(plan, summaries, strict=True):
        if temperature == 0:  # greedy: the random model never picks its end-of-turn token
            assert summary["output_tokens"] == REQUESTS * OUTPUT_TOKENS
        assert 0 < summary["output_tokens"] <= REQUESTS * OUTPUT_TOKENS
    logs = [(tmp_path / "tiny" / "logs" / f"trial-{t.number}.log").exists() for t in done]
    assert logs == [True, False, True, True, True, True]  # the second ran on the first's server
    assert result.recommended is not None
    # What vLLM's CPU build says it ran (it names no attention backend: platforms/cpu.py).
    served = [r.served for r in records(done) if r.served is not None]
    assert len(served) == len(done)
    assert all(s.device == "cpu" and s.chunked_prefill is not None for s in served)
    assert all(s.kv_cache_tokens and s.kv_cache_tokens >= MAX_MODEL_LEN for s in served)
    twin = stored_twin(optuna.load_study(study_name="tiny", storage=storage))
    assert twin is not None and twin.observations == len(plan)  # refitted after every trial

    # The proof: the twin fitted on the first trials, as the study fitted it after them,
    # against the shipped model, on what the later trials measured.
    fitted = fit(space.hardware, observations(space, done[:FITTED_ON]), FittedTwin())
    later = records(done)[FITTED_ON:]
    twins = (("shipped", FittedTwin()), ("fitted", fitted))
    # What the counters say does not depend on how fast this host is: the fit reads it.
    accepted = {name: [_accepted_error(space, r, twin) for r in later] for name, twin in twins}
    mean = {name: sum(e) / len(e) for name, e in accepted.items()}
    assert mean["fitted"] < mean["shipped"], accepted
    # Speed does: the fitted twin's tok/s lands within a factor of 2 of this host's, whose
    # speed moves by up to 1.5x from one start to the next (the shipped model, a 4090's, may
    # land anywhere: 2.2 to 4.5 times off on slow cores, within 2-8 % of some trials on fast
    # ones).
    speed = [_log_error(space, record, fitted) for record in later]
    measured = [round(r.throughput or 0.0, 1) for r in records(done)]
    assert sum(speed) / len(speed) < math.log(2), (speed, "tok/s of every trial:", measured)


def test_a_goodput_study_on_real_vllm_climbs_its_rates_on_one_server(
    tiny_models: TinyModels, tmp_path: Path, server_prefix: tuple[str, ...]
) -> None:
    """Goodput on real vLLM: the rates climbed, each step judged by its own p95s.

    On this CPU the tiny model's p95 TPOT grew from about 2.3 ms at 2 requests/s to 3.7 ms at
    128, so a 3 ms limit usually stops the climb part-way; either way each step's verdict must
    follow from what vLLM served at that rate.
    """
    raw = _space(tiny_models)
    raw["slo"] = {"objective": "goodput", "ttft_ms": 1000, "tpot_ms": 3.0}
    raw["workload"] = {**raw["workload"], "request_rate": [2, 8, 32, 128], "temperature": 0.0}
    del raw["workload"]["concurrency"]
    raw["search"] = {**raw["search"], "draft": ["ngram"], "num_speculative_tokens": 2}
    del raw["search"]["temperature"]
    space = space_from_dict(raw)
    options = BackendOptions(
        study="",
        settings=ProcessSettings(vllm_command=server_prefix + vllm_command(), ready_timeout_s=300),
    )
    request = OptimizeRequest(
        "tiny-goodput", space, "process", 1, tmp_path, backend_options=options, confirm_top=0
    )
    optimize(request)

    storage = open_storage(default_storage("tiny-goodput", tmp_path))
    (record,) = records(optuna.load_study(study_name="tiny-goodput", storage=storage).get_trials())
    assert record.status in (TrialStatus.OK, TrialStatus.OVER_TPOT), record.failure
    assert record.restarted and record.failed_share == 0.0 and record.values is not None
    order = list(dict.fromkeys(float(level["offered_rate"]) for level in record.levels))
    assert [rate for rate, _ in record.steps] == sorted(order)
    ladder = [rate for rate in order if rate in (2, 8, 32, 128)]
    assert ladder == [2, 8, 32, 128][: len(ladder)]  # climbed from the lowest, in order
    for level in record.levels:  # each step's verdict is its own p95s against the limits
        ok = level["ttft_p95_ms"] <= 1000 and level["tpot_p95_ms"] <= 3.0
        assert dict(record.steps)[float(level["offered_rate"])] is ok, level
        assert level["errors"] == 0 and level["request_rate"] > 0
    passed = [rate for rate, ok in record.steps if ok]
    assert record.values[0] == max(passed, default=0.0)
    verdicts = dict(record.steps)
    missed = [rate for rate in ladder if not verdicts[rate]]
    if missed and missed[0] > ladder[0]:  # stopped at the first miss, then measured between
        (between,) = set(order) - set(ladder)
        assert ladder[-1] == missed[0] and ladder[-2] < between < missed[0]
    else:  # every step passed, or the lowest missed: nothing between to measure
        assert order == ladder


@pytest.mark.timeout(600)
def test_on_real_vllm_a_losing_trial_stops_early_and_is_pruned_after_its_first_pair(
    tiny_models: TinyModels, tmp_path: Path, server_prefix: tuple[str, ...]
) -> None:
    """Rounds and pruning on real vLLM: one server, two trials, only the temperature differs.

    Prompt lookup at K=4 accepts about nine drafts in ten at temperature 0 on the tiny random
    model and few at temperature 1, so the second trial's first (and only) pair is clearly
    below the first's after one round: it stops at half the requests, and the trial ends
    PRUNED with that pair and its interval stored.
    """
    raw = _space(tiny_models)
    raw["search"] = {
        **raw["search"],
        "draft": ["ngram"],
        "num_speculative_tokens": 4,
        "temperature": {"low": 0.0, "high": 1.0, "step": 1.0},
    }
    space = space_from_dict(raw)
    storage = open_storage(default_storage("tiny-rounds", tmp_path))
    study, _ = open_study("tiny-rounds", storage, space, make_sampler("random", 0))
    for temperature in (0.0, 1.0):
        study.enqueue_trial({"draft": "ngram", "temperature": temperature})
    options = BackendOptions(
        study="",
        settings=ProcessSettings(vllm_command=server_prefix + vllm_command(), ready_timeout_s=300),
    )
    request = OptimizeRequest(
        "tiny-rounds",
        space,
        "process",
        2,
        tmp_path,
        backend_options=options,
        sampler="random",
        confirm_top=0,
        rounds=True,
    )
    result = optimize(request)

    first, second = optuna.load_study(study_name="tiny-rounds", storage=storage).get_trials()
    assert first.state is TrialState.COMPLETE and first.user_attrs["restarted"]
    # vLLM's start, timed until ready (45.5 s once on 2 shared cores): what --plan prices this
    # family's next start-up at. More than a second: model loading, not a stub's.
    assert first.user_attrs["startup_s"] > 1.0
    (incumbent,) = first.user_attrs["levels"]
    assert (incumbent["requests"], incumbent["stopped"]) == (REQUESTS, "no incumbent")
    assert second.state is TrialState.PRUNED, second.user_attrs
    assert not second.user_attrs["restarted"]  # a request-side change: the same server
    assert "startup_s" not in second.user_attrs
    (pair,) = second.user_attrs["levels"]
    # Stopped early: one round, half the requests, its interval wholly under the incumbent's.
    assert (pair["requests"], pair["rounds"], pair["stopped"]) == (
        REQUESTS // 2,
        1,
        "below the incumbent",
    )
    low, mid, high = pair["tok_s_interval"]
    assert low <= mid <= high < incumbent["tok_s_interval"][0]
    assert "cannot reach trial 0" in second.user_attrs["pruned"]
    assert "1 of 1 pairs measured" in second.user_attrs["pruned"]
    assert result.recommended is not None and result.recommended.record.number == 0
    assert _servers_of(tiny_models.target) == []


def _accepted_error(space: SearchSpace, record: TrialRecord, twin: FittedTwin) -> float:
    """|log(predicted / measured)| of a trial's accepted tokens per draft step (the sum of its
    per-position acceptance, as vLLM's counters give it)."""
    spec = record.server.speculative
    assert spec is not None
    draft = space.draft_model(record.draft) if record.server.draft_model else None
    rates = TwinPhysics(twin.params).position_rates(
        space.target,
        draft,
        spec.method,
        space.workload.prompt_set,
        record.trial_temperature,
        record.server.k,
        speculative=spec,
    )
    measured = sum(record.summary["acceptance_per_position"])
    assert measured > 0  # greedy on code prompts: every later trial accepts drafts
    return abs(math.log(sum(expected_accepted(rates)) / measured))


def _log_error(space: SearchSpace, record: TrialRecord, twin: FittedTwin) -> float:
    """|log(predicted / measured)| of a trial's output tok/s: a factor of 2 either way is 0.69."""
    draft = space.draft_model(record.draft) if record.server.draft_model else None
    predicted = predict(
        space.hardware,
        space.target,
        draft,
        record.server,
        record.trial_temperature,
        space.workload,
        1,
        TwinPhysics(twin.params),
    )
    measured = record.throughput
    assert measured is not None
    return abs(math.log(predicted.output_tok_s / measured))


def _servers_of(model: Path) -> list[int]:
    """Processes of this host whose command line names ``model`` (a `vllm serve` of it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # it ended while we looked
            continue
        if str(model).encode() in argv:
            found.append(int(cmdline.parent.name))
    return found
