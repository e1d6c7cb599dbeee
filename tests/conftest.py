"""Shared fixtures: the real services the marked test tiers need.

Locally a missing service skips its tier. In CI (``CI`` set) a missing service fails the test
instead: a tier that silently skips there would be a tier that does not exist.
"""

from __future__ import annotations

import os

import pytest


def require(condition: bool, what: str) -> None:
    """Skips (locally) or fails (in CI) when a real component is missing."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} not available")
