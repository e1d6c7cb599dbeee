import pytest

from tuner.catalog.gpus import CATALOG, Interconnect, find_gpu, parse_hardware
from tuner.errors import ConfigError


def test_catalog_has_the_gpus_users_run() -> None:
    names = {g.name for g in CATALOG}
    assert {
        "RTX 3090",
        "RTX 4090",
        "L4",
        "L40S",
        "A10G",
        "A100-40GB",
        "A100-80GB",
        "H100-SXM",
        "H200",
    } <= names
    for gpu in CATALOG:  # no entry off by a unit (MiB for GiB, TB/s for GB/s)
        assert 15 < gpu.vram_gib < 300 and 250 < gpu.bandwidth_gbs < 10_000
        assert 60 < gpu.fp16_tflops < 5_000 and 20 < gpu.link_gbs <= 900


@pytest.mark.parametrize(
    ("text", "gpu", "count"),
    [
        ("4090x2", "RTX 4090", 2),
        ("4090x1", "RTX 4090", 1),
        ("4090", "RTX 4090", 1),
        ("H100x8", "H100-SXM", 8),
        ("a100-80gbx4", "A100-80GB", 4),
        ("l40s", "L40S", 1),
    ],
)
def test_parse_hardware(text: str, gpu: str, count: int) -> None:
    hw = parse_hardware(text)
    assert (hw.gpu.name, hw.count) == (gpu, count)
    assert parse_hardware(hw.spec) == hw


def test_nvml_names_resolve() -> None:
    gpu = find_gpu("NVIDIA GeForce RTX 4090")
    assert gpu is not None and gpu.interconnect is Interconnect.PCIE
    h100 = find_gpu("h100-sxm")
    assert h100 is not None and h100.interconnect is Interconnect.NVLINK


@pytest.mark.parametrize("bad", ["9090x2", "4090x0", "", "x2"])
def test_unknown_hardware_names_the_input_and_the_fix(bad: str) -> None:
    with pytest.raises(ConfigError, match="hardware") as info:
        parse_hardware(bad)
    assert repr(bad) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("nvml", "gpu"),
    [
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA H200", "H200"),
    ],
)
def test_nvml_device_names(nvml: str, gpu: str) -> None:
    found = find_gpu(nvml)
    assert found is not None and found.name == gpu
