"""``spectune optimize`` as a library call: open the run, warm start, run the trials, confirm
the best, export ``best.yaml``. The run owns what the steps share (:mod:`tuner.study.run`)."""

from __future__ import annotations

from collections.abc import Callable

from tuner.study.confirm import OnRun
from tuner.study.lifecycle import OnTrial
from tuner.study.power_limit import held
from tuner.study.request import OptimizeRequest, check_request
from tuner.study.run import OptimizeResult, StudyRun, plan_run
from tuner.trial.backends import Backend

__all__ = [
    "OptimizeRequest",
    "OptimizeResult",
    "StudyRun",
    "check_request",
    "optimize",
    "plan_run",
]


def optimize(
    request: OptimizeRequest | StudyRun,
    on_trial: OnTrial | None = None,
    backend: Backend | None = None,
    on_tick: Callable[[int], None] | None = None,
    on_confirm: OnRun | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Runs ``request.trials`` more trials (in ``request.workers`` workers), confirms the best
    and writes it as ``best.yaml`` (``result.best_yaml``).

    Args:
        request: what to run, or a run already opened from it (:meth:`StudyRun.open`: the
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
    if isinstance(request, StudyRun) and (backend is not None or on_notice is not None):
        raise TypeError("an opened StudyRun holds its backend and notices: pass them to open")
    run = request if isinstance(request, StudyRun) else StudyRun.open(request, backend, on_notice)
    run.prepare()  # the host or the cluster ready: nothing stored yet
    with held(run.power):  # a power limit the trials set is restored however this ends
        run.start()
        run.warm_start()
        run.run_trials(on_trial, on_tick)
        confirmed, k_table = run.confirm(on_confirm)
        return run.export(confirmed, k_table)
