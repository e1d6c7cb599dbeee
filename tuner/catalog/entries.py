"""The built-in catalog as data: ``models.yaml``, ``heads.yaml``, ``drafters.yaml``, ``mtp.yaml``.

Each file ships with the code (``tuner/catalog``, package data) and is read once, on first use,
into pydantic records that refuse a missing, unknown or mistyped key; each file's header says
what its keys mean and where its numbers come from. A model entry may start from an earlier
one with ``like: <hf_id>``: it takes that entry's keys and lays its own ``config`` keys over the
other's (a quantized checkpoint is its base model plus a ``quantization_config``), so a number
shared by a family is written once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tuner.catalog.spec_method import SpecMethod
from tuner.errors import ConfigError

__all__ = [
    "DrafterEntry",
    "HeadEntry",
    "ModelEntry",
    "MtpFamily",
    "drafter_entries",
    "head_entries",
    "model_entries",
    "mtp_families",
    "parse_entries",
]

# The shape numbers every reader of a config.json needs (tuner.catalog.hf_config).
_SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "vocab_size",
)


def _check_config(config: dict[str, Any]) -> dict[str, Any]:
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(config.get("model_type"), str):
        raise ValueError("config needs architectures (a list) and model_type, as config.json has")
    missing = [key for key in _SHAPE_KEYS if not isinstance(config.get(key), int)]
    if missing:
        raise ValueError(f"config needs whole numbers for {', '.join(missing)}")
    return config


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hf_id: str = Field(min_length=3, pattern=r"^[\w.-]+/[\w.-]+$")
    config: dict[str, Any]
    """The part of the published ``config.json`` that memory, speed and vLLM's checks read."""
    source: str = ""
    """Where the numbers were read, when not the Hub's ``config.json`` of ``hf_id``."""

    _config = field_validator("config")(_check_config)

    @property
    def where(self) -> str:
        return self.source or f"https://huggingface.co/{self.hf_id}/blob/main/config.json"


class ModelEntry(_Entry):
    """One catalog model: its id, tokenizer family, published config and parameter count."""

    family: str = Field(min_length=1)
    """The tokenizer family: a draft model must share its target's."""
    params: float | None = Field(default=None, gt=0)
    """The model card's parameter count, when it states one (else counted from the shapes)."""


class _Speculator(_Entry):
    targets: tuple[str, ...] = Field(min_length=1)
    """The catalog models it was trained for: it serves no other."""


class HeadEntry(_Speculator):
    """One published EAGLE / EAGLE-3 head and the targets it was trained for."""

    method: Literal[SpecMethod.EAGLE, SpecMethod.EAGLE3]


class DrafterEntry(_Speculator):
    """One published block drafter (DFlash, DSpark) and the targets it was trained for."""

    method: Literal[SpecMethod.DFLASH, SpecMethod.DSPARK]


class MtpFamily(BaseModel):
    """One family vLLM turns into an MTP drafter (an entry of ``mtp.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    drafter: str = Field(min_length=1)
    """The MTP model type vLLM rewrites the config to."""
    model_types: frozenset[str] = frozenset()
    """``model_type`` values that select it."""
    architectures: frozenset[str] = frozenset()
    """First architectures that select it."""
    layers_key: str = "num_nextn_predict_layers"
    """The config key that counts the MTP layers (``text_config`` first); empty: none."""
    default: int = Field(default=0, ge=0)
    """The count when the key is absent (0: no default, the target has none)."""


def _entries(text: str, name: str) -> list[Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it
    try:
        raw = yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{name} is not valid YAML{where}: fix the syntax") from None
    if not isinstance(raw, list):
        raise ConfigError(f"{name} must be a list of entries")
    return raw


def _resolve_likes(entries: list[Any], name: str) -> list[Any]:
    """Lays each ``like:`` entry over the earlier entry it names."""
    seen: dict[str, Mapping[str, Any]] = {}
    resolved = []
    for place, entry in enumerate(entries):
        if isinstance(entry, dict) and "like" in entry:
            own = {key: value for key, value in entry.items() if key != "like"}
            base = seen.get(str(entry["like"]))
            if base is None:
                raise ConfigError(
                    f"{name}: entry {place + 1} ({entry.get('hf_id')}) is like "
                    f"{entry['like']!r}, which no earlier entry is"
                )
            inherited = {key: value for key, value in base.items() if key != "source"}
            entry = {**inherited, **own, "config": {**base["config"], **own.get("config", {})}}
        if isinstance(entry, dict):
            seen[str(entry.get("hf_id"))] = entry
        resolved.append(entry)
    return resolved


_T = TypeVar("_T", bound=BaseModel)


def parse_entries(text: str, name: str, kind: type[_T]) -> tuple[_T, ...]:
    """The entries of one catalog file, each validated as ``kind``.

    Raises:
        ConfigError: not YAML, not a list, a ``like`` naming no earlier entry, or an entry with a
            missing, unknown or mistyped key: one line naming the file, the entry and the key.
    """
    records = []
    for place, entry in enumerate(_resolve_likes(_entries(text, name), name)):
        try:
            records.append(kind.model_validate(entry))
        except ValidationError as exc:
            label = entry.get("hf_id") or entry.get("drafter") if isinstance(entry, dict) else None
            first = exc.errors(include_url=False)[0]
            key = ".".join(str(part) for part in first["loc"])
            raise ConfigError(
                f"{name}: entry {place + 1} ({label}): {key}: {first['msg']}"
            ) from None
    return tuple(records)


def _load(name: str, kind: type[_T]) -> tuple[_T, ...]:
    text = files("tuner.catalog").joinpath(name).read_text(encoding="utf-8")
    return parse_entries(text, f"tuner/catalog/{name}", kind)


def _unique(entries: tuple[_Entry, ...], name: str) -> None:
    ids = [entry.hf_id.lower() for entry in entries]
    twice = sorted({hf_id for hf_id in ids if ids.count(hf_id) > 1})
    if twice:
        raise ConfigError(f"tuner/catalog/{name}: {', '.join(twice)} listed twice: keep one")


@functools.cache
def model_entries() -> tuple[ModelEntry, ...]:
    """The models of ``models.yaml``, read and validated once."""
    entries = _load("models.yaml", ModelEntry)
    _unique(entries, "models.yaml")
    return entries


@functools.cache
def head_entries() -> tuple[HeadEntry, ...]:
    """The EAGLE / EAGLE-3 heads of ``heads.yaml``, read and validated once."""
    entries = _load("heads.yaml", HeadEntry)
    _unique(entries, "heads.yaml")
    return entries


@functools.cache
def drafter_entries() -> tuple[DrafterEntry, ...]:
    """The block drafters of ``drafters.yaml``, read and validated once."""
    entries = _load("drafters.yaml", DrafterEntry)
    _unique(entries, "drafters.yaml")
    return entries


@functools.cache
def mtp_families() -> tuple[MtpFamily, ...]:
    """vLLM's MTP families of ``mtp.yaml``, in the order vLLM tests them."""
    return _load("mtp.yaml", MtpFamily)
