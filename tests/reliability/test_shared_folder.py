"""Runs and workers sharing one studies folder never step on each other's files."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.study.paths import write_whole
from tuner.study.storage import check_writable

_PROCESSES, _CALLS = 4, 300


def _check_many(folder: Path, barrier: Barrier, failures: multiprocessing.Queue[str]) -> None:
    barrier.wait()  # every process starts checking at once
    for _ in range(_CALLS):
        try:
            check_writable(folder)
        except ConfigError as exc:
            failures.put(str(exc))
            return


def _write_many(path: Path, mark: str, barrier: Barrier) -> None:
    barrier.wait()
    for _ in range(_CALLS):
        write_whole(path, mark * 20_000)


def _run_together(target: Callable[..., None], args: list[tuple[object, ...]]) -> None:
    processes = [multiprocessing.get_context("fork").Process(target=target, args=a) for a in args]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0


@pytest.mark.timeout(120)
def test_write_checks_at_once_never_fail(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier, failures = context.Barrier(_PROCESSES), context.Queue()
    _run_together(_check_many, [(tmp_path, barrier, failures)] * _PROCESSES)
    assert failures.empty(), failures.get()
    assert list(tmp_path.iterdir()) == []  # no probe left behind


@pytest.mark.timeout(120)
def test_files_written_at_once_are_whole(tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    barrier = multiprocessing.get_context("fork").Barrier(_PROCESSES)
    _run_together(_write_many, [(best, mark, barrier) for mark in "abcd"[:_PROCESSES]])
    text = best.read_text()
    assert len(text) == 20_000 and len(set(text)) == 1  # one writer's file, not a mix
    assert [p.name for p in tmp_path.iterdir()] == ["best.yaml"]
