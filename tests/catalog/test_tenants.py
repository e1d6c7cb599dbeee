"""Other tenants of the study's GPUs as a study start reads them (NVML's stand-in here) and the
study keeps them."""

from __future__ import annotations

import optuna
import pytest

from tests.testbed.gpus import FakeGpus
from tuner.catalog.gpu_state import GpuState
from tuner.catalog.nvml import NoGpuMonitor
from tuner.catalog.tenants import (
    Tenants,
    read_tenants,
    record_tenants,
    stored_tenants,
    tenants_of,
)

DESKTOP, NOTEBOOK = 1873, 5120


def test_the_fullest_gpu_counts_with_the_processes_on_it() -> None:
    states = [
        GpuState(0.0, 0, 0.4, processes=((DESKTOP, 0.4),)),
        GpuState(0.0, 1, 3.2, processes=((DESKTOP, 1.0), (NOTEBOOK, 2.2))),
    ]
    assert tenants_of(states) == Tenants(3.2, (DESKTOP, NOTEBOOK))
    assert tenants_of(states).describe() == "3.2 GiB (pids 1873, 5120)"


def test_the_drivers_own_memory_and_an_unreadable_gpu_are_no_tenant() -> None:
    assert tenants_of([GpuState(0.0, 0, 0.3, processes=())]) == Tenants()
    assert tenants_of(None) == Tenants()
    assert read_tenants(NoGpuMonitor()) == Tenants()


def test_memory_held_where_nvml_lists_no_process_still_counts() -> None:
    # Some containers hide the host's processes from NVML; the memory in use still shows.
    held = tenants_of([GpuState(0.0, 0, 2.0, processes=None)])
    assert held == Tenants(2.0) and held.describe() == "2.0 GiB"


def test_a_stand_in_with_a_foreign_process_reads_as_its_memory() -> None:
    gpus = FakeGpus(count=2, server_gib=0.0, tenants=[(DESKTOP, 2.0)])
    assert read_tenants(gpus) == Tenants(2.0, (DESKTOP,))


def test_the_study_keeps_what_its_start_read() -> None:
    study = optuna.create_study(directions=["maximize"])
    assert stored_tenants(study) == Tenants()  # the simulator, or a study from before
    record_tenants(study, Tenants(2.04, (DESKTOP,)))
    kept = stored_tenants(study)
    assert kept.gib == pytest.approx(2.04) and kept.pids == (DESKTOP,)
