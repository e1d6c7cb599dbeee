"""GPU catalog and the ``4090x2`` hardware notation.

Numbers are vendor datasheet figures: memory in GiB as NVML reports it, bandwidth in GB/s, dense
(no sparsity) FP16 tensor throughput in TFLOPS, and the GPU-to-GPU link tensor-parallel traffic
crosses. The simulator turns them into step times; nothing here is measured.

What NVML finds on a host (:class:`DetectedGpus`, read by :func:`tuner.catalog.nvml.detect_gpus`)
maps onto the catalog with :func:`hardware_of`: two ``NVIDIA GeForce RTX 4090`` are ``4090x2``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.errors import ConfigError

__all__ = [
    "CATALOG",
    "DetectedGpu",
    "DetectedGpus",
    "GpuLink",
    "GpuSpec",
    "Hardware",
    "Interconnect",
    "NoGpu",
    "find_gpu",
    "hardware_of",
    "parse_hardware",
]


class Interconnect(enum.StrEnum):
    PCIE = "PCIe"
    NVLINK = "NVLink"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as the performance model sees it."""

    name: str
    aliases: tuple[str, ...]
    vram_gib: float
    bandwidth_gbs: float
    fp16_tflops: float
    interconnect: Interconnect
    link_gbs: float  # per-direction GPU-to-GPU bandwidth used for all-reduce

    @property
    def vram_bytes(self) -> int:
        return int(self.vram_gib * 1024**3)


CATALOG: tuple[GpuSpec, ...] = (
    GpuSpec("RTX 3090", ("3090", "rtx3090"), 23.69, 936, 71, Interconnect.PCIE, 25),
    GpuSpec("RTX 4090", ("4090", "rtx4090"), 23.99, 1008, 165, Interconnect.PCIE, 25),
    GpuSpec("L4", ("l4",), 22.49, 300, 121, Interconnect.PCIE, 25),
    GpuSpec("L40S", ("l40s",), 44.99, 864, 362, Interconnect.PCIE, 25),
    GpuSpec("A10G", ("a10g",), 22.49, 600, 70, Interconnect.PCIE, 25),
    GpuSpec(
        "A100-40GB",
        ("a100-40gb", "a100-40g", "a100", "a100-sxm4-40gb", "a100-pcie-40gb"),
        39.5,
        1555,
        312,
        Interconnect.NVLINK,
        300,
    ),
    GpuSpec(
        "A100-80GB",
        ("a100-80gb", "a100-80g", "a100-sxm4-80gb", "a10080gbpcie"),
        79.25,
        2039,
        312,
        Interconnect.NVLINK,
        300,
    ),
    GpuSpec(
        "H100-SXM", ("h100", "h100-sxm", "h10080gbhbm3"), 79.65, 3350, 989, Interconnect.NVLINK, 450
    ),
    GpuSpec("H200", ("h200",), 139.8, 4800, 989, Interconnect.NVLINK, 450),
)


def _key(text: str) -> str:
    return re.sub(r"[\s_]+", "", text.strip().lower()).replace("geforce", "").replace("nvidia", "")


def find_gpu(name: str) -> GpuSpec | None:
    """Looks a GPU up by catalog name, alias or NVML device name (``NVIDIA GeForce RTX 4090``)."""
    wanted = _key(name)
    for gpu in CATALOG:
        if wanted in {_key(gpu.name), *gpu.aliases}:
            return gpu
    return None


@dataclass(frozen=True)
class Hardware:
    """A set of identical GPUs serving one model with tensor parallelism across all of them."""

    gpu: GpuSpec
    count: int

    @property
    def label(self) -> str:
        return f"{self.count}x {self.gpu.name}"

    @property
    def spec(self) -> str:
        """The short notation that round-trips through :func:`parse_hardware`."""
        return f"{self.gpu.aliases[0]}x{self.count}"


_NOTATION = re.compile(r"^(?P<gpu>.+?)(?:x(?P<count>\d+))?$", re.IGNORECASE)


def parse_hardware(text: str) -> Hardware:
    """Parses ``4090x2`` (two RTX 4090s, tensor-parallel 2), ``4090x1`` or ``4090``.

    Raises:
        ConfigError: the GPU is not in the catalog or the count is not a positive integer.
    """
    match = _NOTATION.match(text.strip())
    gpu = find_gpu(match["gpu"]) if match else None
    if match is None or gpu is None:
        known = ", ".join(g.aliases[0] for g in CATALOG)
        raise ConfigError(
            f"unknown hardware {text!r}: write GPU[xCOUNT] with a GPU from the catalog "
            f"({known}), e.g. 4090x2; `spectune hardware` lists them"
        )
    count = int(match["count"] or 1)
    if count < 1:
        raise ConfigError(f"hardware {text!r} asks for {count} GPUs: use at least 1, e.g. 4090x1")
    return Hardware(gpu, count)


