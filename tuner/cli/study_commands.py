"""``spectune optimize``: a study on one host, in several workers, or on a Ray cluster, with
its live table; ``spectune worker`` (tuner.cli.worker_commands) joins one from another host."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors, print_json, warn

# What a study runs on (the search space's schema, the tables that read it, Optuna and
# SQLAlchemy) loads inside the commands: `spectune --help` needs none of it
# (tests/cli/test_startup.py, benchmarks/help_cost.py).
if TYPE_CHECKING:
    from tuner.analysis.confirmed import Run
    from tuner.config.space import SearchSpace
    from tuner.results import StartupEvent
    from tuner.study.optimize import OpenedRun, OptimizeRequest, OptimizeResult
    from tuner.trial.record import TrialRecord


# Trials a time-budgeted run may run at most (and the count of one without a budget before the
# 2-hour default): what the studies table shows as its trial budget.
_TRIAL_CAP = 30


def _default_budget_note(space: SearchSpace) -> str:
    """The one line that says what an optimize without a count or a budget runs to."""
    from tuner.search.plan import expected_share

    share = expected_share(2.0, space.name)
    quoted = (
        f": the search benchmark reached {share.median:.1%} of the optimum in it (worst world "
        f"{share.worst:.1%}, simulated, on {share.space})"
        if share is not None
        else f" (the search benchmark has not run on {space.name}: no share to quote)"
    )
    return (
        f"note: no --trials or --time-budget: running to a {opt.DEFAULT_BUDGET} budget of GPU "
        f"time, trials and confirmation together{quoted}; --trials N runs N trials instead"
    )


@app.command("optimize")
@handle_errors
@opt.with_backend_flags
def optimize_command(
    study: opt.StudyName = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    hardware: opt.Hardware = None,
    gpu_spec: opt.GpuSpecFile = None,
    space: Annotated[
        str | None,
        typer.Option(
            "--space",
            help="Search space: a shipped name or a YAML path (default: default).",
            rich_help_panel=opt.SPACE_PANEL,
        ),
    ] = None,
    backend: opt.Backend = "docker",
    trials: opt.Trials = None,
    sampler: opt.Sampler = "spectune",
    seed: opt.Seed = 0,
    slo_ttft_ms: Annotated[
        float | None,
        typer.Option(
            "--slo-ttft-ms",
            help="p95 TTFT limit in ms (default from the space).",
            rich_help_panel=opt.SPACE_PANEL,
        ),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version",
            help="vLLM version whose flags to speak (default: the image tag, "
            "or `vllm --version` for the process backend).",
            rich_help_panel=opt.SPACE_PANEL,
        ),
    ] = None,
    prefer: opt.Prefer = None,
    allow_power_limit: opt.AllowPowerLimit = False,
    workers: Annotated[
        int,
        opt.bounded(
            "--workers",
            "GpuCount",
            "Parallel workers on this host, each on its own GPUs (needs PostgreSQL).",
            opt.BACKEND_PANEL,
        ),
    ] = 1,
    gpus_per_trial: Annotated[
        int | None,
        opt.bounded(
            "--gpus-per-trial",
            "GpuCount",
            "GPUs each worker uses (default: the hardware's count).",
            opt.BACKEND_PANEL,
        ),
    ] = None,
    gpus: opt.Gpus = None,
    ray: opt.Ray = None,
    parallel: opt.Parallel = 1,
    flags: opt.BackendFlags = opt.DECLARED,
    prefetch: opt.Prefetch = True,
    confirm_top: Annotated[
        int,
        opt.bounded(
            "--confirm-top",
            "Picks",
            "Best configs measured again on fresh servers (0: none).",
            opt.BUDGET_PANEL,
        ),
    ] = 3,
    confirm_repeats: Annotated[
        int,
        opt.bounded(
            "--confirm-repeats",
            "Repeats",
            "Fresh runs per confirmed config.",
            opt.BUDGET_PANEL,
        ),
    ] = 3,
    time_budget: opt.TimeBudget = None,
    rounds: opt.Rounds = True,
    plan: opt.Plan = False,
    as_json: opt.Json = False,
) -> None:
    """Run a tuning study, confirm the best configs, and export the recommended one."""
    # Here, not at the top: they load the backends' container and HTTP libraries, which
    # `spectune --help` should not pay for.
    from tuner.cli.durations import parse_duration
    from tuner.config.space_choice import SpaceChoice
    from tuner.study.cluster import RayOptions
    from tuner.study.optimize import OpenedRun, OptimizeRequest, optimize

    choice = SpaceChoice(space, hardware, slo_ttft_ms, vllm_version, prefer)
    built = choice.resolve()
    # A default a user can spare; a time budget runs in one worker on this host, so several
    # workers or a Ray cluster keep the count.
    default_budget = trials is None and time_budget is None and workers == 1 and ray is None
    if default_budget:
        time_budget = opt.DEFAULT_BUDGET
    name = study or built.name
    options = flags.options(backend, name, seed, gpus)
    starting = Text("", style="dim")  # the live table's line on the server start in progress
    if not as_json:
        options = replace(options, on_startup=lambda event: _show_startup(starting, event))
    request = OptimizeRequest(
        name,
        built,
        backend,
        trials if trials is not None else _TRIAL_CAP,
        studies_dir,
        storage=storage,
        sampler=sampler,
        seed=seed,
        workers=workers,
        gpus_per_trial=gpus_per_trial,
        backend_options=options,
        confirm_top=confirm_top,
        confirm_repeats=confirm_repeats,
        ray=None if ray is None else RayOptions(ray, parallel),
        prefetch=prefetch,
        time_budget_s=None if time_budget is None else parse_duration(time_budget),
        rounds=rounds,
        resume_stored=not choice.explicit,  # no space option: a stored study keeps its own
        detect_hardware=hardware is None and ray is None,  # a Ray cluster's nodes: their own
        allow_power_limit=allow_power_limit,
    )
    if plan:
        _print_plan(request, default_budget, as_json)
        return
    opened = OpenedRun.open(request, on_notice=warn)  # every refusal before the live table
    if default_budget:  # said once the request holds: a refusal stays one line
        warn(_default_budget_note(built))
    if as_json:
        from tuner.cli.study_outputs import OptimizeOutput

        print_json(OptimizeOutput.of(optimize(opened)))
        return
    _print_optimize(_run_live(opened, starting, trials, confirm_repeats))


def _print_plan(request: OptimizeRequest, default_budget: bool, as_json: bool) -> None:
    """``--plan``: the run's expected GPU time, trial by trial; nothing runs or is stored."""
    from tuner.cli.render import plan_table
    from tuner.study.optimize import plan_run

    planned = plan_run(request)  # a refusal first, and alone
    assert request.space is not None  # plan_run refuses a request without one
    if default_budget:
        warn(_default_budget_note(request.space))
    if as_json:
        print_json(planned)
    else:
        console.print(plan_table(planned, request.space))


