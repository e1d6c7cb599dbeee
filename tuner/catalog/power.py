"""The GPUs' power limit: what a study reads and sets when it searches it.

A power limit outlives the process that set it (the driver keeps it until it is set again or
the host reboots), so whoever sets one must put the original back: :mod:`tuner.study.
power_limit` does. :class:`PowerControl` is what it needs of the GPUs; :class:`~tuner.catalog.
nvml.NvmlMonitor` implements it through NVML (``nvmlDeviceSetPowerManagementLimit``, which
needs root or the administrator's grant: without it NVML answers ``NVML_ERROR_NO_PERMISSION``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["PowerControl", "PowerLimit", "PowerLimitDenied"]


@dataclass(frozen=True)
class PowerLimit:
    """One GPU's power limit and what it may be set to, in watts.

    Attributes:
        gpu: the NVML index.
        in_force_w: the limit set now.
        default_w: the board's default (what a reboot restores).
        low_w: the lowest limit the board takes.
        high_w: the highest limit the board takes.
    """

    gpu: int
    in_force_w: float
    default_w: float
    low_w: float
    high_w: float


class PowerLimitDenied(Exception):
    """The driver refused to set a power limit (no privilege, or a board that has none)."""


@runtime_checkable
class PowerControl(Protocol):
    """Reads and sets the power limit of the GPUs a study uses."""

    def power_limits(self) -> list[PowerLimit]:
        """Every GPU's limit now, in the order of the study's GPU indices.

        Raises:
            PowerLimitDenied: the GPUs cannot say (no NVML, a board without power management).
        """
        ...

    def set_power_limit(self, gpu: int, watts: float) -> None:
        """Sets GPU ``gpu``'s (NVML index) power limit to ``watts``.

        Raises:
            PowerLimitDenied: the driver refused (the message says why).
        """
        ...