def hardware_of(gpus: Sequence[tuple[int, str]]) -> Hardware:
    """The catalog hardware for GPUs as NVML names them: ``[(0, "NVIDIA GeForce RTX 4090")]``.

    Args:
        gpus: (NVML index, NVML name) of each GPU that counts.

    Raises:
        ConfigError: no GPU, a GPU the catalog lacks, or several models (tensor parallelism
            splits a model evenly, so one study tunes identical GPUs); the message names what
            was found and the flag that settles it.
    """
    found = ", ".join(f"GPU {index} {name}" for index, name in gpus)
    if not gpus:
        raise ConfigError(
            "no GPU selected: pass --hardware GPUxCOUNT, e.g. 4090x2; `spectune hardware` lists "
            "the catalog"
        )
    groups: dict[GpuSpec, list[int]] = {}
    unknown: dict[str, None] = {}  # in the order found, once each
    for index, name in gpus:
        spec = find_gpu(name)
        if spec is None:
            unknown[name] = None
        else:
            groups.setdefault(spec, []).append(index)
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)} is not in the GPU catalog (found {found}): pass --hardware "
            f"with the catalog GPU nearest to it, e.g. --hardware 4090x{len(gpus)}; `spectune "
            "hardware` lists the catalog"
        )
    if len(groups) > 1:
        gpu, indices = max(groups.items(), key=lambda item: len(item[1]))
        picked = ",".join(str(i) for i in indices)
        raise ConfigError(
            f"mixed GPU models (found {found}): one study tunes identical GPUs; pick them with "
            f"--gpus, e.g. --gpus {picked} for {Hardware(gpu, len(indices)).spec}, or pass "
            "--hardware"
        )
    ((gpu, indices),) = groups.items()
    return Hardware(gpu, len(indices))


@dataclass(frozen=True)
class DetectedGpu:
    index: int  # NVML's, the numbering --gpus and docker --gpus use
    name: str  # NVML's, e.g. "NVIDIA GeForce RTX 4090"
    memory_gib: float


# NVML_TOPOLOGY_* levels, named as `nvidia-smi topo -m` abbreviates them.
_PCIE_PATHS = {
    0: "same board",
    10: "PCIe switch (PIX)",
    20: "PCIe switches (PXB)",
    30: "PCIe host bridge (PHB)",
    40: "host bridges of one NUMA node (NODE)",
    50: "across CPUs (SYS)",
}


@dataclass(frozen=True)
class GpuLink:
    """How two GPUs reach each other: NVLink when it is active, else the PCIe path."""

    gpus: tuple[int, int]  # NVML indices
    nvlink_links: int  # active links between them; 0: none
    topology_level: int | None  # NVML's PCIe level without NVLink; None: NVLink or not known

    @property
    def path(self) -> str:
        """E.g. ``NVLink, 18 links`` or ``PCIe host bridge (PHB)``."""
        if self.nvlink_links:
            return f"NVLink, {self.nvlink_links} links"
        if self.topology_level is None:
            return "unknown (NVML does not say)"
        level = self.topology_level
        return _PCIE_PATHS.get(level, f"PCIe (NVML topology level {level})")


@dataclass(frozen=True)
class DetectedGpus:
    """What NVML sees: the GPUs that count (all, or those picked), driver, CUDA and links."""

    gpus: tuple[DetectedGpu, ...]
    driver: str
    cuda: str  # the newest CUDA the driver supports, e.g. "12.4"
    links: tuple[GpuLink, ...]

    def hardware(self) -> Hardware:
        """The catalog hardware these GPUs are, e.g. 2x RTX 4090 (``--hardware 4090x2``).

        Raises:
            ConfigError: none, mixed models or a model the catalog lacks; the message names
                what was found and which flag to pass.
        """
        return hardware_of([(gpu.index, gpu.name) for gpu in self.gpus])

    def environment(self) -> dict[str, Any]:
        """The facts a study records about where it ran (see tuner.analysis.provenance)."""
        return {
            "gpu": self.gpus[0].name if self.gpus else None,
            "gpu_count": len(self.gpus),
            "driver": self.driver,
            "cuda": self.cuda,
        }


@dataclass(frozen=True)
class NoGpu:
    """Nothing detected, and why (NVML's own words where it gave any)."""

    reason: str

    @property
    def message(self) -> str:
        """The one line that tells the user what to pass instead."""
        return (
            f"no NVIDIA GPU detected (NVML: {self.reason}): pass --hardware GPUxCOUNT, "
            "e.g. 4090x2; spectune hardware lists them"
        )
