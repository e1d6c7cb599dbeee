"""The typer app, its consoles, and the one place where errors become exit codes.

Library errors become one line on stderr and exit code 2 in :func:`handle_errors`, and nowhere
else; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
import typer.core
from rich.console import Console

from tuner import serde
from tuner.cli.host_faults import describe_host_fault
from tuner.cli.usage import UsageError, usage_line
from tuner.errors import SpectuneError
from tuner.launch.exit_hooks import Terminated, install_signal_handlers, signal_raised

__all__ = [
    "COMMAND_ORDER",
    "app",
    "console",
    "err_console",
    "handle_errors",
    "print_json",
    "warn",
]

# `spectune --help` lists the commands in the order a user meets them, not by module: a study,
# its results, then the tools around it. A command not named here comes last.
COMMAND_ORDER = (
    "optimize",
    "studies",
    "report",
    "export",
    "dashboard",
    "confirm",
    "estimate",
    "calibrate",
    "prefetch",
    "bench",
    "worker",
    "hardware",
    "models",
    "space",
)


class _Commands(typer.core.TyperGroup):
    """The app's command group, listing its commands in :data:`COMMAND_ORDER`; a value typer
    cannot convert is one line (naming the ``SPECTUNE_*`` variable when it came from one), not
    a usage box; so is a misspelt flag or command, with the closest valid name."""

    def list_commands(self, ctx: Any) -> list[str]:  # typer's own click.Context, not public
        rank = {name: place for place, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: rank.get(name, len(rank)))

    def invoke(self, ctx: Any) -> Any:
        as_json = "--json" in ctx.args  # a usage error keeps standard output JSON too
        # Read before the callback runs: `spectune optimize --help` prints and opens no study.
        ctx.meta[_HELP_ONLY] = any(arg in ctx.help_option_names for arg in ctx.args)
        try:
            return super().invoke(ctx)
        except Terminated as exc:
            # SIGTERM or SIGHUP outside a command's own handling (while the callback imports
            # Optuna, while options are parsed): typer would take it for Ctrl-C and exit 130.
            _stopped_outside(exc)
        except typer.BadParameter as exc:
            if _debug["enabled"]:
                raise
            variable = _from_environment(exc)
            line = (
                f"{exc.format_message()} (see --help)"
                if variable is None
                else f"{variable}={os.environ.get(variable, '')!r}: {exc.message}; fix or "
                f"unset {variable}"
            )
            _usage_fail(line, as_json=as_json)
        except UsageError as exc:  # an unknown flag or command, a missing argument
            if _debug["enabled"]:
                raise
            _usage_fail(usage_line(exc), as_json=as_json)
        except Exception as exc:
            signum = _made_of_signal(exc)
            if signum is None:
                raise
            _stopped_outside(Terminated(signum))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # The app's own flags (``spectune --debgu optimize``) are parsed here, before invoke.
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            _usage_fail(usage_line(exc), as_json="--json" in args)


def _made_of_signal(exc: Exception) -> int | None:
    """The signal behind ``exc`` when a library caught a signal's exception and raised its own
    error instead (pydantic does, building a validator); None for any other error."""
    return None if isinstance(exc, typer.Exit) else signal_raised()


def _stopped_outside(exc: Terminated) -> NoReturn:
    err_console.print(str(exc), markup=False)
    raise typer.Exit(128 + exc.signum) from None


def _usage_fail(line: str, *, as_json: bool) -> NoReturn:
    err_console.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        from tuner.cli.outputs import ErrorOutput  # pydantic: only on the way out

        print_json(ErrorOutput(line))
    raise typer.Exit(2) from None


def _from_environment(exc: typer.BadParameter) -> str | None:
    """The variable a refused value came from; None when it came from the command line."""
    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or param.name is None:
        return None
    source = ctx.get_parameter_source(param.name)
    if source is None or source.name != "ENVIRONMENT":  # typer's own click, not public
        return None
    named = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    named.append(f"{ctx.auto_envvar_prefix}_{param.name.upper()}")
    return next((name for name in named if name in os.environ), named[-1])


# Markdown, not Rich markup, in help texts: Rich would take "GPU[xCOUNT]" or
# "pip install 'spectune[ray]'" for style tags and print "GPU" and "spectune".
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Autotune vLLM speculative-decoding configs.",
    rich_markup_mode="markdown",
    cls=_Commands,
    # Every option can come from the environment too: SPECTUNE_<COMMAND>_<OPTION>, e.g.
    # SPECTUNE_OPTIMIZE_IMAGE (a host's own defaults; the user-path tier's CPU-host settings).
    context_settings={"auto_envvar_prefix": "SPECTUNE"},
)
console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")

_debug = {"enabled": False}


# Commands that open no study: they start without importing Optuna (a second of CPU).
_WITHOUT_STUDY = frozenset({"hardware", "models", "space"})
_HELP_ONLY = "spectune.help_only"  # in ctx.meta: the command line asks for a help page


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    _debug["enabled"] = debug
    # SIGTERM (docker stop, a parent stopping its workers) and SIGHUP unwind like Ctrl-C, so
    # the running trial is failed, every launcher's cleanup runs and nothing is left behind.
    install_signal_handlers()
    if ctx.invoked_subcommand not in _WITHOUT_STUDY and not ctx.meta.get(_HELP_ONLY):
        _quiet_optuna()


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # Heartbeats, grouped TPE and constraints are "experimental" in Optuna: nothing to act on.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def handle_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turns SpectuneError and faults below spectune (a full disk, a database gone) into one
    line and exit code 2 (the only place that does)."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except Exception as exc:
            signum = _made_of_signal(exc)
            if signum == signal.SIGINT:
                _interrupted()
            if signum is not None:
                _terminated(Terminated(signum))
            if _debug["enabled"]:
                raise
            message = str(exc) if isinstance(exc, SpectuneError) else describe_host_fault(exc)
            if message is None:  # neither ours nor a host fault (a full disk): a bug, shown whole
                raise
            _fail(message, as_json=bool(kwargs.get("as_json")))
        except Terminated as exc:
            _terminated(exc)
        except KeyboardInterrupt:
            _interrupted()

    return wrapper


def _interrupted() -> NoReturn:
    err_console.print("interrupted: the study keeps every finished trial")
    raise typer.Exit(130) from None


def _terminated(exc: Terminated) -> NoReturn:
    err_console.print(f"{exc}: the running trial failed; the study keeps finished ones")
    raise typer.Exit(128 + exc.signum) from None


def _fail(message: str, *, as_json: bool) -> NoReturn:
    from tuner.config.redact import Redactor  # loads the server config's schema: not for --help

    # A message may quote what the user gave (a URL with a password, a flag's value).
    message = Redactor.from_environment().redact(message)
    err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    if as_json:  # --json: standard output stays JSON, errors included
        from tuner.cli.outputs import ErrorOutput

        print_json(ErrorOutput(message))
    raise typer.Exit(2) from None


def print_json(record: object, kind: Any = None) -> None:
    """``record`` on standard output as its JSON, indented; ``kind`` names a list's records
    (``list[ConfirmedOutput]``). The records are declared in tuner.cli.outputs and
    tuner.cli.study_outputs."""
    sys.stdout.write(json.dumps(serde.dump(record, kind), indent=2) + "\n")


def warn(text: str) -> None:
    """A warning to stderr, its lines as written (above a live table: Live redirects stderr)."""
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)
