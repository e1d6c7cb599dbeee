"""The GPU catalog as data: every entry sourced, today's GPUs present and usable end to end,
and GPUs of the user's own file validated like a space."""

from __future__ import annotations

import json
import math
from pathlib import Path
from urllib.parse import urlparse

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tuner.catalog import gpus, nvml
from tuner.catalog.gpus import CATALOG, GpuSpec, find_gpu, parse_hardware, read_gpus
from tuner.cli import app
from tuner.config.vllm_args import sampled_value_refusal
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError
from tuner.sim.estimate import estimate
from tuner.trial.record import stored_space

runner = CliRunner()
VENDORS = {"www.nvidia.com", "images.nvidia.com", "resources.nvidia.com", "www.amd.com"}
VENDORS |= {"aws.amazon.com"}  # the A10G is AWS's; NVIDIA publishes no datasheet for it
NEW = {
    "RTX 5090": "NVIDIA GeForce RTX 5090",
    "RTX 5080": "NVIDIA GeForce RTX 5080",
    "RTX PRO 6000 Blackwell": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "RTX 6000 Ada": "NVIDIA RTX 6000 Ada Generation",
    "L40": "NVIDIA L40",
    "H100 PCIe": "NVIDIA H100 PCIe",
    "H100 NVL": "NVIDIA H100 NVL",
    "H20": "NVIDIA H20",
    "H200 NVL": "NVIDIA H200 NVL",
    "B200": "NVIDIA B200",
    "GB200": "NVIDIA GB200",
    "MI300X": "AMD Instinct MI300X",
    "MI325X": "AMD Instinct MI325X",
}
MY_GPU = {
    "name": "RTX 5070 Ti",
    "aliases": ["5070ti", "NVIDIA GeForce RTX 5070 Ti"],
    "vram_gib": 15.92,
    "bandwidth_gbs": 896,
    "memory": "GDDR",
    "fp16_tflops": 87.9,
    "interconnect": "PCIe",
    "link_gbs": 50,
}


