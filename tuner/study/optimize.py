"""``spectune optimize`` as a library call: open the run, warm start, run the trials, confirm
the best, export ``best.yaml``. The run owns what the steps share (:mod:`tuner.study.run`)."""

from __future__ import annotations

from collections.abc import Callable

from tuner.study.confirm import OnRun
from tuner.study.lifecycle import OnTrial
from tuner.study.power_limit import held
from tuner.study.request import OptimizeRequest, check_request
from tuner.study.run import OpenedRun, OptimizeResult, StudyRun, plan_run
from tuner.trial.backends import Backend

__all__ = [
    "OpenedRun",
    "OptimizeRequest",
    "OptimizeResult",
    "StudyRun",
    "check_request",
    "optimize",
    "plan_run",
]


def optimize(
    request: OptimizeRequest | OpenedRun,
    on_trial: OnTrial | None = None,
    backend: Backend | None = None,
    on_tick: Callable[[int], None] | None = None,
    on_confirm: OnRun | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Runs ``request.trials`` more trials (in ``request.workers`` workers), confirms the best
    and writes it as ``best.yaml`` (``result.best_yaml``).

    Args:
        request: what to run, or a run already opened from it (:meth:`OpenedRun.open`: the
            CLI opens it before its live table, so every refusal comes first).
        on_trial: called after each trial of an in-process run (one worker).
        backend: a ready backend to use instead of building one (tests, benchmarks); with a
            request only, an opened run holds its own.
        on_tick: called about once a second while worker processes run, with the number of
            trials they have finished so far.
        on_confirm: called after each confirmation run.
        on_notice: with a request only, called with each line to show before the first trial
            (the study resumes, this host's GPUs replace the space's, the space's warnings).
    """
    if isinstance(request, OpenedRun) and (backend is not None or on_notice is not None):
        raise TypeError("an opened run holds its backend and notices: pass them to open")
    opened = (
        request if isinstance(request, OpenedRun) else OpenedRun.open(request, backend, on_notice)
    )
    prepared = opened.prepare()  # the hosts ready: nothing stored yet
    with held(prepared.power):  # a power limit the trials set is restored however this ends
        run = prepared.start()  # the study stored and seeded
        run.run_trials(on_trial, on_tick)
        confirmed, k_table = run.confirm(on_confirm)
        return run.export(confirmed, k_table)
