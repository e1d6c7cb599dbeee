"""What the GPUs did through a study, said once: throttling that runs through most trials.

A trial measured while heat or a hardware slowdown held the clocks down is measured again
(:mod:`tuner.trial.backends.served`) and, when it throttles again, passed over by the picks.
When that happens on most trials, the host itself is the finding: the numbers are this GPU's
under heat, and the study says so once, with the GPU's temperature and power limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.trial.record import TrialRecord

__all__ = ["throttle_note"]


def throttle_note(records: Sequence[TrialRecord]) -> str | None:
    """One line when more than half of the trials whose GPUs were read ran throttled; None
    otherwise (or when none were read: no NVML, the simulator)."""
    read = [r for r in records if r.gpu and r.duplicate_of is None]
    hot = [r for r in read if r.throttled]
    if not read or 2 * len(hot) <= len(read):
        return None
    reasons = sorted(
        {
            reason
            for r in hot
            for reason, held in (r.gpu or {}).get("throttled_s", {}).items()
            if reason != "power_cap" and held
        }
    )
    temperatures = [t for r in hot if (t := (r.gpu or {}).get("max_temperature_c")) is not None]
    limits = [w for r in hot for w in (r.gpu or {}).get("power_limit_w") or ()]
    heat = f", up to {max(temperatures):.0f} °C" if temperatures else ""
    limit = f" under a {max(limits):.0f} W power limit" if limits else ""
    return (
        f"The GPUs throttled ({', '.join(reasons) or 'slowdown'}) in {len(hot)} of {len(read)} "
        f"measured trials{heat}{limit}, even when measured again after a cool-down: the numbers "
        "are this host's under that condition; cool the GPUs (airflow, a lower power limit) "
        "and run the study again for numbers of the configs."
    )
