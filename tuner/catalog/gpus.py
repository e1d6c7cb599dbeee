"""GPU catalog and the ``4090x2`` hardware notation.

The catalog is data, ``tuner/catalog/gpus.yaml``, with the vendor's source next to each entry
(that file's header says what each number means: memory as NVML reports it, bandwidth in GB/s,
dense FP16 tensor TFLOPS, the link tensor parallelism crosses), validated by :class:`GpuSpec`
when spectune starts. A GPU the catalog lacks is described in a file of the same form and added
with :func:`add_gpus` (``--gpu-spec FILE``, or ``SPECTUNE_GPU_SPEC``); a study on it stores the
description with its space, so resuming it needs no file. The simulator turns the numbers into
step times and the memory pre-screen into a verdict; nothing here is measured.

What NVML finds on a host (:class:`DetectedGpus`, read by :func:`tuner.catalog.nvml.detect_gpus`)
maps onto the catalog with :func:`hardware_of`: two ``NVIDIA GeForce RTX 4090`` are ``4090x2``.
AMD GPUs are never detected (NVML sees NVIDIA's only): their users pass ``--hardware``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tuner.errors import ConfigError

__all__ = [
    "CATALOG",
    "DetectedGpu",
    "DetectedGpus",
    "GpuLink",
    "GpuSpec",
    "Hardware",
    "Interconnect",
    "MemoryKind",
    "NoGpu",
    "add_gpus",
    "find_gpu",
    "hardware_of",
    "known_gpus",
    "parse_hardware",
    "read_gpus",
]


class Interconnect(enum.StrEnum):
    PCIE = "PCIe"
    NVLINK = "NVLink"
    INFINITY_FABRIC = "Infinity Fabric"  # AMD Instinct's GPU-to-GPU links (xGMI)


class MemoryKind(enum.StrEnum):
    HBM = "HBM"  # stacked on the package: A100, H100, H200, B200, MI300X
    GDDR = "GDDR"  # chips on the board: GeForce, RTX workstation cards, L4, L40, A10


class GpuSpec(BaseModel):
    """One GPU model as the performance model sees it: an entry of ``gpus.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80)
    aliases: tuple[str, ...] = Field(min_length=1)
    """The ``--hardware`` notation first, then other spellings and NVML's device names."""
    vram_gib: float = Field(gt=0, le=4096)
    bandwidth_gbs: float = Field(gt=0, le=100_000)
    memory: MemoryKind
    """HBM or GDDR: kernels reach another share of the datasheet bandwidth on each."""
    fp16_tflops: float = Field(gt=0, le=100_000)
    interconnect: Interconnect
    link_gbs: float = Field(gt=0, le=100_000)
    """Per-direction GPU-to-GPU bandwidth used for all-reduce."""
    board_w: float | None = Field(default=None, gt=0, le=10_000)
    """The board's default power limit (TGP/TDP), W; None: not published."""
    idle_w: float | None = Field(default=None, gt=0, le=10_000)
    """What the board draws with a model loaded and no work, W; None: not cited."""
    sources: tuple[str, ...] = ()
    note: str = ""

    @property
    def vram_bytes(self) -> int:
        return int(self.vram_gib * 1024**3)

    @property
    def notation(self) -> str:
        """The GPU in ``--hardware`` (``5090`` of ``5090x2``)."""
        return self.aliases[0]

    def matches(self, name: str) -> bool:
        """Whether ``name`` (a catalog name, an alias, an NVML device name) is this GPU."""
        return _key(name) in {_key(self.name), *(_key(alias) for alias in self.aliases)}


def _key(text: str) -> str:
    return re.sub(r"[\s_]+", "", text.strip().lower()).replace("geforce", "").replace("nvidia", "")


_ENTRIES: TypeAdapter[list[GpuSpec]] = TypeAdapter(list[GpuSpec])


def read_gpus(text: str, origin: str) -> tuple[GpuSpec, ...]:
    """GPU entries from YAML: a list of them, or one mapping.

    Raises:
        ConfigError: not YAML, or an entry with a missing, unknown or wrong key, or two entries
            answering to one name; one line naming the entry, the key and the fix.
    """
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{origin} is not valid YAML{where}: fix the syntax") from None
    entries = [raw] if isinstance(raw, dict) else raw
    try:
        gpus = tuple(_ENTRIES.validate_python(entries))
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_problem(exc, entries)}") from None
    _check_names(gpus, origin)
    return gpus


