"""Result commands: export, report, dashboard and confirm, each on an existing study."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.analysis.pick_names import PICKS
from tuner.cli import options as opt
from tuner.cli.app import app, console, err_console, handle_errors, print_json
from tuner.errors import ConfigError
from tuner.export.formats import FORMATS
from tuner.launch.exit_hooks import Terminated
from tuner.study.paths import StudyPaths, default_storage, write_whole
from tuner.trial.backends.kinds import BackendKind

# Optuna, SQLAlchemy and the modules that import them load inside each command: `spectune
# --help` and the commands without a study need none of them (tests/cli/test_startup.py).
if TYPE_CHECKING:
    import optuna

    from tuner.analysis.confirmed import Run
    from tuner.config.space import SearchSpace

__all__ = [
    "confirm_command",
    "dashboard_command",
    "export_command",
    "report_command",
]

Name = Annotated[str, typer.Argument(help="Study name.")]


def _open(
    name: str, storage: str | None, studies_dir: Path
) -> tuple[optuna.Study, SearchSpace, str, StudyPaths]:
    from tuner.study.study import open_existing  # which imports the backends' libraries

    url = storage or default_storage(name, studies_dir)
    study, space = open_existing(name, url)
    return study, space, url, StudyPaths.of(studies_dir, name, url)


@app.command("export")
@handle_errors
def export_command(
    name: Name,
    fmt: Annotated[
        str, typer.Option("--format", help=f"Output format: {', '.join(FORMATS)}.")
    ] = "vllm",
    pick: Annotated[
        str | None,
        typer.Option(
            "--pick",
            help=f"Which config: {', '.join(PICKS)}, or a trial number (default: the one the "
            "study's slo.prefer names, max-throughput unless set).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="File to write (default stdout).")
    ] = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    as_json: opt.Json = False,
) -> None:
    """Export a config: vLLM --config YAML, docker-compose.yml, docker run line, Kubernetes
    Deployment and Service, or JSON."""
    from tuner.export.vllm import export
    from tuner.study.storage import check_writable

    study, space, _, _ = _open(name, storage, studies_dir)
    exported = export(study, space, fmt, pick)
    if out is not None:
        check_writable(out.parent, "output folder", "--out")
        write_whole(out, exported.text)
        if fmt == "docker-run":
            out.chmod(0o755)
    if as_json:
        from tuner.cli.study_outputs import ExportOutput

        print_json(ExportOutput.of(exported, out))
    elif out is None:
        sys.stdout.write(exported.text)
    else:
        facts = exported.provenance
        console.print(
            f"Wrote {out} ({fmt}) from trial {facts.trial} ({facts.source})",
            markup=False,
            soft_wrap=True,
        )


@app.command("report")
@handle_errors
def report_command(
    name: Name,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for report.html and the charts (default STUDIES_DIR/STUDY/report).",
        ),
    ] = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    as_json: opt.Json = False,
) -> None:
    """Write a self-contained HTML report with PNG charts."""
    from tuner.report.page import write_report  # matplotlib: only when drawing
    from tuner.study.storage import check_writable

    study, space, _, paths = _open(name, storage, studies_dir)
    target = out or paths.report
    check_writable(target, "report folder", "--out")
    # How `spectune export` finds this study again, for the commands the page shows; a
    # storage URL may hold a password, so the page names the variable instead.
    flags = ["--storage", "$SPECTUNE_STORAGE"] if storage else ["--studies-dir", str(studies_dir)]
    report = write_report(study, space, target, export_flags=flags)
    if as_json:
        from tuner.cli.study_outputs import ReportOutput

        print_json(ReportOutput.of(report))
        return
    drawn = ", ".join(f"{c.name} ({c.points})" for c in report.charts)
    console.print(f"Wrote {report.html} with charts: {drawn}", markup=False, soft_wrap=True)


@app.command("dashboard")
@handle_errors
def dashboard_command(
    name: Name,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, opt.bounded("--port", "Port", "Port to listen on (1-65535).")] = 8080,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
) -> None:
    """Open the study in optuna-dashboard (OOM and over-limit trials shown infeasible)."""
    from tuner.report.dashboard import prepare_dashboard, serve_dashboard

    _check_port(host, port)
    study, _, url, paths = _open(name, storage, studies_dir)
    info = prepare_dashboard(study, paths)
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    console.print(
        f"optuna-dashboard for study {name}: "
        f"http://{shown}:{port}/dashboard/studies/{info.study_id}\n"
        f"  {info.trials} trials, {info.infeasible} infeasible (OOM or over the TTFT limit); "
        f"{info.artifacts_added} logs attached now; Ctrl-C stops it",
        soft_wrap=True,
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"  listening on {host}: anyone who can reach it can edit the study", markup=False
        )
    try:
        serve_dashboard(url, paths, host, port)
    except Terminated as exc:
        err_console.print(f"dashboard {exc}")
        raise typer.Exit(128 + exc.signum) from None
    except KeyboardInterrupt:
        err_console.print("dashboard stopped")
        raise typer.Exit(130) from None


def _check_port(host: str, port: int) -> None:
    """A busy port is one line before the study is touched, not the server's traceback."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--port {port}: cannot listen on {host}:{port} ({os.strerror(exc.errno or 0)}): "
            "choose another "
            "port with --port"
        ) from None


@app.command("confirm")
@handle_errors
@opt.with_backend_flags
def confirm_command(
    name: Name,
    top: Annotated[int, opt.bounded("--top", "Picks", "Configs to confirm (0: none).")] = 3,
    repeats: Annotated[
        int, opt.bounded("--repeats", "Repeats", "Runs per config, each on a fresh server.")
    ] = 3,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="sim, process or docker (default: sim for simulated studies).",
        ),
    ] = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    seed: opt.Seed = 0,
    gpus: opt.Gpus = None,
    ray: opt.Ray = None,
    flags: opt.BackendFlags = opt.DECLARED,
    as_json: opt.Json = False,
) -> None:
    """Measure the best configs again on fresh servers; export and report use the means."""
    from tuner.cli.render import confirm_run_line, confirmed_table
    from tuner.study.cluster import RayOptions
    from tuner.study.request import OptimizeRequest
    from tuner.study.run import StudyRun

    chosen = backend or "sim"  # a measured study names the backend it ran on (one line if not)
    request = OptimizeRequest(
        name,
        None,  # the study's own space
        chosen,
        1,  # confirmation adds no trials
        studies_dir,
        storage=storage,
        seed=seed,
        backend_options=flags.options(chosen, name, seed, gpus),
        confirm_top=top,
        confirm_repeats=repeats,
        confirm_k_table=False,
        ray=None if ray is None else RayOptions(ray),
        prefetch=False,
    )
    run = StudyRun.reopen(request)
    space, source = run.space, BackendKind.parse(chosen).source.value

    def on_run(number: int, repeat: int, measured: Run) -> None:
        line = confirm_run_line(number, repeat, measured, repeats, source, space.objective)
        console.print(line)

    results, _ = run.confirm(None if as_json else on_run)
    if as_json:
        from tuner.cli.study_outputs import ConfirmedOutput

        outputs = ConfirmedOutput.all_of(results, space.ttft_limit_ms)
        print_json(outputs, list[ConfirmedOutput])
        return
    if not results:
        console.print("Nothing to confirm: the study has no feasible config yet")
        return
    console.print(confirmed_table(results, space.ttft_limit_ms, space.objective))
    best = run.export(results, None).best_yaml
    console.print(f"Updated {best} from the confirmed numbers", markup=False, soft_wrap=True)
