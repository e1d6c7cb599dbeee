"""Hardware detection: what NVML sees (through a stand-in probe), how it maps onto the catalog,
`spectune hardware detect`, and --hardware defaulting to this host's GPUs in optimize."""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest
from typer.testing import CliRunner

from tuner.catalog import nvml
from tuner.catalog.gpus import DetectedGpus, NoGpu, hardware_of
from tuner.catalog.nvml import NvmlProbe, detect_gpus
from tuner.cli import app
from tuner.errors import ConfigError, SpectuneError
from tuner.study import optimize as optimize_module
from tuner.study.optimize import OpenedRun

RTX_4090 = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"
HOST_BRIDGE = 30  # NVML_TOPOLOGY_HOSTBRIDGE
runner = CliRunner()


@dataclass
class StandInProbe:
    """A GpuProbe with made-up GPUs: names, NVLink links per pair, one PCIe level for all."""

    names: list[str]
    nvlink: dict[frozenset[int], int] = field(default_factory=dict)
    level: int = HOST_BRIDGE
    fail_on_name: bool = False
    closed: bool = False

    def device_count(self) -> int:
        return len(self.names)

    def name(self, index: int) -> str:
        if self.fail_on_name:
            raise RuntimeError("GPU is lost")
        return self.names[index]

    def memory_total_bytes(self, index: int) -> int:
        return int((79.65 if "H100" in self.names[index] else 23.99) * 1024**3)

    def driver_version(self) -> str:
        return "550.54.14"

    def cuda_driver_version(self) -> int:
        return 12040

    def nvlink_links(self, a: int, b: int) -> int:
        return self.nvlink.get(frozenset((a, b)), 0)

    def topology_level(self, a: int, b: int) -> int:
        return self.level

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Callable[[StandInProbe | Exception], None]:
    """Makes the one probe factory return a stand-in (or raise, as NVML does without a driver)."""

    def install(probe: StandInProbe | Exception) -> None:
        def open_probe() -> StandInProbe:
            if isinstance(probe, Exception):
                raise probe
            return probe

        monkeypatch.setattr(nvml, "open_probe", open_probe)

    return install


def _detected(probe: StandInProbe, indices: list[int] | None = None) -> DetectedGpus:
    detected = detect_gpus(indices, probe)
    assert isinstance(detected, DetectedGpus), detected
    return detected


def test_two_4090s_over_the_host_bridge_are_4090x2() -> None:
    probe = StandInProbe([RTX_4090, RTX_4090])
    detected = _detected(probe)
    assert [(g.index, g.name, round(g.memory_gib, 2)) for g in detected.gpus] == [
        (0, RTX_4090, 23.99),
        (1, RTX_4090, 23.99),
    ]
    assert (detected.driver, detected.cuda) == ("550.54.14", "12.4")
    (link,) = detected.links
    assert (link.gpus, link.nvlink_links, link.path) == ((0, 1), 0, "PCIe host bridge (PHB)")
    assert detected.hardware().spec == "4090x2"
    assert detected.environment() == {
        "gpu": RTX_4090,
        "gpu_count": 2,
        "driver": "550.54.14",
        "cuda": "12.4",
    }
    assert not probe.closed  # a probe passed in belongs to the caller


def test_an_nvlink_pair_of_h100s() -> None:
    detected = _detected(StandInProbe([H100, H100], nvlink={frozenset((0, 1)): 18}))
    (link,) = detected.links
    assert (link.nvlink_links, link.topology_level, link.path) == (18, None, "NVLink, 18 links")
    hardware = detected.hardware()
    assert (hardware.label, hardware.spec) == ("2x H100-SXM", "h100x2")


@pytest.mark.parametrize(
    ("level", "path"),
    [(0, "same board"), (10, "PCIe switch (PIX)"), (50, "across CPUs (SYS)"), (7, "level 7")],
)
def test_pcie_paths_are_named(level: int, path: str) -> None:
    (link,) = _detected(StandInProbe([RTX_4090, RTX_4090], level=level)).links
    assert path in link.path


