"""Commands stay thin: each fills a request and prints what the run returns, so no command's
body (its docstring aside) runs past 60 lines; the work lives in the layers below."""

from __future__ import annotations

import ast
from pathlib import Path

import tuner.cli

MOST_LINES = 60


def _commands() -> list[tuple[str, int]]:
    found = []
    for path in sorted(Path(tuner.cli.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            decorators = [d.func for d in node.decorator_list if isinstance(d, ast.Call)]
            if not any(isinstance(d, ast.Attribute) and d.attr == "command" for d in decorators):
                continue
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1
            found.append((f"{path.name}:{node.name}", lines))
    return found


def test_no_command_body_runs_past_sixty_lines() -> None:
    commands = _commands()
    names = {name.split(":")[1] for name, _ in commands}
    assert {"optimize_command", "confirm_command", "worker_command"} <= names
    assert [(name, n) for name, n in commands if n > MOST_LINES] == []
