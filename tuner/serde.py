"""Records as JSON: what a study stores, a file holds or ``--json`` prints, written and read by
pydantic from the record's own dataclass.

A record declares its stored shape on its fields (a key stored under another name is an alias, a
bound stored as ``[low, high]`` a serializer, an older shape a validator), so the dataclass is
the one form of its concept and nothing writes a dict by hand beside it. Each kind's
``TypeAdapter`` is built on first use, and pydantic is imported then: a module that declares a
record costs ``import tuner.cli`` nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["dump", "dump_json", "load", "load_json"]

T = TypeVar("T")

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}  # building one walks the dataclass: once


def _adapter(kind: Any) -> TypeAdapter[Any]:
    if kind not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def dump(record: object, kind: Any = None) -> Any:
    """``record`` as JSON values (dicts, lists, strings, numbers, None): a study attribute.

    ``kind`` names what ``record`` is where its class cannot: a list's items, e.g.
    ``list[Confirmed]`` (default: the record's class).
    """
    return _adapter(type(record) if kind is None else kind).dump_python(record, mode="json")


def dump_json(record: object, kind: Any = None) -> bytes:
    """``record`` as JSON text (``kind`` as for :func:`dump`)."""
    return _adapter(type(record) if kind is None else kind).dump_json(record)


def load(kind: type[T], data: object) -> T:
    """The ``kind`` record :func:`dump` wrote (or an earlier version wrote).

    Raises:
        pydantic.ValidationError: ``data`` is no such record.
    """
    record: T = _adapter(kind).validate_python(data)
    return record


def load_json(kind: type[T], text: str | bytes) -> T:
    """The ``kind`` record :func:`dump_json` wrote.

    Raises:
        pydantic.ValidationError: ``text`` is no such record.
    """
    record: T = _adapter(kind).validate_json(text)
    return record
