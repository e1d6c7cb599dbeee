"""What ran a study's servers (:class:`RunFacts`), stored as the study's ``run`` attribute."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second


__all__ = ["RUN_ATTR", "RunFacts", "stored_run"]

RUN_ATTR = "run"


@dataclass(frozen=True)
class RunFacts:
    """What ran a study's servers, as the last worker (or confirmation) to start one found it.

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

    def to_dict(self) -> dict[str, Any]:
        """The facts as the study's ``run`` attribute."""
        return {
            "backend": self.backend,
            "vllm_version": self.vllm_version,
            "image": self.image,
            "gpus": None if self.gpus is None else dict(self.gpus),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunFacts:
        """Reads what :meth:`to_dict` wrote."""
        gpus = data.get("gpus")
        return cls(
            str(data["backend"]),
            str(data["vllm_version"]),
            data.get("image"),
            None if gpus is None else dict(gpus),
        )


def stored_run(study: optuna.Study) -> RunFacts | None:
    """What ran the study's servers; None for studies written before it was recorded."""
    raw = study.user_attrs.get(RUN_ATTR)
    return None if raw is None else RunFacts.from_dict(raw)
