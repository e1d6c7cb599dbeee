"""Typer option aliases shared between commands, so a flag means the same everywhere."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from tuner.cli.app import handle_errors
from tuner.config import limits
from tuner.config.local_paths import absolute
from tuner.config.preference import Preference
from tuner.errors import ConfigError
from tuner.study.paths import absolute_storage
from tuner.trial.backends.settings import FLAGS, Flag, settings_from_flags

# `--help` reads these declarations: what they check with (pydantic, the GPU catalog, the
# backends) loads when a value is checked (benchmarks/help_cost.py, tests/cli/test_startup.py).
if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from tuner.trial.backends import BackendOptions

__all__ = [
    "BACKEND_PANEL",
    "BUDGET_PANEL",
    "DECLARED",
    "OUTPUT_PANEL",
    "SPACE_PANEL",
    "STUDY_PANEL",
    "Backend",
    "BackendFlags",
    "BatchTokens",
    "Concurrency",
    "GpuMemoryUtilization",
    "GpuSpecFile",
    "Gpus",
    "Hardware",
    "InputTokens",
    "Json",
    "MaxModelLen",
    "OutputTokens",
    "Plan",
    "Prefer",
    "Prefetch",
    "Sampler",
    "Seed",
    "SpecTokens",
    "Storage",
    "StudiesDir",
    "StudyName",
    "Temperature",
    "TimeBudget",
    "Trials",
    "bounded",
    "parse_gpus",
    "with_backend_flags",
]

P = ParamSpec("P")
R = TypeVar("R")


# The panels `--help` groups options in (typer's rich_help_panel).
STUDY_PANEL = "Study"
SPACE_PANEL = "Search space"
BACKEND_PANEL = "Backend"
BUDGET_PANEL = "Budget"
OUTPUT_PANEL = "Output"


def bounded(flag: str, kind: str, help: str, panel: str | None = None) -> Any:
    """An option whose value must fit ``kind``, the name of a type in :mod:`tuner.config.bounds`.

    The check runs while typer parses, so a bad value is one line and exit code 2 (through
    handle_errors) instead of typer's boxed usage error. The type is named, not imported:
    declaring the option loads no pydantic, checking a value does. The callback's ``bound``
    holds the name (tests/cli/test_options.py resolves every one).
    """

    def check(value: Any) -> Any:
        return value if value is None else _checked(kind, value, flag)

    check.bound = kind  # type: ignore[attr-defined]
    return typer.Option(flag, help=help, callback=check, rich_help_panel=panel)


@handle_errors
def _checked(kind: str, value: object, flag: str) -> Any:
    from tuner.config.bounds import check_value

    return check_value(_adapter(kind), value, flag)


@functools.cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    from tuner.config import bounds

    return TypeAdapter(getattr(bounds, kind))


def _absolute_storage(url: str | None) -> str | None:
    return None if url is None else absolute_storage(url)


def _absolute_folder(folder: Path) -> Path:
    return absolute(folder)


Hardware = Annotated[
    str | None,
    typer.Option(
        "--hardware",
        help="GPUs as GPU[xCOUNT], e.g. 4090x2 (tensor-parallel = COUNT).",
        rich_help_panel=SPACE_PANEL,
    ),
]


def _add_gpus(path: Path | None) -> Path | None:
    if path is not None:
        from tuner.catalog.gpus import add_gpus

        add_gpus(absolute(path))
    return path


GpuSpecFile = Annotated[
    Path | None,
    typer.Option(
        "--gpu-spec",
        help="A YAML file describing GPUs the catalog lacks, with the keys of a catalog entry "
        "(spectune hardware --json); --hardware then names them by their first alias.",
        envvar="SPECTUNE_GPU_SPEC",
        callback=handle_errors(_add_gpus),
        rich_help_panel=SPACE_PANEL,
    ),
]
StudyName = Annotated[
    str | None,
    typer.Option(
        "--study", help="Study name; an existing study is resumed.", rich_help_panel=STUDY_PANEL
    ),
]

# User paths become absolute as they are parsed (tuner.config.local_paths says why).
Storage = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Database URL (default sqlite:///STUDIES_DIR/STUDY.db).",
        envvar="SPECTUNE_STORAGE",
        callback=_absolute_storage,
        rich_help_panel=STUDY_PANEL,
    ),
]
StudiesDir = Annotated[
    Path,
    typer.Option(
        "--studies-dir",
        help="Where databases, logs and exports go.",
        callback=_absolute_folder,
        rich_help_panel=STUDY_PANEL,
    ),
]


def _preference(value: str | None) -> Preference | None:
    if value is None:
        return None
    try:
        return Preference(value)
    except ValueError:
        known = ", ".join(p.value for p in Preference)
        raise ConfigError(f"--objective {value!r}: choose one of {known}") from None


Prefer = Annotated[
    str | None,
    typer.Option(
        "--objective",
        help="What the recommendation optimises: throughput, energy (the most tokens per "
        "joule within the limits) or both (the tok/s against J/token front, its fastest "
        "recommended); default: the space's slo.prefer, throughput unless set.",
        callback=handle_errors(_preference),
        rich_help_panel=SPACE_PANEL,
    ),
]
AllowPowerLimit = Annotated[
    bool,
    typer.Option(
        "--allow-power-limit",
        help="Let a space that searches search.power_limit_w set the GPUs' power limit (needs "
        "root); the original is restored after the study, and by the next run if it is killed.",
        rich_help_panel=SPACE_PANEL,
    ),
]
Json = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON.", rich_help_panel=OUTPUT_PANEL)
]
Plan = Annotated[
    bool,
    typer.Option(
        "--plan",
        help="Print the run's expected GPU time, trial by trial, and run nothing.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
TimeBudget = Annotated[
    str | None,
    typer.Option(
        "--time-budget",
        help="Stop proposing trials in time to confirm within this much time: 2h, 90m, 1h30m.",
        rich_help_panel=BUDGET_PANEL,
    ),
]
Rounds = Annotated[
    bool,
    typer.Option(
        "--rounds/--fixed-count",
        help="Measure each (level, temperature) pair in rounds until its rank against the best "
        "trial is clear, and prune a trial that cannot reach it; or every pair at "
        "workload.requests.",
        rich_help_panel=BUDGET_PANEL,
    ),
]

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="docker (vllm/vllm-openai containers), process (vllm serve "
        "on this host) or sim (built-in simulator, no GPU).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Sampler = Annotated[
    str,
    typer.Option(
        "--sampler",
        help="spectune (TPE warm-started from the simulator's "
        "predictions), tpe, random, gp or nsga2.",
        rich_help_panel=STUDY_PANEL,
    ),
]
Seed = Annotated[
    int,
    bounded(
        "--seed",
        "Seed",
        f"Seed for the sampler and simulated noise (0 to {limits.MAX_SEED}).",
        STUDY_PANEL,
    ),
]
Prefetch = Annotated[
    bool,
    typer.Option(
        "--prefetch/--no-prefetch",
        envvar="SPECTUNE_PREFETCH",
        help="docker, process: download the space's weights into the Hugging Face cache before "
        "the first server starts (--no-prefetch: vLLM fetches them itself, or needs none).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Gpus = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        help="GPU indices to use, e.g. 0,1; `none` for a CPU-only host (default: all).",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="Run the servers on the GPU nodes of this Ray cluster: ray://HEAD:10001, "
        "HEAD:6379, or auto (needs pip install 'spectune[ray]').",
        rich_help_panel=BACKEND_PANEL,
    ),
]
Parallel = Annotated[
    int,
    typer.Option(
        "--parallel",
        help="With --ray: trials running at once.",
        rich_help_panel=BACKEND_PANEL,
    ),
]
DEFAULT_BUDGET = "2h"  # the search benchmark's 97-100 % of the optimum (docs: run-a-study)
Trials = Annotated[
    int | None,
    bounded(
        "--trials",
        "Trials",
        f"Trials to run now (all workers), 1 to {limits.MAX_TRIALS}; with neither this nor "
        f"--time-budget, a {DEFAULT_BUDGET} budget of GPU time (30 trials with --workers or "
        "--ray).",
        BUDGET_PANEL,
    ),
]

# One server config and its load, as the simulator's estimate takes them; same bounds as a space.
SpecTokens = Annotated[
    int,
    bounded("--k", "SpecTokens", f"Speculative tokens per step (1 to {limits.MAX_SPEC_TOKENS})."),
]
Temperature = Annotated[
    float, bounded("--temperature", "Temperature", "Sampling temperature (0 to 2).")
]
GpuMemoryUtilization = Annotated[
    float,
    bounded(
        "--gpu-memory-utilization", "Fraction", "Share of GPU memory vLLM may use (> 0, <= 1)."
    ),
]
BatchTokens = Annotated[
    int,
    bounded("--max-num-batched-tokens", "BatchTokens", "Tokens per scheduler step (> 0)."),
]
MaxModelLen = Annotated[
    int, bounded("--max-model-len", "ContextLength", "Longest sequence in tokens (> 0).")
]
Concurrency = Annotated[
    int,
    bounded("--concurrency", "Concurrency", f"Requests in flight (1 to {limits.MAX_CONCURRENCY})."),
]
InputTokens = Annotated[
    int, bounded("--input-tokens", "Tokens", "Mean prompt length in tokens (> 0).")
]
OutputTokens = Annotated[
    int, bounded("--output-tokens", "Tokens", "Output tokens per request (> 0).")
]


class BackendFlags:
    """The backend flags' values as a command got them (:func:`with_backend_flags`)."""

    def __init__(self, given: dict[str, Any]) -> None:
        self.given = given

    def options(
        self, backend: str, study: str, seed: int, gpus: str | None = None
    ) -> BackendOptions:
        """How ``backend`` runs servers: its own settings from its own flags (the others'
        flags are not read), on ``--gpus``."""
        from tuner.trial.backends import BackendOptions

        return BackendOptions(
            study=study,
            seed=seed,
            gpus=None if gpus is None else parse_gpus(gpus),
            settings=settings_from_flags(backend, self.given),
        )


