"""Every model a study can start, downloaded before the first server starts.

A trial's start-up clock (``--ready-timeout``) is meant for vLLM loading weights, not for the
network fetching them: 20 GB on a slow line would time the first trials out, and vLLM's own
download shows no progress. So the target and every draft and head the space can pick are
fetched first, with huggingface_hub's progress bars, into the host's Hugging Face cache, which
the launcher mounts into every container (:mod:`tuner.launch.mounts`).

Only the files vLLM reads are fetched, chosen as vLLM 0.32's ``DefaultModelLoader`` chooses
them (``vllm/model_executor/model_loader/default_loader.py`` ``_prepare_weights`` and
``weight_utils.py`` ``download_weights_from_hf``, load format ``auto``):

- ``consolidated*.safetensors`` anywhere in the repo makes it a Mistral-format checkpoint:
  those files are its weights;
- else the first of ``*.safetensors``, ``*.bin``, ``*.pt`` found at the top of the repo, and
  for safetensors with a ``model.safetensors.index.json`` only the files its ``weight_map``
  names (duplicate consolidated copies are skipped, as vLLM does);
- ``training_args.bin``, ``optimizer.pt`` and the like are dropped
  (``filter_files_not_needed_for_inference``);
- vLLM globs the snapshot's top folder only and ignores ``original/**/*``
  (``LoadConfig.ignore_patterns``), so sub-folders are skipped;
- the small files beside the weights (config, tokenizer, generation config, chat template)
  are all fetched: transformers reads those one by one.

Local model folders are skipped: the launcher mounts them read-only. With ``HF_HUB_OFFLINE``
set nothing is downloaded and a model that is not complete in the cache is an error.
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tuner.catalog.hub import (
    RepoFiles,
    cached_commit,
    cached_repo_files,
    download_files,
    hub_cache_dir,
    hub_endpoint,
    hub_file,
    hub_offline,
    hub_repo_files,
    looks_like_hub_id,
)
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.results import OnStartup, StartupEvent

__all__ = [
    "PHASE",
    "PrefetchedModel",
    "models_to_fetch",
    "prefetch",
    "prefetch_models",
    "support_files",
    "weight_files",
]

PHASE = "downloading weights"
_SAFE_INDEX = "model.safetensors.index.json"
_MISTRAL_WEIGHTS = "consolidated*.safetensors"
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")  # vLLM's order: the first found wins
_NOT_FOR_INFERENCE = (
    "training_args.bin",
    "optimizer.bin",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
)
# Checkpoint formats vLLM does not read from a Hub repo: never fetched as a "small file".
_CHECKPOINTS = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".onnx",
    ".onnx_data",
    ".gguf",
    ".tflite",
    ".ot",
    ".npz",
    ".pkl",
)


@dataclass(frozen=True)
class PrefetchedModel:
    """One model as the servers will find it.

    Attributes:
        name: the id or folder vLLM is given.
        path: its snapshot folder in the Hugging Face cache, or the local folder.
        size_bytes: the bytes of the files vLLM reads (0 for a local folder: not looked at).
        downloaded_bytes: what this call added to the snapshot (0: it was all there).
        local: a local folder, left to the launcher's read-only mount.
    """

    name: str
    path: Path
    size_bytes: int
    downloaded_bytes: int
    local: bool = False


def models_to_fetch(space: SearchSpace) -> tuple[str, ...]:
    """The target and every draft or head the space can pick, as vLLM is given them (the
    exact spelling: the cache folder is named after it), in order, each once."""
    names = [space.target.hf_id, *(c.model for c in space.choices if c.model)]
    return tuple(dict.fromkeys(names))


def prefetch_models(
    space: SearchSpace, on_startup: OnStartup | None = None
) -> list[PrefetchedModel]:
    """Downloads every model of ``space`` (see :func:`prefetch`)."""
    return prefetch(models_to_fetch(space), on_startup)


def prefetch(names: Iterable[str], on_startup: OnStartup | None = None) -> list[PrefetchedModel]:
    """Makes every model in ``names`` complete in the host's cache; local folders are skipped.

    Every repo is listed (and its safetensors index read) before any weights move, so a gated,
    missing or unreachable one stops the run before gigabytes of the others are fetched.

    Args:
        names: Hub ids or local model folders.
        on_startup: told ``StartupEvent(PHASE, detail=id, done=bytes, total=bytes)`` before
            and after each model's download.

    Raises:
        ConfigError: in one line naming the model and the fix: gated without a working
            ``HF_TOKEN``, not on the Hub, Hub unreachable (and not in the cache), offline and
            not in the cache, no weights vLLM can load, or a cache folder that cannot be written.
    """
    plans = [_plan(name) for name in dict.fromkeys(names)]
    return [_fetch(plan, on_startup) for plan in plans]


@dataclass(frozen=True)
class _Plan:
    name: str
    folder: Path  # the snapshot folder (of main now, when the Hub answered) or the local folder
    files: tuple[str, ...] = ()
    total: int = 0  # bytes of ``files``
    before: int = 0  # bytes of ``files`` in the snapshot before this run fetched any
    online: bool = False  # the Hub answered: download what is missing
    local: bool = False


def _plan(name: str) -> _Plan:
    folder = Path(name).expanduser()
    if folder.is_dir():
        return _Plan(name, folder.resolve(), local=True)
    if not looks_like_hub_id(name):
        raise ConfigError(
            f"model {name!r} is neither a local folder nor a Hugging Face id (ORG/NAME): "
            "check the path or the id"
        )
    repo = None if hub_offline() else hub_repo_files(name)
    if repo is not None:
        return _online_plan(repo)
    cached = cached_repo_files(name)
    if hub_offline():
        reason = "HF_HUB_OFFLINE is set"
        fix = "run `spectune prefetch` without HF_HUB_OFFLINE first, or copy it into this cache"
    else:
        reason = f"the Hugging Face Hub ({hub_endpoint()}) cannot be reached"
        fix = "check the connection, or HF_ENDPOINT"
    if cached is None:
        raise ConfigError(
            f"model {name} is not in the Hugging Face cache ({hub_cache_dir()}) and {reason}: {fix}"
        )
    weights = weight_files(cached.sizes, lambda index: _weight_map(cached.folder / index))
    if not weights or any(f not in cached.sizes for f in weights):
        raise ConfigError(
            f"model {name}: its weights are not (all) in the Hugging Face cache "
            f"({cached.folder}) and {reason}: {fix}"
        )
    files = tuple(sorted({*weights, *support_files(cached.sizes)}))
    total = sum(cached.sizes.get(f) or 0 for f in files)
    return _Plan(name, cached.folder, files, total, total)


def _online_plan(repo: RepoFiles) -> _Plan:
    name = repo.hf_id
    present = {f for f in repo.sizes if (repo.folder / f).is_file()}  # before the probe and index
    # One small file first: a gated repo lists its files to anyone but serves none, and this
    # says so before the weights of the other models are fetched.
    probe = next((f for f in ("config.json", "params.json") if f in repo.sizes), None)
    if probe is not None:
        hub_file(name, probe, repo.commit)
    weights = weight_files(
        repo.sizes, lambda index: _weight_map(hub_file(name, index, repo.commit))
    )
    if not weights:
        raise ConfigError(
            f"model {name} has no weights vLLM can load (*.safetensors, *.bin or *.pt at the "
            "top of the repo): pick another checkpoint"
        )
    files = tuple(sorted({*weights, *support_files(repo.sizes)}))
    total = sum(repo.sizes.get(f) or 0 for f in files)
    before = sum(repo.sizes.get(f) or 0 for f in files if f in present)
    return _Plan(name, repo.folder, files, total, before, online=True)


def weight_files(paths: Iterable[str], weight_map: Callable[[str], Iterable[str]]) -> list[str]:
    """The weight files vLLM loads from a repo with these ``paths`` (see the module doc).

    Args:
        paths: every file in the repo, ``/``-separated.
        weight_map: reads an index file of the repo and returns the files it names.
    """
    paths = list(paths)
    top = sorted(p for p in paths if "/" not in p)
    if any(fnmatch.fnmatch(PurePosixPath(p).name, _MISTRAL_WEIGHTS) for p in paths):
        return fnmatch.filter(top, _MISTRAL_WEIGHTS)
    if _SAFE_INDEX in top and fnmatch.filter(top, "*.safetensors"):
        named = sorted(set(weight_map(_SAFE_INDEX)))
        if named:
            return named
    for pattern in _WEIGHT_PATTERNS:
        found = [p for p in fnmatch.filter(top, pattern) if not p.endswith(_NOT_FOR_INFERENCE)]
        if found:
            return found
    return []


def support_files(paths: Iterable[str]) -> list[str]:
    """The files beside the weights at the top of the repo: config, tokenizer, templates."""
    return sorted(p for p in paths if "/" not in p and not p.lower().endswith(_CHECKPOINTS))


def _weight_map(index: Path) -> list[str]:
    try:
        names = json.loads(index.read_text()).get("weight_map") or {}
    except (OSError, ValueError, AttributeError):
        return []  # vLLM then takes every top-level safetensors file as well
    return [str(v) for v in names.values()] if isinstance(names, Mapping) else []


def _fetch(plan: _Plan, on_startup: OnStartup | None) -> PrefetchedModel:
    if plan.local:
        return PrefetchedModel(plan.name, plan.folder, 0, 0, local=True)
    started = time.monotonic()

    def report(done: int) -> None:
        if on_startup is not None:
            elapsed = time.monotonic() - started
            on_startup(StartupEvent(PHASE, plan.name, float(done), float(plan.total), elapsed))

    report(plan.before)
    # Complete and what main names: no request, no progress bars for nothing.
    done = plan.before == plan.total and cached_commit(plan.name) == plan.folder.name
    folder = download_files(plan.name, plan.files) if plan.online and not done else plan.folder
    size = _bytes(folder, plan.files)
    report(size)
    return PrefetchedModel(plan.name, folder, size, max(size - plan.before, 0))


def _bytes(folder: Path, files: Sequence[str]) -> int:
    return sum((folder / f).stat().st_size for f in files if (folder / f).is_file())