def test_mixed_models_name_what_was_found_and_the_flags() -> None:
    detected = _detected(StandInProbe([RTX_4090, "NVIDIA GeForce RTX 3090", RTX_4090]))
    with pytest.raises(ConfigError) as info:
        detected.hardware()
    message = str(info.value)
    assert "mixed GPU models" in message and "GPU 1 NVIDIA GeForce RTX 3090" in message
    assert "--gpus 0,2 for 4090x2" in message and "--hardware" in message
    # --gpus picks the matching ones
    picked = _detected(StandInProbe([RTX_4090, "NVIDIA GeForce RTX 3090", RTX_4090]), [0, 2])
    assert picked.hardware().spec == "4090x2" and [link.gpus for link in picked.links] == [(0, 2)]


def test_a_gpu_missing_from_the_catalog_names_it_and_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        hardware_of([(0, "NVIDIA GeForce RTX 5060"), (1, "NVIDIA GeForce RTX 5060")])
    message = str(info.value)
    assert message.startswith("NVIDIA GeForce RTX 5060 is not in the GPU catalog (found GPU 0")
    assert "--gpu-spec FILE" in message and "--hardware 4090x2" in message
    assert "\n" not in message


def test_no_nvml_is_no_gpu_with_nvml_s_reason(host: Callable[[Any], None]) -> None:
    host(RuntimeError("NVML Shared Library Not Found"))
    detected = detect_gpus()
    assert detected == NoGpu("NVML Shared Library Not Found")
    assert isinstance(detected, NoGpu) and detected.message == (
        "no NVIDIA GPU detected (NVML: NVML Shared Library Not Found): pass --hardware "
        "GPUxCOUNT, e.g. 4090x2; spectune hardware lists them"
    )
    assert nvml.gpu_names(None) is None


def test_an_nvml_error_mid_way_or_a_missing_index_is_no_gpu(host: Callable[[Any], None]) -> None:
    failing = StandInProbe([RTX_4090], fail_on_name=True)
    host(failing)
    assert detect_gpus() == NoGpu("GPU is lost") and failing.closed  # opened here, closed here
    assert detect_gpus([3], StandInProbe([RTX_4090, RTX_4090])) == NoGpu(
        "no GPU 3: the host has 2, numbered 0-1"
    )
    assert detect_gpus(None, StandInProbe([])) == NoGpu("the driver reports no GPU")


def test_the_real_pynvml_path_without_a_driver_says_why_and_does_not_raise() -> None:
    detected = detect_gpus()  # the real probe: pynvml as installed
    if isinstance(detected, DetectedGpus):
        pytest.skip("this host has an NVIDIA driver")
    assert detected.reason and "no NVIDIA GPU detected (NVML: " in detected.message


class _NotSupported(Exception):
    pass


def _fake_pynvml() -> types.ModuleType:
    """Just enough of pynvml: GPUs 0-1 on an NVLink bridge (4 links), GPU 2 a GeForce without
    NVLink, GPU 3 on NVSwitch links only."""
    bus = ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"]

    def link_state(gpu: int, link: int) -> int:
        if gpu == 2:
            raise _NotSupported("Not Supported")
        if link >= 6:
            raise _NotSupported("Invalid Argument")
        return 0 if link == 4 else 1  # one link of six is down

    def remote(gpu: int, link: int) -> types.SimpleNamespace:
        peer = {0: 1, 1: 0}.get(gpu)
        return types.SimpleNamespace(busId=(bus[peer] if peer is not None else "switch").encode())

    fake = types.ModuleType("pynvml")
    fake.__dict__.update(
        NVMLError=_NotSupported,
        NVML_NVLINK_MAX_LINKS=18,
        NVML_FEATURE_ENABLED=1,
        NVML_NVLINK_DEVICE_TYPE_SWITCH=2,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-80GB",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 1024**3),
        nvmlSystemGetDriverVersion=lambda: b"535.104.05",
        nvmlSystemGetCudaDriverVersion_v2=lambda: 12020,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=bus[h].encode()),
        nvmlDeviceGetNvLinkState=link_state,
        nvmlDeviceGetNvLinkRemotePciInfo=remote,
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: 2 if h == 3 else 0,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 40,
    )
    return fake


