"""Every option reads SPECTUNE_<COMMAND>_<OPTION> from the environment; a flag wins."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()
SIM = ["optimize", "--backend", "sim", "--space", "qwen2.5-14b-awq-4090x1", "--sampler", "tpe"]


def test_options_come_from_the_environment_and_a_flag_wins(tmp_path: Path) -> None:
    env = {
        "SPECTUNE_OPTIMIZE_TRIALS": "1",
        "SPECTUNE_OPTIMIZE_CONFIRM_TOP": "0",
        "SPECTUNE_OPTIMIZE_STUDIES_DIR": str(tmp_path / "from-env"),
        "SPECTUNE_OPTIMIZE_STUDY": "env",
    }
    made = runner.invoke(app, [*SIM, "--json"], env=env)
    assert made.exit_code == 0, made.stderr
    data = json.loads(made.stdout)
    assert (data["study"], data["trials"]) == ("env", 1)
    assert data["storage"] == f"sqlite:///{tmp_path / 'from-env' / 'env.db'}"
    flagged = runner.invoke(app, [*SIM, "--study", "flag", "--json"], env=env)
    assert json.loads(flagged.stdout)["study"] == "flag"
