"""The one error tree of spectune.

Every error a user can cause or meet derives from :class:`SpectuneError`; the CLI turns any of
them into one line and exit code 2 in a single place (``tuner.cli``). Errors from docker, httpx,
SQLAlchemy or the OS are translated into this tree where they are caught, never passed up raw.

    SpectuneError
    ├── ConfigError            bad input: hardware, model, draft, search space, storage URL, paths
    │   └── IncompatibleDraftError   draft and target do not share a tokenizer/vocabulary
    ├── LaunchError            a server could not be started or stopped
    │   └── StartupFailure     exited or never became ready (oom|crash|timeout|bad-argument)
    ├── EngineUnavailable      the Docker Engine cannot be reached or went away: stops the study
    └── MeasurementError       the benchmark could not run at all (single requests fail as records)

Each message names the input at fault and the fix, so it reads well as the only line a user sees.
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "EngineUnavailable",
    "FailureKind",
    "IncompatibleDraftError",
    "LaunchError",
    "MeasurementError",
    "SpectuneError",
    "StartupFailure",
]


class SpectuneError(Exception):
    """Base of every error spectune raises on purpose."""


class ConfigError(SpectuneError):
    """The user's input (flags, YAML, paths, URLs) cannot be used as given."""


class IncompatibleDraftError(ConfigError):
    """The draft model cannot speculate for the target: their vocabularies differ."""


class LaunchError(SpectuneError):
    """A vLLM server could not be started, reached or stopped."""


class EngineUnavailable(SpectuneError):
    """The Docker Engine cannot be reached, or went away while a trial ran.

    Not a :class:`LaunchError` on purpose: one trial's fault lets the study go on, while
    without an engine every further trial would fail the same way, so the study stops.
    """


class FailureKind(enum.StrEnum):
    """Why a server did not come up; OOM becomes a constraint, the rest a failed trial."""

    OOM = "oom"
    CRASH = "crash"
    TIMEOUT = "timeout"
    BAD_ARGUMENT = "bad-argument"


class StartupFailure(LaunchError):
    """The server process or container ended, or never answered, before it was ready.

    Attributes:
        kind: the classified cause.
        exit_code: the process or container exit status, ``None`` if it never exited.
        log_tail: the last lines of the server log, kept for the trial record.
    """

    def __init__(
        self, kind: FailureKind, message: str, exit_code: int | None = None, log_tail: str = ""
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code
        self.log_tail = log_tail


class MeasurementError(SpectuneError):
    """The benchmark could not produce a result (no server answered, nothing measured)."""
