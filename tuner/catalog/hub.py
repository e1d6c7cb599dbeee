"""Hugging Face models by id, through ``huggingface_hub``: a model's ``config.json`` (and
tokenizer), a repo's file list, and downloads of chosen files into the host's cache.

The local cache comes first (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
``~/.cache/huggingface/hub``, as the library resolves it), so a model vLLM or
``huggingface-cli download`` fetched before costs no network. Only on a miss is the Hub asked
(``HF_ENDPOINT``, with ``HF_TOKEN``), and never with ``HF_HUB_OFFLINE`` set.
These variables are read when a model is looked up, not when the library is imported (its
``huggingface_hub.constants`` are import-time copies), so a test or a CLI run can set them late.
Hub errors are translated here into one-line :class:`~tuner.errors.ConfigError`\\ s; the token is
passed to the library only, never put into a message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2  # huggingface_hub's HTTP client: its transport errors mean "Hub unreachable"
from huggingface_hub import HfApi, hf_hub_download, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name

from tuner.errors import ConfigError

__all__ = [
    "HubFiles",
    "RepoFiles",
    "cached_commit",
    "cached_repo_files",
    "download_files",
    "hub_cache_dir",
    "hub_endpoint",
    "hub_file",
    "hub_files",
    "hub_offline",
    "hub_repo_files",
    "looks_like_hub_id",
]

_TRUE = ("1", "true", "yes", "on")
_UNREACHABLE = (httpx2.TransportError, OfflineModeIsEnabled)


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` with no path-like parts (``./x``, ``/abs``, ``~``, ``a/b/c``)."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def hub_cache_dir() -> Path:
    """The host's hub cache as huggingface_hub resolves it, from the environment of now."""
    home = os.environ.get("HF_HOME") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    hub = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(os.path.expandvars(hub or str(Path(home) / "hub"))).expanduser()


def _cache_dir() -> str:
    return str(hub_cache_dir())


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set now."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None  # None: the library's stored login, if any


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None  # read now, not at import


def hub_endpoint() -> str:
    """The Hub spectune asks, for messages: ``HF_ENDPOINT`` or huggingface.co."""
    return _endpoint() or "https://huggingface.co"


def _hub_error(hf_id: str, error: Exception) -> ConfigError:
    """One line naming the model and the fix, for an error the Hub answered with."""
    if isinstance(error, GatedRepoError):  # before RepositoryNotFoundError, its base class
        return ConfigError(
            f"model {hf_id} is gated on the Hugging Face Hub: accept its licence on "
            f"https://huggingface.co/{hf_id}, then set HF_TOKEN to a token of that account "
            "(`export HF_TOKEN=...`)" + (" (the HF_TOKEN set was refused)" if _token() else "")
        )
    if isinstance(error, RepositoryNotFoundError | RevisionNotFoundError | HFValidationError):
        return ConfigError(
            f"model {hf_id!r} is not on the Hugging Face Hub (or is private: set HF_TOKEN): "
            "check the id, or use a local model directory or a catalog id (`spectune models`)"
        )
    status = error.response.status_code if isinstance(error, HfHubHTTPError) else None
    return ConfigError(
        f"model {hf_id}: the Hugging Face Hub answered {status or type(error).__name__}"
        + (": HF_TOKEN was refused, set a valid one" if status in (401, 403) else ": retry later")
    )


def _unreachable(hf_id: str) -> ConfigError:
    return ConfigError(
        f"model {hf_id} is not (all) in the Hugging Face cache ({_cache_dir()}) and the Hub "
        f"({hub_endpoint()}) cannot be reached: check the connection, or HF_ENDPOINT"
    )


@dataclass(frozen=True)
class HubFiles:
    """``config.json`` and, when available, ``tokenizer.json`` of one Hub model."""

    hf_id: str
    config: dict[str, Any] = field(hash=False)
    tokenizer: dict[str, Any] | None = field(hash=False)


def _cached(hf_id: str, filename: str, cache_dir: str) -> Path | None:
    found = try_to_load_from_cache(hf_id, filename, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def _fetch(hf_id: str, filename: str, cache_dir: str, revision: str | None = None) -> Path:
    try:
        found = hf_hub_download(
            hf_id,
            filename,
            revision=revision,
            cache_dir=cache_dir,
            token=_token(),
            endpoint=_endpoint(),
        )
        return Path(str(found))
    except LocalEntryNotFoundError:
        raise ConfigError(
            f"unknown model {hf_id!r}: {filename} is not in the Hugging Face cache "
            f"({cache_dir}) and the Hub cannot be reached: connect, or download it "
            f"first (`huggingface-cli download {hf_id} {filename}`)"
        ) from None
    except (HfHubHTTPError, HFValidationError) as error:
        if isinstance(error, EntryNotFoundError):
            raise  # a missing optional file is the caller's to judge
        raise _hub_error(hf_id, error) from None


def hub_file(hf_id: str, filename: str, revision: str | None = None) -> Path:
    """One file of a Hub model, from the cache or downloaded into it.

    Raises:
        ConfigError: gated, unknown id or unreachable Hub, in one line.
        EntryNotFoundError: the repo has no such file.
    """
    return _fetch(hf_id, filename, _cache_dir(), revision)


def hub_files(hf_id: str) -> HubFiles:
    """Reads ``hf_id``'s ``config.json`` (and ``tokenizer.json`` where it can) from cache or Hub.

    Raises:
        ConfigError: an offline miss, a gated repo without a working ``HF_TOKEN``, an unknown id,
            or a ``config.json`` that is not JSON; each in one line naming the id and the fix.
    """
    cache_dir = _cache_dir()
    path = _cached(hf_id, "config.json", cache_dir)
    if path is None:
        if hub_offline():
            raise ConfigError(
                f"unknown model {hf_id!r}: not in the built-in catalog nor in the Hugging Face "
                f"cache ({cache_dir}), and HF_HUB_OFFLINE is set: download it first "
                f"(`huggingface-cli download {hf_id} config.json tokenizer.json`), unset "
                "HF_HUB_OFFLINE, or use a catalog id (`spectune models`)"
            )
        path = _fetch(hf_id, "config.json", cache_dir)
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model {hf_id}: {path} is not a readable config.json ({exc}): delete it from the "
            "cache and download it again"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"model {hf_id}: {path} is not a JSON object: download it again")
    return HubFiles(hf_id, config, _tokenizer(hf_id, cache_dir))


