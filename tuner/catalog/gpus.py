"""GPU catalog and the ``4090x2`` hardware notation.

Numbers are vendor datasheet figures: memory in GiB as NVML reports it, bandwidth in GB/s, dense
(no sparsity) FP16 tensor throughput in TFLOPS, and the GPU-to-GPU link tensor-parallel traffic
crosses. The simulator turns them into step times; nothing here is measured.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tuner.errors import ConfigError

__all__ = ["CATALOG", "GpuSpec", "Hardware", "Interconnect", "find_gpu", "parse_hardware"]


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
