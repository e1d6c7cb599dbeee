import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.errors import ConfigError
from tuner.study.host import check_host_hardware
from tuner.study.storage import check_parallel_storage
from tuner.study.workers import gpu_slices


def test_gpu_slices_give_each_worker_its_own_gpus() -> None:
    assert gpu_slices(3, 2) == [(0, 1), (2, 3), (4, 5)]


def test_host_hardware_must_match_the_study() -> None:
    study = parse_hardware("4090x2")
    check_host_hardware("s", study, parse_hardware("4090x2"), None)
    check_host_hardware("s", study, None, ["NVIDIA GeForce RTX 4090"] * 2)
    check_host_hardware("s", study, None, None)  # nothing known: trust the user
    with pytest.raises(ConfigError, match="this worker has 1x RTX 4090"):
        check_host_hardware("s", study, parse_hardware("4090x1"), None)
    with pytest.raises(ConfigError, match="NVIDIA H100 80GB HBM3"):
        check_host_hardware("s", study, None, ["NVIDIA H100 80GB HBM3"] * 2)
    with pytest.raises(ConfigError, match="this worker has 1x RTX 4090"):
        check_host_hardware("s", study, None, ["NVIDIA GeForce RTX 4090"])


def test_several_workers_need_postgresql() -> None:
    check_parallel_storage("sqlite:///x.db", 1)
    check_parallel_storage("postgresql+psycopg://u@h/db", 4)
    with pytest.raises(ConfigError, match="PostgreSQL"):
        check_parallel_storage("sqlite:///x.db", 2)
