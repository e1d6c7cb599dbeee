"""No speculation: the target decodes alone."""

from __future__ import annotations

from typing import Literal

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import Method, MethodFamily
from tuner.config.methods.fields import SectionModel

__all__ = ["NONE", "NoMethod"]


class NoMethod(SectionModel):
    """No speculation: the target decodes alone."""

    method: Literal[SpecMethod.NONE]


NONE = Method(SpecMethod.NONE, MethodFamily.NONE)
