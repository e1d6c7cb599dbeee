"""``--config FILE``, read like vLLM's loader: YAML keys are flag names without ``--``.

``true`` becomes a bare flag, ``false`` (and null) is dropped, a nested mapping becomes JSON, a
list becomes several values; the ``model`` key is the positional model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

__all__ = ["config_file_argv"]


def config_file_argv(path: str, parser: argparse.ArgumentParser) -> tuple[list[str], str | None]:
    """The flags a ``--config`` YAML stands for, and its ``model`` key."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        parser.error(f"cannot read config file {path}: {exc}")
    if data is None:
        return [], None
    if not isinstance(data, dict):
        parser.error(f"config file {path} must hold a mapping of flag names to values")
    argv: list[str] = []
    model: str | None = None
    for key, value in data.items():
        if key == "model":
            model = str(value)
        elif value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue  # vLLM's loader drops false values
        elif isinstance(value, dict):
            argv += [f"--{key}", json.dumps(value)]
        elif isinstance(value, list):
            argv += [f"--{key}", *(str(item) for item in value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv, model