def _problem(exc: ValidationError, entries: Any) -> str:
    first = exc.errors(include_url=False)[0]
    loc = first["loc"]
    if not loc or not isinstance(loc[0], int):
        return "must be a list of GPUs, each a mapping of name, aliases, vram_gib, ... (gpus.yaml)"
    entry = entries[loc[0]]
    name = entry.get("name") if isinstance(entry, dict) else None
    which = f"GPU {loc[0] + 1}{f' ({name})' if name else ''}"
    key = ".".join(str(part) for part in loc[1:])
    keys = ", ".join(GpuSpec.model_fields)
    if first["type"] == "missing":
        return f"{which}: '{key}' must be set (keys: {keys})"
    if first["type"] == "extra_forbidden":
        return f"{which}: unknown key '{key}' (keys: {keys})"
    return f"{which}: {key} = {first['input']!r}: {first['msg']}"


def _check_names(gpus: Sequence[GpuSpec], origin: str) -> None:
    seen: dict[str, str] = {}
    for gpu in gpus:
        for name in {_key(gpu.name), *(_key(alias) for alias in gpu.aliases)}:
            if seen.setdefault(name, gpu.name) != gpu.name:
                raise ConfigError(
                    f"{origin}: {gpu.name} and {seen[name]} both answer to {name!r}: give each "
                    "GPU names of its own"
                )


CATALOG: tuple[GpuSpec, ...] = read_gpus(
    files("tuner.catalog").joinpath("gpus.yaml").read_text(), "the GPU catalog (gpus.yaml)"
)
_added: list[GpuSpec] = []  # GPUs of the user's own files, for this process


def known_gpus() -> tuple[GpuSpec, ...]:
    """The catalog and the GPUs :func:`add_gpus` added."""
    return (*CATALOG, *_added)


def add_gpus(path: Path) -> tuple[GpuSpec, ...]:
    """Adds the GPUs described in ``path`` (``--gpu-spec``) to this process's catalog.

    Raises:
        ConfigError: the file cannot be read or is wrong (one line, naming the key), or names a
            GPU the catalog already has.
    """
    origin = f"GPU spec {path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{origin} cannot be read ({exc.strerror}): check the path") from None
    gpus = read_gpus(text, origin)
    new = [gpu for gpu in gpus if gpu not in _added]
    _check_names([*known_gpus(), *new], origin)
    _added.extend(new)
    return gpus


def find_gpu(name: str) -> GpuSpec | None:
    """Looks a GPU up by catalog name, alias or NVML device name (``NVIDIA GeForce RTX 4090``)."""
    return next((gpu for gpu in known_gpus() if gpu.matches(name)), None)


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
        return f"{self.gpu.notation}x{self.count}"

    def as_source(self) -> str | dict[str, Any]:
        """How a stored space names these GPUs: the notation for a catalog GPU; a GPU of the
        user's own file whole, so a resume or a worker needs no file."""
        if self.gpu in CATALOG:
            return self.spec
        return {"gpu": self.gpu.model_dump(mode="json"), "count": self.count}


_NOTATION = re.compile(r"^(?P<gpu>.+?)(?:x(?P<count>\d+))?$", re.IGNORECASE)


def parse_hardware(text: str) -> Hardware:
    """Parses ``4090x2`` (two RTX 4090s, tensor-parallel 2), ``4090x1`` or ``4090``.

    Raises:
        ConfigError: the GPU is not in the catalog or the count is not a positive integer.
    """
    match = _NOTATION.match(text.strip())
    gpu = find_gpu(match["gpu"]) if match else None
    if match is None or gpu is None:
        known = ", ".join(g.notation for g in known_gpus())
        raise ConfigError(
            f"unknown hardware {text!r}: write GPU[xCOUNT] with a GPU from the catalog "
            f"({known}), e.g. 4090x2, or describe yours with --gpu-spec FILE; `spectune "
            "hardware` lists them"
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
            f"{', '.join(unknown)} is not in the GPU catalog (found {found}): describe it with "
            "--gpu-spec FILE (the keys of `spectune hardware --json`), or pass --hardware with "
            f"the catalog GPU nearest to it, e.g. --hardware 4090x{len(gpus)}"
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
