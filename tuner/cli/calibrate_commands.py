"""``spectune calibrate``: a handful of designed launches that fit the host's twin."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors, print_json

if TYPE_CHECKING:
    from tuner.sim.twin.fit import FittedTwin
    from tuner.trial.runner import TrialOutcome

__all__ = ["calibrate_command"]


@app.command("calibrate")
@handle_errors
@opt.with_backend_flags
def calibrate_command(
    hardware: opt.Hardware = None,
    gpu_spec: opt.GpuSpecFile = None,
    space: Annotated[
        str | None,
        typer.Option("--space", help="Search space whose model and GPUs to calibrate."),
    ] = None,
    backend: opt.Backend = "docker",
    studies_dir: opt.StudiesDir = Path("studies"),
    seed: opt.Seed = 0,
    gpus: opt.Gpus = None,
    flags: opt.BackendFlags = opt.DECLARED,
    as_json: opt.Json = False,
) -> None:
    """Fit the host's twin on a few designed launches; later studies and estimates start from it."""
    # Here, not at the top: `spectune --help` loads every command module (benchmarks/startup.py).
    from tuner.catalog.gpus import parse_hardware
    from tuner.config.space import load_space
    from tuner.study.storage import check_writable
    from tuner.study.twin_calibrate import calibrate  # the runner and its HTTP clients
    from tuner.trial.backends import backend_factory

    # Before any launch: the fit is written there after minutes of measuring.
    check_writable(studies_dir)
    loaded = load_space(space)
    if hardware is not None:
        loaded = loaded.with_hardware(parse_hardware(hardware))
    options = flags.options(backend, "calibrate", seed, gpus)
    built = backend_factory(backend)(loaded, options)

    def show(outcome: TrialOutcome) -> None:
        if not as_json:
            server = outcome.config.server
            primary = outcome.primary
            speed = "" if primary is None else f" {primary.output_tok_s:.1f} tok/s"
            console.print(
                f"  {server.draft or 'none'} K={server.k}: {outcome.status.value}{speed}",
                markup=False,
            )

    result = calibrate(
        loaded, built, studies_dir, studies_dir / "calibration" / "logs", seed, on_run=show
    )
    if as_json:
        from tuner.cli.outputs import CalibrateOutput

        print_json(CalibrateOutput(str(result.path), result.twin))
        return
    console.print(f"calibrated twin written to {result.path}", markup=False, soft_wrap=True)
    for line in describe(result.twin):
        console.print(f"  {line}", markup=False)


def describe(twin: FittedTwin) -> list[str]:
    """One line per fitted step-time factor and the memory, with a 95 % interval."""
    lines = [
        f"{name}: {value:.3f} (95 % {low:.3f} .. {high:.3f})"
        for name, value, low, high in twin.intervals()
    ]
    lines.append(f"memory margin: {twin.margin_gib:.2f} GiB")
    return lines
