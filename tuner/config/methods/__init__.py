"""The speculation methods: one module each, one record each, in one registry.

Adding a method (or a variant vLLM names apart) is a module that fills in a
:class:`~tuner.config.methods.base.Method` and its space section, plus one line in
:data:`METHODS` and one in the section union of :mod:`tuner.config.search_section`
(docs/contributors/methods.md walks through it). Nothing outside this package compares a
method's name to decide a rule: it asks :func:`method_of`.
"""

from __future__ import annotations

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import (
    UNRESOLVED_K,
    AcceptancePrior,
    Method,
    MethodFamily,
    Range,
)
from tuner.config.methods.dflash import DFLASH
from tuner.config.methods.draft_model import DRAFT_MODEL
from tuner.config.methods.dspark import DSPARK
from tuner.config.methods.eagle import EAGLE, EAGLE3
from tuner.config.methods.mtp import MTP
from tuner.config.methods.ngram import NGRAM, NGRAM_GPU
from tuner.config.methods.none import NONE
from tuner.config.methods.suffix import SUFFIX

__all__ = [
    "METHODS",
    "UNRESOLVED_K",
    "AcceptancePrior",
    "Method",
    "MethodFamily",
    "Range",
    "method_of",
    "speculating",
]

METHODS: dict[SpecMethod, Method] = {
    m.name: m
    for m in (NONE, NGRAM, NGRAM_GPU, SUFFIX, DRAFT_MODEL, EAGLE, EAGLE3, MTP, DFLASH, DSPARK)
}


def method_of(name: SpecMethod) -> Method:
    """The record of method ``name`` (every :class:`SpecMethod` member has one)."""
    return METHODS[name]


def speculating() -> tuple[Method, ...]:
    """Every method that drafts something (all but ``none``), in the registry's order."""
    return tuple(m for m in METHODS.values() if m.speculates)
