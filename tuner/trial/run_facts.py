"""What ran a study's servers (:class:`RunFacts`), stored as the study's ``run`` attribute."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner import serde

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second


__all__ = ["RUN_ATTR", "RunFacts", "stored_run"]

RUN_ATTR = "run"


@dataclass(frozen=True)
class RunFacts:
    """What ran a study's servers, as the last worker (or confirmation) to start one found it;
    stored whole (:func:`tuner.serde.dump`) as the study's ``run`` attribute.

    Attributes:
        backend: ``sim``, ``process`` or ``docker``.
        vllm_version: the vLLM version spoken to: given, from the image tag, or detected
            (``vllm --version``).
        image: the container image that ran; None for the process and sim backends.
        gpus: the GPUs NVML detected (``gpu``, ``gpu_count``, ``driver``, ``cuda``); None when
            nothing was detected (no NVML: a CPU build, or the simulator).
    """

    backend: str
    vllm_version: str
    image: str | None = None
    gpus: Mapping[str, Any] | None = None


def stored_run(study: optuna.Study) -> RunFacts | None:
    """What ran the study's servers; None for studies written before it was recorded."""
    raw = study.user_attrs.get(RUN_ATTR)
    return None if raw is None else serde.load(RunFacts, raw)
