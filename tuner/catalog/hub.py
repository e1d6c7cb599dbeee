"""A model's ``config.json`` (and tokenizer) by its Hugging Face id, through ``huggingface_hub``.

The local cache comes first (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else the library's default),
so a model vLLM or ``huggingface-cli download`` fetched before costs no network. Only on a miss
is the Hub asked (``HF_ENDPOINT``, with ``HF_TOKEN``), and never with ``HF_HUB_OFFLINE`` set.
These variables are read when a model is looked up, not when the library is imported, so a test
or a CLI run can set them late.
Hub errors are translated here into one-line :class:`~tuner.errors.ConfigError`\\ s.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_download, try_to_load_from_cache
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tuner.errors import ConfigError

__all__ = ["HubFiles", "hub_files", "looks_like_hub_id"]

_TRUE = ("1", "true", "yes", "on")


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` with no path-like parts (``./x``, ``/abs``, ``~``, ``a/b/c``)."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~"))


def _cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


@dataclass(frozen=True)
class HubFiles:
    """``config.json`` and, when available, ``tokenizer.json`` of one Hub model."""

    hf_id: str
    config: dict[str, Any] = field(hash=False)
    tokenizer: dict[str, Any] | None = field(hash=False)


def _cached(hf_id: str, filename: str, cache_dir: str | None) -> Path | None:
    found = try_to_load_from_cache(hf_id, filename, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def _fetch(hf_id: str, filename: str, cache_dir: str | None) -> Path:
    token = os.environ.get("HF_TOKEN") or None
    try:
        endpoint = os.environ.get("HF_ENDPOINT") or None  # read now, not at import
        found = hf_hub_download(
            hf_id, filename, cache_dir=cache_dir, token=token, endpoint=endpoint
        )
        return Path(str(found))
    except GatedRepoError:
        raise ConfigError(
            f"model {hf_id} is gated on the Hugging Face Hub: accept its licence on "
            f"https://huggingface.co/{hf_id} and set HF_TOKEN to a token of that account"
            + (" (the HF_TOKEN set was refused)" if token else "")
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError):
        raise ConfigError(
            f"model {hf_id!r} is not on the Hugging Face Hub (or is private: set HF_TOKEN): "
            "check the id, or use a local model directory or a catalog id (`spectune models`)"
        ) from None
    except LocalEntryNotFoundError:
        raise ConfigError(
            f"unknown model {hf_id!r}: {filename} is not in the Hugging Face cache "
            f"({cache_dir or 'default'}) and the Hub cannot be reached: connect, or download it "
            f"first (`huggingface-cli download {hf_id} {filename}`)"
        ) from None


def hub_files(hf_id: str) -> HubFiles:
    """Reads ``hf_id``'s ``config.json`` (and ``tokenizer.json`` where it can) from cache or Hub.

    Raises:
        ConfigError: an offline miss, a gated repo without a working ``HF_TOKEN``, an unknown id,
            or a ``config.json`` that is not JSON; each in one line naming the id and the fix.
    """
    cache_dir = _cache_dir()
    path = _cached(hf_id, "config.json", cache_dir)
    if path is None:
        if _offline():
            raise ConfigError(
                f"unknown model {hf_id!r}: not in the built-in catalog nor in the Hugging Face "
                f"cache ({cache_dir or 'default'}), and HF_HUB_OFFLINE is set: download it first "
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


def _tokenizer(hf_id: str, cache_dir: str | None) -> dict[str, Any] | None:
    """tokenizer.json when cached or fetchable; a model without one still loads."""
    path = _cached(hf_id, "tokenizer.json", cache_dir)
    if path is None and not _offline():
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