def _run_live(
    opened: OpenedRun, starting: Text, trials: int | None, confirm_repeats: int
) -> OptimizeResult:
    """Runs ``opened`` under the live table: a row per trial, the server start in progress
    (``starting``), and a bar counting to ``trials`` (open-ended under a time budget)."""
    from tuner.cli.render import confirm_run_line, record_row, trial_table
    from tuner.study.optimize import optimize
    from tuner.trial.backends.kinds import BackendKind
    from tuner.trial.scoring import TrialStatus

    source = BackendKind.parse(opened.request.backend).source.value
    objective = opened.space.objective
    table = trial_table(f"study {opened.request.study}: {source} trials", objective)
    progress = Progress(
        TextColumn("trials"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("trials", total=trials)  # None under a time budget: open-ended

    def on_confirm(number: int, repeat: int, run: Run) -> None:
        line = confirm_run_line(number, repeat, run, confirm_repeats, source, objective)
        console.print(line)

    def on_tick(finished: int) -> None:  # worker processes report through the database
        progress.update(task, completed=finished)

    def on_trial(record: TrialRecord) -> None:
        table.add_row(*record_row(record))
        if record.status is TrialStatus.FAILED:
            progress.console.print(f"trial {record.number} failed: {record.failure}", markup=False)
        progress.advance(task)

    with Live(Group(table, starting, progress), console=console, refresh_per_second=4):
        result = optimize(opened, on_trial, on_tick=on_tick, on_confirm=on_confirm)
    console.print()
    return result


def _show_startup(line: Text, event: StartupEvent) -> None:
    """The live table's line on what the server start is doing (blank once it is ready)."""
    if event.phase == "ready":
        line.plain = ""
        return
    detail = f": {event.detail}" if event.detail else ""
    line.plain = f"server start: {event.phase}{detail} ({event.elapsed_s:.0f} s)"


def _print_optimize(result: OptimizeResult) -> None:
    from tuner.analysis.gpu import throttle_note
    from tuner.analysis.infeasible import infeasible_reasons
    from tuner.analysis.picks import study_pick
    from tuner.cli.render import (
        confirmed_table,
        energy_lines,
        k_table_line,
        recommendation,
        records_table,
    )
    from tuner.study.storage import safe_url
    from tuner.trial.record import records

    if result.pareto:
        source = result.pareto[0].source
        title = f"Pareto front (feasible, {source})"
        console.print(records_table(title, result.pareto, result.space.objective))
    else:
        console.print("Pareto front: no feasible trial")
    best = result.recommended
    if best is None:
        why = infeasible_reasons(
            r.status for r in records(result.handle.get_trials(deepcopy=False))
        )
        console.print(f"No config recommended: {why}.", markup=False, soft_wrap=True)
        return
    limit, objective = result.space.ttft_limit_ms, result.space.objective
    if result.confirmed:
        console.print(confirmed_table(result.confirmed, limit, objective))
    if result.k_table is not None:
        console.print(k_table_line(result.k_table), markup=False)
    console.print(recommendation(best, limit, objective, study_pick(result.handle)))
    for line in energy_lines(result.handle, result.space):
        console.print(line, markup=False, soft_wrap=True)
    hot = throttle_note(records(result.handle.get_trials(deepcopy=False)))
    if hot is not None:
        console.print(f"WARNING: {hot}", markup=False, soft_wrap=True)
    for warning in best.record.served.warnings if best.record.served else ():
        console.print(f"WARNING: {warning}", markup=False)
    where = safe_url(result.storage)
    console.print(
        f"Wrote {result.best_yaml} (vllm serve --config); study in {where}",
        markup=False,
        soft_wrap=True,
    )
    if result.budget_note:
        console.print(result.budget_note, markup=False)
