"""Records a run hands to the processes that run its trials: JSON written by pydantic from the
record's own dataclass and read back into it, so a child worker or a Ray slot reads exactly
what the parent decided (no flags rebuilt and parsed again)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from tuner.errors import ConfigError

__all__ = ["dump_record", "load_record"]

T = TypeVar("T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}  # building one walks the dataclass: once


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def dump_record(record: object) -> bytes:
    """``record`` (a dataclass instance) as JSON."""
    return _adapter(type(record)).dump_json(record)


def load_record(kind: type[T], text: str | bytes, where: str) -> T:
    """The ``kind`` record :func:`dump_record` wrote.

    Raises:
        ConfigError: ``text`` (read from ``where``) is no such record.
    """
    try:
        record: T = _adapter(kind).validate_json(text)
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(
            f"{where} holds no {kind.__name__} record ({first}): it is written by spectune "
            "for the processes it starts, with the same spectune version"
        ) from None
    return record