@pytest.fixture(autouse=True)
def only_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPUs a test adds from a file are forgotten after it."""
    monkeypatch.setattr(gpus, "_added", [])


def test_every_entry_cites_the_vendor_first() -> None:
    for gpu in CATALOG:
        assert gpu.sources, gpu.name
        host = urlparse(gpu.sources[0]).netloc
        no_datasheet = "publishes no" in gpu.note
        assert host in VENDORS or no_datasheet, (gpu.name, gpu.sources[0])
        assert all(url.startswith("https://") for url in gpu.sources)


@pytest.mark.parametrize(("name", "nvml"), sorted(NEW.items()))
def test_todays_gpus_are_found_by_name_notation_and_device_name(name: str, nvml: str) -> None:
    gpu = find_gpu(nvml)
    assert gpu is not None and gpu.name == name
    assert parse_hardware(f"{gpu.notation}x2") == gpus.Hardware(gpu, 2)
    assert parse_hardware(parse_hardware(f"{gpu.notation}x2").spec).gpu == gpu


@pytest.mark.parametrize("gpu", CATALOG, ids=lambda gpu: gpu.name)
def test_every_gpu_runs_through_the_pre_screen_and_the_performance_model(gpu: GpuSpec) -> None:
    """What reads GPU fields (memory model, perf model, vLLM's batch defaults) takes each one."""
    workload = WorkloadSpec(input_tokens=512, output_tokens=128)
    model = "Qwen/Qwen2.5-7B-Instruct-AWQ"  # 5.3 GiB of weights: fits the smallest of them
    made = estimate(gpus.Hardware(gpu, 1), model, draft="ngram", workload=workload)
    assert made.memory.gpu_total_gib == pytest.approx(gpu.vram_gib)
    assert made.result is not None, made.memory.reason
    assert math.isfinite(made.result.output_tok_s) and made.result.output_tok_s > 0
    served = made.server
    assert sampled_value_refusal(served, gpu) is None


def test_a_bigger_faster_gpu_predicts_more_throughput() -> None:
    workload = WorkloadSpec(input_tokens=512, output_tokens=128)
    speed = {}
    for name in ("4090", "5090", "h100", "b200"):
        made = estimate(parse_hardware(name), "Qwen/Qwen2.5-7B-Instruct", workload=workload)
        assert made.result is not None, made.memory.reason
        speed[name] = made.result.output_tok_s
    assert speed["4090"] < speed["5090"] < speed["h100"] < speed["b200"]


def _file(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "my-gpus.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bandwidth_gbs": -1}, "GPU 1 (RTX 5070 Ti): bandwidth_gbs = -1: Input should be greater"),
        ({"vram_gib": None}, "GPU 1 (RTX 5070 Ti): vram_gib = None:"),
        ({"interconnect": "SLI"}, "interconnect = 'SLI': Input should be 'PCIe', 'NVLink'"),
        ({"bandwith_gbs": 1}, "GPU 1 (RTX 5070 Ti): unknown key 'bandwith_gbs' (keys: name"),
        ({"aliases": ["4090"]}, "RTX 5070 Ti and RTX 4090 both answer to '4090'"),
    ],
)
def test_a_wrong_gpu_file_is_one_line_naming_the_key(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    path = _file(tmp_path, [{**MY_GPU, **change}])
    result = runner.invoke(app, ["hardware", "--gpu-spec", str(path)])
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.startswith(f"error: GPU spec {path}: ") and message in line, line
    assert "\n" not in line and "Traceback" not in result.output


def test_a_missing_key_and_a_file_that_is_not_yaml(tmp_path: Path) -> None:
    missing = {k: v for k, v in MY_GPU.items() if k != "link_gbs"}
    with pytest.raises(ConfigError, match=r"mine: GPU 1 \(RTX 5070 Ti\): 'link_gbs' must be set"):
        read_gpus(yaml.safe_dump(missing), "mine")
    with pytest.raises(ConfigError, match="mine is not valid YAML at line 1"):
        read_gpus("name: [unclosed", "mine")
    result = runner.invoke(app, ["hardware", "--gpu-spec", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "cannot be read (No such file or directory)" in result.stderr


def test_a_gpu_of_your_own_runs_a_study_that_resumes_without_the_file(tmp_path: Path) -> None:
    spec = _file(tmp_path, MY_GPU)  # one mapping is one GPU
    listed = runner.invoke(app, ["hardware", "--gpu-spec", str(spec), "--json"])
    assert any(g["name"] == "RTX 5070 Ti" for g in json.loads(listed.stdout))
    where = ["--studies-dir", str(tmp_path), "--study", "mine", "--confirm-top", "0", "--json"]
    base = ["optimize", "--backend", "sim", "--trials", "2", *where]
    space = ["--space", "qwen2.5-14b-awq-4090x1", "--hardware", "5070tix1"]
    made = runner.invoke(app, [*base, *space, "--gpu-spec", str(spec)])
    assert made.exit_code == 0, made.stderr
    url = f"sqlite:///{tmp_path / 'mine.db'}"
    study = optuna.load_study(study_name="mine", storage=url)
    stored = {
        "gpu": {**MY_GPU, "board_w": None, "idle_w": None, "sources": [], "note": ""},
        "count": 1,
    }
    assert study.user_attrs["space"]["hardware"] == stored
    loaded = stored_space(study)
    assert loaded is not None and loaded.hardware.gpu.name == "RTX 5070 Ti"
    gpus._added.clear()  # a new process: no --gpu-spec, the study carries its GPU
    resumed = runner.invoke(app, base)
    assert resumed.exit_code == 0, resumed.stderr
    assert "resuming study mine (2 trials, adding 2)" in resumed.stderr


class _Probe:
    """NVML as a host with two GPUs of one model shows it (no GPU here)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def device_count(self) -> int:
        return 2

    def name(self, index: int) -> str:
        return self._name

    def memory_total_bytes(self, index: int) -> int:
        return 95830 * 1024**2

    def driver_version(self) -> str:
        return "580.105.06"

    def cuda_driver_version(self) -> int:
        return 13000

    def nvlink_links(self, a: int, b: int) -> int:
        return 4

    def topology_level(self, a: int, b: int) -> int:
        return 30

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("device", "hardware", "spec"),
    [("NVIDIA H100 NVL", "2x H100 NVL", "h100-nvlx2"), ("NVIDIA GeForce RTX 5070 Ti", "", "")],
)
def test_hardware_detect_maps_new_gpus_and_ones_described_in_a_file(
    device: str, hardware: str, spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvml, "open_probe", lambda: _Probe(device))
    args = ["hardware", "detect", "--json"]
    if not hardware:  # not in the catalog: the problem names --gpu-spec; with the file, found
        unknown = json.loads(runner.invoke(app, args).stdout)
        assert unknown["hardware"] is None and "--gpu-spec FILE" in unknown["problem"]
        args += ["--gpu-spec", str(_file(tmp_path, MY_GPU))]
        hardware, spec = "2x RTX 5070 Ti", "5070tix2"
    found = json.loads(runner.invoke(app, args).stdout)
    assert (found["catalog"], found["hardware"]) == (hardware.split("x ", 1)[1], spec)