def _tokenizer(hf_id: str, cache_dir: str) -> dict[str, Any] | None:
    """tokenizer.json when cached or fetchable; a model without one still loads."""
    path = _cached(hf_id, "tokenizer.json", cache_dir)
    if path is None and not hub_offline():
        try:
            path = _fetch(hf_id, "tokenizer.json", cache_dir)
        except (ConfigError, EntryNotFoundError):
            return None
    if path is None:
        return None
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


@dataclass(frozen=True)
class RepoFiles:
    """The files of one Hub model at one commit.

    Attributes:
        commit: the commit ``main`` points to.
        sizes: every file's path in the repo and its bytes (None: unknown).
        folder: the commit's snapshot folder in the cache (it need not exist yet).
    """

    hf_id: str
    commit: str
    sizes: Mapping[str, int | None] = field(hash=False)
    folder: Path


def _snapshot_folder(hf_id: str, commit: str) -> Path:
    return (
        hub_cache_dir() / repo_folder_name(repo_id=hf_id, repo_type="model") / "snapshots" / commit
    )


def hub_repo_files(hf_id: str) -> RepoFiles | None:
    """``hf_id``'s files at ``main`` as the Hub lists them; None when it cannot be reached.

    Raises:
        ConfigError: gated (where the Hub says so), unknown id, or another Hub answer.
    """
    try:
        info = HfApi(endpoint=_endpoint(), token=_token()).model_info(
            hf_id, revision="main", files_metadata=True
        )
    except _UNREACHABLE:
        return None
    except (HfHubHTTPError, HFValidationError) as error:
        raise _hub_error(hf_id, error) from None
    if not info.sha:
        raise ConfigError(f"model {hf_id}: the Hub sent no commit for main: check HF_ENDPOINT")
    sizes = {s.rfilename: s.size for s in info.siblings or ()}
    return RepoFiles(hf_id, info.sha, sizes, _snapshot_folder(hf_id, info.sha))


def cached_commit(hf_id: str) -> str | None:
    """The commit the cache's ``refs/main`` of ``hf_id`` names (what offline loads); None: none."""
    storage = hub_cache_dir() / repo_folder_name(repo_id=hf_id, repo_type="model")
    try:
        return (storage / "refs" / "main").read_text().strip() or None
    except OSError:
        return None


def cached_repo_files(hf_id: str) -> RepoFiles | None:
    """The files of ``hf_id`` in the cache, at the commit its ``refs/main`` names; None: none."""
    commit = cached_commit(hf_id)
    if commit is None:
        return None
    folder = _snapshot_folder(hf_id, commit)
    # Snapshot entries are links into blobs/; is_file() follows them, so a dangling one is absent.
    sizes: dict[str, int | None] = {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()
    }
    return RepoFiles(hf_id, commit, sizes, folder) if sizes else None


def download_files(hf_id: str, files: Sequence[str]) -> Path:
    """Downloads ``files`` of ``hf_id`` at ``main`` into the cache, with huggingface_hub's
    progress bars; files already there are not fetched again. Returns the snapshot folder.

    ``main`` (not the commit) is asked for so that ``refs/main`` is written: a later offline
    run (``HF_HUB_OFFLINE=1`` in a container) finds the snapshot through it.

    Raises:
        ConfigError: gated, unknown, unreachable Hub, or a cache folder that cannot be written.
    """
    cache = hub_cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        return Path(
            snapshot_download(
                hf_id,
                revision="main",
                allow_patterns=list(files),
                cache_dir=cache,
                token=_token(),
                endpoint=_endpoint(),
            )
        )
    except (*_UNREACHABLE, LocalEntryNotFoundError):
        raise _unreachable(hf_id) from None
    except (HfHubHTTPError, HFValidationError) as error:
        raise _hub_error(hf_id, error) from None
    except OSError as error:
        raise ConfigError(
            f"model {hf_id}: cannot write to the Hugging Face cache {cache} ({error.strerror}): "
            "free some space or set HF_HOME to a writable folder"
        ) from None