# The default a command's ``flags`` parameter names: with_backend_flags always replaces it.
DECLARED = BackendFlags({})


def with_backend_flags(command: Callable[P, R]) -> Callable[P, R]:
    """Declares every backend's flags (:data:`tuner.trial.backends.settings.FLAGS`, each once)
    on ``command`` in place of its ``flags: BackendFlags`` parameter, and hands it their values
    as that one parameter; so a flag is declared in one place for every command that runs
    servers. Typer reads the command's ``__signature__``."""
    signature = inspect.signature(command, eval_str=True)
    names = tuple(flag.param for flag in FLAGS)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        parameters += [_parameter(f) for f in FLAGS] if parameter.name == "flags" else [parameter]

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        kwargs["flags"] = BackendFlags({name: kwargs.pop(name) for name in names})
        return command(*args, **kwargs)

    declared = signature.replace(parameters=parameters)
    run.__signature__ = declared  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run


def _parameter(flag: Flag) -> inspect.Parameter:
    info = (
        typer.Option(flag.flag, help=flag.help, rich_help_panel=BACKEND_PANEL)
        if flag.bound is None
        else bounded(flag.flag, flag.bound, flag.help, BACKEND_PANEL)
    )
    return inspect.Parameter(
        flag.param,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=flag.default,
        annotation=Annotated[flag.kind, info],
    )


def parse_gpus(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("none", ""):
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--gpus {text!r}: write GPU indices like 0,1") from None
