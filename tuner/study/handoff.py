"""Records a run hands to the processes that run its trials: JSON written by pydantic from the
record's own dataclass and read back into it, so a child worker or a Ray slot reads exactly
what the parent decided (no flags rebuilt and parsed again)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from tuner import serde
from tuner.errors import ConfigError

__all__ = ["dump_record", "load_record"]

T = TypeVar("T")


def dump_record(record: object) -> bytes:
    """``record`` (a dataclass instance) as JSON."""
    return serde.dump_json(record)


def load_record(kind: type[T], text: str | bytes, where: str) -> T:
    """The ``kind`` record :func:`dump_record` wrote.

    Raises:
        ConfigError: ``text`` (read from ``where``) is no such record.
    """
    try:
        record = serde.load_json(kind, text)
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(
            f"{where} holds no {kind.__name__} record ({first}): it is written by spectune "
            "for the processes it starts, with the same spectune version"
        ) from None
    return record
