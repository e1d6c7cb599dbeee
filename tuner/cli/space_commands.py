"""``spectune space``: check a search space, or print the JSON Schema editors complete it with."""

from __future__ import annotations

from typing import Annotated

import typer

from tuner.cli.app import app, console, handle_errors, print_json

__all__ = ["check_command", "schema_command"]

space_app = typer.Typer(
    no_args_is_help=True, help="Check search spaces; print their JSON Schema for editors."
)
app.add_typer(space_app, name="space")


@space_app.command("check")
@handle_errors
def check_command(
    space: Annotated[str, typer.Argument(help="A YAML file, or the name of a shipped space.")],
) -> None:
    """Validate a search space without running anything (exit 2 and one line if it is wrong)."""
    # Here, not at the top: `spectune --help` loads every command module (benchmarks/startup.py).
    from tuner.config.prompt_sets import describe_prompt_set
    from tuner.config.runner_report import space_runners, v1_warning
    from tuner.config.running_cap import cap_warning
    from tuner.config.space import load_space

    loaded = load_space(space)
    console.print(
        f"ok: {loaded.name} ({len(loaded.tuned_dimensions)} tuned dimensions); prompts "
        f"{describe_prompt_set(loaded.workload.prompt_set)}",
        markup=False,
        highlight=False,
    )
    rows = space_runners(loaded)
    width = max(len(row.label) for row in rows)
    lines = [f"model runner on vLLM {loaded.version} (predicted from vLLM's rules):"]
    lines += [f"  {row.label:<{width}}  {row.forecast.describe()}" for row in rows]
    warning = v1_warning(loaded)
    said = (loaded.newer_note, loaded.memory_note, warning, cap_warning(loaded))
    notes = [note for note in said if note]
    for line in [*lines, *notes]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@space_app.command("schema")
def schema_command() -> None:
    """Print the JSON Schema of a search-space YAML (e.g. for yaml-language-server)."""
    from tuner.config.schema import space_json_schema

    print_json(space_json_schema())
