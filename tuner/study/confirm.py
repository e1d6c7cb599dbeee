"""Confirmation: the best configs measured again, each time on a fresh server.

One trial is one measurement, and the search keeps the luckiest ones: the top of a study is
biased upwards. Before a config is exported, :func:`confirm` runs each of the top N configs R
more times, stopping and starting the server between runs (a fresh :class:`TrialRunner` each
time), and stores every run with the mean and a Student-t 95 % confidence interval as the
study's ``confirmed`` user attribute::

    {"<trial number>": {"trial": 20, "source": "simulated", "date": "2026-11-29",
                        "runs": [{"status": "ok", "output_tok_s": 59.1, "p95_ttft_ms": 281.0,
                                  "acceptance_rate": 0.72, "levels": [[1, 59.1], [8, 280.3]]},
                                 ...],
                        "output_tok_s": {"mean": 59.4, "ci95": [58.1, 60.7], "n": 3},
                        "p95_ttft_ms": {"mean": 279.2, "ci95": [270.3, 288.1], "n": 3}}}

Recommendation and export prefer these numbers (:mod:`tuner.analysis.picks`). The simulator
works the same way: each repeat gets its own noise seed, so its intervals are meaningful.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import optuna

from tuner import serde
from tuner.analysis.confirmed import CONFIRMED_ATTR, Confirmed, Run
from tuner.analysis.estimates import scored_ttft_bounds
from tuner.analysis.k_table import K_TABLE_ATTR, KTableVerdict, planned_table, with_table
from tuner.analysis.picks import DEFAULT_PICK, confirmation_order, pick_candidate
from tuner.analysis.trials import level_tok_s
from tuner.bench.summary import gpu_summary, level_summary
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, TrialConfig
from tuner.errors import SpectuneError
from tuner.study.study import record_run
from tuner.trial.backends import Backend
from tuner.trial.record import TrialRecord
from tuner.trial.runner import PowerSetter, TrialOutcome, TrialRunner
from tuner.trial.scoring import TrialStatus

__all__ = ["OnRun", "confirm", "confirm_k_table"]

# Called after each run: (trial number, repeat index, the run).
OnRun = Callable[[int, int, Run], None]


def confirm(  # noqa: PLR0913  (one keyword per confirmation setting)
    study: optuna.Study,
    space: SearchSpace,
    backend: Backend,
    top_n: int = 3,
    repeats: int = 3,
    *,
    log_dir: Path,
    seed: int = 0,
    on_run: OnRun | None = None,
    today: dt.date | None = None,
    power: PowerSetter | None = None,
) -> list[Confirmed]:
    """Measures the top ``top_n`` feasible configs ``repeats`` more times each.

    The candidates are the config the study's own pick would choose on single measurements
    and its runner-up, then those max-throughput, balanced and min-ttft would choose, then the
    next best by throughput, without duplicates (:func:`confirmation_order`). Each run gets
    a fresh server. Results are stored with the study (merged with earlier confirmations) and
    returned in candidate order.

    Args:
        study: the study; its space decides the workload and TTFT limit.
        space: the study's search space.
        backend: runs the servers (the simulator, vLLM processes or containers); its
            server is stopped after each run and left open for the caller to close.
        top_n: configs to confirm; 0 confirms nothing.
        repeats: runs per config (at least 2 for an interval).
        log_dir: server logs go to ``log_dir/confirm-<trial>/trial-<R>.log``, R counting on
            past the runs of earlier (or concurrent) confirmations, whose logs stay.
        seed: the study's seed; each run derives its own from it.
        on_run: progress callback.
        today: the date recorded (tests pin it).
        power: sets the power limit each config was measured at (a study that searches it).
    """
    if top_n < 1 or repeats < 1:
        return []
    candidates = confirmation_order(study)[:top_n]
    date = (today or dt.date.today()).isoformat()
    results = []
    for trial in candidates:
        runs = []
        for repeat in range(repeats):
            run = _run_logged(
                trial,
                space,
                backend,
                _seed(seed, trial, repeat),
                study=study.study_name,
                folder=log_dir / f"confirm-{trial.number}",
                power=power,
            )
            runs.append(run)
            if on_run:
                on_run(trial.number, repeat, run)
        record = Confirmed(trial.number, backend.source, tuple(runs), date)
        results.append(record)
        # Stored per config: an interrupted confirmation of real servers keeps what it measured.
        stored = dict(study.user_attrs.get(CONFIRMED_ATTR) or {})
        stored[str(record.trial)] = serde.dump(record)
        study.set_user_attr(CONFIRMED_ATTR, stored)
    if results:  # the numbers exports show now come from these servers
        record_run(study, backend, space)
    return results


def confirm_k_table(
    study: optuna.Study,
    space: SearchSpace,
    backend: Backend,
    repeats: int = 3,
    *,
    log_dir: Path,
    seed: int = 0,
    on_run: OnRun | None = None,
    power: PowerSetter | None = None,
) -> KTableVerdict | None:
    """Runs the per-batch-size K table the export would write as a config of its own.

    The table is built for the config the default pick recommends (:mod:`tuner.analysis.k_table`)
    and run ``repeats`` times, each on a fresh server, on the whole traffic profile. It wins
    only if every run is feasible and their mean throughput beats the fixed-K config's
    confirmed mean; the verdict is stored with the study either way. None when the study
    proposes no table (one level, one K everywhere, or a vLLM without tables).
    """
    candidate = pick_candidate(study, DEFAULT_PICK)
    _, table = planned_table(study, space, candidate)
    if not table or repeats < 1:
        return None
    record = replace(candidate.record, server=with_table(candidate.record.server, table))
    runs = []
    for repeat in range(repeats):
        run = _run_logged(
            record,
            space,
            backend,
            _seed(seed, record, repeat + repeats),
            study=study.study_name,
            folder=log_dir / f"k-table-{record.number}",
            power=power,
        )
        runs.append(run)
        if on_run:
            on_run(record.number, repeat, run)
    measured = [r.throughput for r in runs if r.ok and r.throughput is not None]
    verdict = KTableVerdict(
        trial=record.number,
        table=table,
        source=backend.source,
        runs=tuple(runs),
        output_tok_s=sum(measured) / len(measured) if len(measured) == len(runs) else None,
        fixed_tok_s=candidate.throughput,
    )
    study.set_user_attr(K_TABLE_ATTR, serde.dump(verdict))
    return verdict


def _seed(seed: int, trial: TrialRecord, repeat: int) -> int:
    # Trials use seed * 100_003 + number; a large odd stride keeps repeats off those seeds.
    return seed * 100_003 + trial.number + 1_000_003 * (repeat + 1)


def _run_logged(
    trial: TrialRecord,
    space: SearchSpace,
    backend: Backend,
    seed: int,
    *,
    study: str,
    folder: Path,
    power: PowerSetter | None = None,
) -> Run:
    """One run, its server's log in a file of its own in ``folder``.

    A second confirmation of the same trial (``spectune confirm`` again, or at the same time
    from another shell or worker) must not overwrite the first one's logs: each run claims the
    lowest free ``trial-<R>.log`` by creating it, which only one process can do. A backend that
    writes no log (the simulator) leaves the claimed file empty, and it is removed.
    """
    number = _claim_log(folder)
    log = folder / f"trial-{number}.log"
    try:
        context = LaunchContext(study, number, folder)
        return _run_once(trial, space, backend, context, seed, power)
    finally:
        with contextlib.suppress(OSError):
            if log.stat().st_size == 0:
                log.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()


def _claim_log(folder: Path) -> int:
    """The lowest R whose ``folder/trial-<R>.log`` this call created (no one else could)."""
    number = 0
    while True:
        try:
            (folder / f"trial-{number}.log").open("x").close()
            return number
        except FileExistsError:
            number += 1
        except FileNotFoundError:  # no folder yet, or a finished run beside this one removed it
            folder.mkdir(parents=True, exist_ok=True)


def _run_once(
    trial: TrialRecord,
    space: SearchSpace,
    backend: Backend,
    context: LaunchContext,
    seed: int,
    power: PowerSetter | None,
) -> Run:
    watts = trial.params.get("power_limit_w")
    client = space.client(trial.trial_temperature)
    config = TrialConfig(trial.server, client, None if watts is None else int(watts))
    runner = TrialRunner.for_space(backend, space, power=power)
    try:
        outcome = runner.run(config, context, seed)
    except SpectuneError as exc:  # a crash or nothing measured: the config is not repeatable
        return Run(TrialStatus.FAILED, failure=str(exc))
    finally:
        # Stop, not close: the next repeat starts its own server on the same backend, which
        # its owner closes when done.
        backend.stop()
    return _run_from(outcome)


def _run_from(outcome: TrialOutcome) -> Run:
    primary = outcome.primary
    if primary is None:
        return Run(outcome.status, failure=outcome.failure)
    measured = outcome.status.measured
    pairs = [level_summary(r, c) for r, c in zip(outcome.results, outcome.conditions, strict=False)]
    return Run(
        status=outcome.status,
        throughput=outcome.score.values[0] if measured else None,
        p95_ttft_ms=outcome.score.values[1] if measured else None,
        acceptance_rate=primary.acceptance_rate,
        levels=level_tok_s(pairs, outcome.score.steps),
        p95_ttft_bounds=scored_ttft_bounds(pairs, outcome.score.steps) if measured else None,
        tokens_per_joule=_tokens_per_joule(outcome) if measured else None,
    )


def _tokens_per_joule(outcome: TrialOutcome) -> float | None:
    """The run's output tokens per joule, all its pairs together, as a trial stores it."""
    gpu = gpu_summary(outcome.results)
    value = gpu.get("tokens_per_joule") if gpu else None
    return None if value is None else float(value)
