"""Records of the GPUs' original power limits, on the host, for as long as a study may have
changed them.

A run that sets a power limit writes one file (``$XDG_STATE_HOME/spectune/power-limits/
PID.json``: the owner's PID and start time, the study, each GPU's original limit by NVML index)
before its first change, and removes it once the originals are back. A file whose owner is
dead is what a SIGKILL left: the next run restores from it (:func:`recover`). A PID is trusted
only with its start time (:func:`tuner.launch.runfiles.start_ticks`), so a PID the kernel has
since given to another process is never taken for the owner.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tuner.catalog.power import PowerControl, PowerLimitDenied
from tuner.errors import ConfigError
from tuner.launch.runfiles import start_ticks, state_dir

__all__ = ["check_no_live_holder", "records_dir", "recover", "write_record"]

Notice = Callable[[str], None]


def records_dir() -> Path:
    """Where the originals of limits a live run may have changed are recorded."""
    return state_dir().parent / "power-limits"


def write_record(study: str, original: Mapping[int, float]) -> Path:
    """Records ``original`` (watts by NVML index) for this process; returns the file."""
    folder = records_dir()
    folder.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    path = folder / f"{pid}.json"
    record = {
        "pid": pid,
        "started": start_ticks(pid),
        "study": study,
        "original_w": {str(g): w for g, w in original.items()},
    }
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(record))
    partial.replace(path)  # a reader never sees half a record
    return path


def recover(control: PowerControl, on_notice: Notice | None) -> None:
    """Restores the limits recorded by runs that died without restoring them (SIGKILL), each
    said in one line; a live run's record is left alone."""
    for path, record in _records():
        if _alive(record):
            continue
        in_force = {limit.gpu: limit.in_force_w for limit in control.power_limits()}
        original = {int(gpu): float(w) for gpu, w in record["original_w"].items()}
        if not original.keys() <= in_force.keys():
            continue  # GPUs this run does not see: a run that uses them restores them
        changed = {g: w for g, w in original.items() if g in in_force and in_force[g] != w}
        try:
            for gpu, watts in changed.items():
                control.set_power_limit(gpu, watts)
        except PowerLimitDenied as why:
            if on_notice is not None:
                on_notice(
                    f"WARNING: study {record['study']} ended without restoring the GPUs' power "
                    f"limit and spectune may not set it here ({why}): restore it with "
                    + "; ".join(f"nvidia-smi -i {g} -pl {w:g}" for g, w in changed.items())
                )
            continue
        path.unlink(missing_ok=True)
        if changed and on_notice is not None:
            on_notice(
                f"note: study {record['study']} ended without restoring the GPUs' power limit "
                "(killed): restored "
                + ", ".join(f"GPU {g} {in_force[g]:g} W -> {w:g} W" for g, w in changed.items())
            )


def _records() -> Iterator[tuple[Path, dict[str, Any]]]:
    """The records on this host, each with its file."""
    for path in sorted(records_dir().glob("*.json")):
        try:
            yield path, json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # removed by another run meanwhile (they are written whole: os.replace)


def _alive(record: dict[str, Any]) -> bool:
    """Whether the record's owner still runs (a PID is trusted with its start time only)."""
    started = start_ticks(int(record["pid"]))
    return started is not None and started == record["started"]


def check_no_live_holder(control: PowerControl) -> None:
    """Refuses a second study setting the limit of GPUs a live one holds: each would record
    the other's limit as the original."""
    gpus = {limit.gpu for limit in control.power_limits()}
    for _, record in _records():
        held = gpus & {int(gpu) for gpu in record["original_w"]}
        if held and _alive(record) and int(record["pid"]) != os.getpid():
            raise ConfigError(
                f"search.power_limit_w: study {record['study']} (process {record['pid']}) is "
                f"setting the power limit of GPU {min(held)}; wait for it to end, or drop "
                "search.power_limit_w"
            )
