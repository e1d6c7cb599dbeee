"""A signal that lands outside a command's own handling still exits with the shell's status."""

from __future__ import annotations

import importlib
import signal

import pytest
from typer.testing import CliRunner

from tuner.launch.exit_hooks import Terminated

# The module, not the typer app that tuner.cli exports under the same name.
app_module = importlib.import_module("tuner.cli.app")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_callback_runs_is_128_plus_its_number(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    # The callback imports Optuna after the handlers are in: a SIGHUP there once became a
    # KeyboardInterrupt to typer, exit 130 (found by the thirty-signals test).
    def interrupted() -> None:
        raise Terminated(signum)

    monkeypatch.setattr(app_module, "_quiet_optuna", interrupted)
    # The callback stops before the command runs (a help page would not import Optuna).
    result = CliRunner().invoke(app_module.app, ["studies"])
    assert result.exit_code == 128 + signum
    assert f"stopped by {signum.name}" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_a_library_turned_into_its_own_error_still_exits_by_the_signal(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    # pydantic builds a validator lazily and reports a Terminated or a KeyboardInterrupt raised
    # inside it as its own SchemaError: the thirty-signals test saw a traceback and exit 1
    # there, for SIGTERM and for SIGINT.
    def load_space(name: str | None = None) -> None:
        try:
            signal.raise_signal(signum)  # the handler the CLI installed raises here
        except KeyboardInterrupt:  # Ctrl-C's, and Terminated
            raise ValueError("a library's own error") from None

    monkeypatch.setattr("tuner.config.space.load_space", load_space)
    result = CliRunner().invoke(app_module.app, ["space", "check", "default"])
    assert result.exit_code == 128 + signum, result.output
    said = "interrupted" if signum is signal.SIGINT else f"stopped by {signum.name}"
    assert said in result.stderr and "Traceback" not in result.output

    # The next command in this process has signals of its own: its error is its own again.
    monkeypatch.undo()
    again = CliRunner().invoke(app_module.app, ["space", "check", "/no/such/space.yaml"])
    assert again.exit_code == 2, again.output
