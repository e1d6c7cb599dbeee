"""Paths a user names, made absolute once, where they enter.

A relative path means "from the folder I ran the command in", and nothing later reads it from
there: the Docker Engine takes a relative bind-mount source for the name of a volume, a worker,
a resumed study or a container runs elsewhere. So the studies folder, a space file, the local
model folders and prompt files a space names, ``--docker-volume`` sources and ``HF_HOME`` are
made absolute when they come in, with ``~`` expanded. Symbolic links are kept: a folder is
mounted at the path the user named, which is the path vLLM's command line names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tuner.catalog.files import is_file

__all__ = ["absolute", "absolute_space_paths"]


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` with ``~`` expanded, made absolute from the current folder and normalised."""
    return Path(os.path.abspath(Path(path).expanduser()))


def absolute_space_paths(raw: Any) -> Any:
    """A space's YAML with its local paths made absolute (the rest untouched).

    Local paths are the target and the drafts or heads that are model folders here (they hold a
    ``config.json``, as :func:`tuner.catalog.models.load_model` reads them) and a prompt file.
    Anything else (a Hugging Face id, a method name, a malformed value) is left for the schema.
    """
    if not isinstance(raw, dict):
        return raw
    space = dict(raw)
    if "target" in space:
        space["target"] = _model(space["target"])
    workload = space.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("prompt_set"), str):
        prompts = workload["prompt_set"]
        if is_file(prompts):
            space["workload"] = {**workload, "prompt_set": str(absolute(prompts))}
    search = space.get("search")
    if isinstance(search, dict):
        search = dict(search)
        if "draft" in search:
            search["draft"] = _models(search["draft"])
        if isinstance(search.get("methods"), list):
            search["methods"] = [_method(choice) for choice in search["methods"]]
        space["search"] = search
    return space


def _method(choice: Any) -> Any:
    if isinstance(choice, dict) and "model" in choice:
        return {**choice, "model": _models(choice["model"])}
    return choice


def _models(value: Any) -> Any:
    return [_model(item) for item in value] if isinstance(value, list) else _model(value)


def _model(name: Any) -> Any:
    if isinstance(name, str) and is_file(Path(name).expanduser() / "config.json"):
        return str(absolute(name))
    return name
