"""What ``--json`` prints, declared: one record per command that opens no study (the catalogs,
``bench``, ``estimate``, ``calibrate``) and the error every command prints under ``--json``.

Each record is written by :func:`tuner.cli.app.print_json` through :mod:`tuner.serde` and
read back by :func:`tuner.serde.load_json`, so a script can check what it reads against the
record (tests/cli/test_json.py). The records of the commands on a study are in
:mod:`tuner.cli.study_outputs`: they hold records whose modules import Optuna, which these
commands never load. Pydantic loads with this module: commands import it when they print.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import SerializerFunctionWrapHandler, model_serializer, model_validator

from tuner.catalog.gpus import DetectedGpu, DetectedGpus, GpuLink, Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.trial import ServerConfig
from tuner.sim.band import Band
from tuner.sim.estimate import Estimate
from tuner.sim.memory import MemoryEstimate
from tuner.sim.power_fit import PowerBand
from tuner.sim.twin.fit import FittedTwin
from tuner.sim.twin.power import PowerScale

__all__ = [
    "BenchOutput",
    "CalibrateOutput",
    "DetectedOutput",
    "ErrorOutput",
    "EstimateOutput",
    "LinkOutput",
    "ModelOutput",
    "flattened",
    "nested",
]


def flattened(data: dict[str, Any], inner: str) -> dict[str, Any]:
    """``data`` with the record under ``inner`` spread where it stands: the JSON of a record
    printed with a few facts of the command's beside its own keys."""
    spread: dict[str, Any] = {}
    for key, value in data.items():
        spread.update(value if key == inner else {key: value})
    return spread


def nested(data: Any, inner: str, own: Collection[str]) -> Any:
    """What :func:`flattened` spread, gathered again under ``inner``: every key but ``own``."""
    if not isinstance(data, dict) or inner in data:
        return data
    kept = {key: value for key, value in data.items() if key in own}
    return {**kept, inner: {key: value for key, value in data.items() if key not in own}}


@dataclass(frozen=True)
class ErrorOutput:
    """The one line an error prints on stderr, as ``--json`` prints it on stdout."""

    error: str


@dataclass(frozen=True)
class ModelOutput:
    """``spectune models --json``: one catalog entry, with its weights in GiB."""

    model: ModelSpec
    weight_gib: float

    @classmethod
    def of(cls, model: ModelSpec) -> ModelOutput:
        return cls(model, model.weight_bytes / 1024**3)

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return flattened(handler(self), "model")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return nested(data, "model", ("weight_gib",))


@dataclass(frozen=True)
class LinkOutput:
    """How two detected GPUs reach each other, with the path in words."""

    link: GpuLink
    path: str

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return flattened(handler(self), "link")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return nested(data, "link", ("path",))


@dataclass(frozen=True)
class DetectedOutput:
    """``spectune hardware detect --json``: what NVML sees and the catalog entry it maps to
    (``catalog`` and ``hardware`` None, and ``problem`` the fix, where it maps to none)."""

    driver: str
    cuda: str
    gpus: tuple[DetectedGpu, ...]
    links: tuple[LinkOutput, ...]
    catalog: str | None
    hardware: str | None
    problem: str | None

    @classmethod
    def of(
        cls, detected: DetectedGpus, hardware: Hardware | None, problem: str | None
    ) -> DetectedOutput:
        return cls(
            detected.driver,
            detected.cuda,
            detected.gpus,
            tuple(LinkOutput(link, link.path) for link in detected.links),
            None if hardware is None else hardware.gpu.name,
            None if hardware is None else hardware.spec,
            problem,
        )


@dataclass(frozen=True)
class BenchOutput:
    """``spectune bench --json``: the server measured and the measured level's summary
    (:func:`tuner.bench.summary.level_summary`), its keys beside ``url`` and ``model``."""

    url: str
    model: str
    summary: dict[str, Any]

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return flattened(handler(self), "summary")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return nested(data, "summary", ("url", "model"))


@dataclass(frozen=True)
class EstimateOutput:
    """``spectune estimate --json``: the predicted run (``result`` None where the config does
    not fit) and the measured error of predictions like it."""

    source: Literal["predicted"]
    hardware: str
    server: ServerConfig
    memory_per_gpu_gib: MemoryEstimate
    fits: bool
    result: dict[str, Any] | None  # the simulated run's summary, as a trial stores it
    error_band: Band
    power_band: PowerBand | None  # None where the GPU's board power is unknown
    power_scale: PowerScale | None  # a study's correction of the power model (--study)
    energy_error: float | None  # J/token's error: the power's and the throughput's together

    @classmethod
    def of(cls, est: Estimate) -> EstimateOutput:
        summary = None if est.result is None else est.result.summary()
        memory = est.memory
        return cls(
            "predicted",
            est.hardware.label,
            est.server,
            memory,
            memory.fits,
            summary,
            est.band,
            est.power_band,
            est.power_scale,
            est.energy_error,
        )


@dataclass(frozen=True)
class CalibrateOutput:
    """``spectune calibrate --json``: where the fitted twin was written, and the twin."""

    path: str
    twin: FittedTwin