def test_the_nvml_probe_counts_links_to_the_peer_or_a_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    detected = detect_gpus()  # the real NvmlProbe, over the stand-in module
    assert isinstance(detected, DetectedGpus)
    assert (detected.driver, detected.cuda, detected.hardware().spec) == (
        "535.104.05",
        "12.2",
        "a100-80gbx4",
    )
    paths = {link.gpus: link.path for link in detected.links}
    assert paths[(0, 1)] == "NVLink, 5 links"
    assert paths[(0, 2)] == "host bridges of one NUMA node (NODE)"  # GeForce: no NVLink
    probe = NvmlProbe()
    assert probe.nvlink_links(3, 0) == 5  # every active link ends at an NVSwitch
    assert probe.nvlink_links(2, 0) == 0


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_hardware_detect_prints_the_gpus_links_and_the_flag(host: Callable[[Any], None]) -> None:
    host(StandInProbe([RTX_4090, RTX_4090]))
    code, out, err = _run("hardware", "detect")
    assert code == 0, err
    assert "NVIDIA driver 550.54.14, CUDA 12.4" in out and out.count(RTX_4090) == 2
    assert "23.99" in out and "GPU 0 <-> GPU 1: PCIe host bridge (PHB)" in out
    assert "catalog: 2x RTX 4090, --hardware 4090x2" in out

    code, out, err = _run("hardware", "detect", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert (data["hardware"], data["catalog"], data["problem"]) == ("4090x2", "RTX 4090", None)
    assert [g["name"] for g in data["gpus"]] == [RTX_4090, RTX_4090]
    assert data["links"] == [
        {"gpus": [0, 1], "nvlink_links": 0, "topology_level": 30, "path": "PCIe host bridge (PHB)"}
    ]
    assert (data["driver"], data["cuda"]) == ("550.54.14", "12.4")


def test_hardware_detect_of_mixed_gpus_shows_them_and_the_fix(
    host: Callable[[Any], None],
) -> None:
    host(StandInProbe([RTX_4090, H100]))
    code, out, _ = _run("hardware", "detect", "--json")
    data = json.loads(out)
    assert code == 0 and data["hardware"] is None and "mixed GPU models" in data["problem"]
    code, out, _ = _run("hardware", "detect", "--gpus", "1")
    assert code == 0 and "--hardware h100x1" in out


def test_hardware_detect_without_nvml_is_one_line_exit_2(host: Callable[[Any], None]) -> None:
    host(RuntimeError("Driver Not Loaded"))
    line = (
        "no NVIDIA GPU detected (NVML: Driver Not Loaded): pass --hardware GPUxCOUNT, e.g. "
        "4090x2; spectune hardware lists them"
    )
    for args in (("hardware", "detect"), ("hardware", "detect", "--json")):
        code, out, err = _run(*args)
        assert code == 2 and err.strip() == f"error: {line}"
        assert out == ("" if "--json" not in args else json.dumps({"error": line}, indent=2) + "\n")


def test_hardware_and_hardware_list_list_the_catalog() -> None:
    for args in (("hardware",), ("hardware", "list")):
        code, out, _ = _run(*args)
        assert code == 0 and "RTX 4090" in out and "H200" in out
    code, out, _ = _run("hardware", "list", "--json")
    assert code == 0 and any(g["name"] == "H100-SXM" for g in json.loads(out))


def test_optimize_measured_without_gpu_or_hardware_stops_before_any_study(
    host: Callable[[Any], None], tmp_path: Path
) -> None:
    host(RuntimeError("NVML Shared Library Not Found"))
    code, out, err = _run("optimize", "--backend", "process", "--studies-dir", str(tmp_path))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (out, err)
    assert lines[0].startswith("error: no NVIDIA GPU detected (NVML: NVML Shared Library")
    assert "--hardware" in lines[0]
    assert list(tmp_path.glob("*.db")) == []


def test_optimize_sim_without_gpu_runs_on_the_space_s_hardware(
    host: Callable[[Any], None], tmp_path: Path
) -> None:
    host(RuntimeError("NVML Shared Library Not Found"))
    args = [
        "optimize",
        "--backend",
        "sim",
        "--trials",
        "2",
        "--confirm-top",
        "0",
        "--sampler",
        "random",
    ]
    code, _, err = _run(*args, "--studies-dir", str(tmp_path), "--study", "s")
    assert code == 0 and "note" not in err, err
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    assert study.user_attrs["space"]["hardware"] == "4090x2"  # the default space's


def _vllm_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `vllm` on PATH: the process backend refuses a missing one before anything else."""
    stand_in = tmp_path / "bin" / "vllm"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text("#!/bin/sh\nexit 0\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ.get('PATH', '')}")


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[OpenedRun]:
    """Stops optimize where it would start the study, keeping the run it got (opened: its
    space on the GPUs detected here)."""
    runs: list[OpenedRun] = []
    _vllm_on_path(tmp_path, monkeypatch)

    def stop(run: OpenedRun, *args: object, **kwargs: object) -> None:
        runs.append(run)
        raise SpectuneError("stopped before the study")

    monkeypatch.setattr(optimize_module, "optimize", stop)  # the command imports it when run
    return runs


@pytest.mark.parametrize(
    ("names", "extra", "spec", "note"),
    [
        ([RTX_4090, RTX_4090], [], "4090x2", False),  # what the default space declares
        ([RTX_4090], [], "4090x1", True),
        ([RTX_4090, RTX_4090], ["--gpus", "1"], "4090x1", True),
        ([H100, H100, H100, H100], [], "h100x4", True),
    ],
)
def test_optimize_measured_defaults_to_the_detected_gpus(
    host: Callable[[Any], None],
    captured: list[OpenedRun],
    tmp_path: Path,
    names: list[str],
    extra: list[str],
    spec: str,
    note: bool,
) -> None:
    host(StandInProbe(names))
    args = ["optimize", "--backend", "process", "--json", "--studies-dir", str(tmp_path), *extra]
    code, _, err = _run(*args)
    assert code == 2 and "stopped before the study" in err
    (run,) = captured
    assert run.space.hardware.spec == spec
    assert run.space.tensor_parallel_size == run.space.hardware.count
    notes = [line for line in err.splitlines() if line.startswith("note:") and "budget" not in line]
    assert len(notes) == int(note)
    if note:
        assert f"tuning {spec}" in notes[0] and "--hardware 4090x2" in notes[0]


def test_optimize_measured_on_mixed_gpus_says_which_to_pick(
    host: Callable[[Any], None], captured: list[OpenedRun], tmp_path: Path
) -> None:
    host(StandInProbe([RTX_4090, H100]))
    code, _, err = _run("optimize", "--backend", "docker", "--studies-dir", str(tmp_path))
    assert code == 2 and captured == [] and "mixed GPU models" in err and "--gpus" in err


def test_optimize_sim_uses_detected_gpus_silently_and_keeps_an_explicit_hardware(
    host: Callable[[Any], None], captured: list[OpenedRun], tmp_path: Path
) -> None:
    host(StandInProbe([H100]))
    base = ["optimize", "--backend", "sim", "--studies-dir", str(tmp_path)]
    code, _, err = _run(*base)
    assert code == 2 and "note: this host" not in err  # silent on the GPUs it simulates
    _run(*base, "--hardware", "4090x2")
    _run("optimize", "--backend", "process", "--hardware", "4090x2", "--studies-dir", str(tmp_path))
    assert [r.space.hardware.spec for r in captured] == ["h100x1", "4090x2", "4090x2"]
