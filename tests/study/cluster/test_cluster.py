"""``spectune optimize --ray`` on a real three-node Ray cluster (head + two GPU workers).

The driver is a real ``spectune optimize`` process on this host, reaching the cluster with Ray
Client on 127.0.0.1; each worker node runs the shipped fake server through the process
backend on the GPUs Ray assigned there. Checked: trials run on both nodes at once, each pair
measured in rounds, and the budget is exact; a study whose hardware no node has is one line;
SIGTERM on the driver leaves no server on any node; a node killed mid-trial fails that trial,
which is retried on the other node, and the budget still holds; a config asked for twice at
once runs on one node; a setup that keeps failing stops the study with the lifecycle's one
message (the executor contract's cases, tests/study/test_executor_contract.py, on Ray).
Every connection seen goes to 127.0.0.1 or the test's own network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.study.cluster.ray_support import WORKERS, Cluster, process_targets
from tests.testbed.docker_host import REPO
from tuner.study.lifecycle import MAX_FAILURES_IN_A_ROW

pytestmark = [pytest.mark.ray, pytest.mark.docker]

FAKE_SERVER = f"{sys.executable} -m tuner.sim.server"
_RUN_S = 240.0


def _space(name: str, sim_speed: float, output_tokens: int) -> dict[str, Any]:
    return {
        "name": name,
        "hardware": "4090x2",
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "server": {
            "max_model_len": 4096,
            "extra_flags": {"sim-speed": sim_speed, "sim-hardware": "4090x2"},
        },
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 5000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 64,
            "output_tokens": output_tokens,
            "concurrency": [1],
            "requests": 3,
            "warmup": 1,
        },
        "search": {
            "draft": ["none", "ngram"],
            "num_speculative_tokens": {"low": 2, "high": 6},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [2048],
            "temperature": {"low": 0.0, "high": 1.0, "step": 0.1},
        },
    }


def _driver(
    cluster: Cluster, tmp_path: Path, space: dict[str, Any], trials: int, *extra: str
) -> subprocess.Popen[str]:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    argv = [
        sys.executable,
        "-m",
        "tuner",
        "optimize",
        "--space",
        str(path),
        "--backend",
        "process",
        "--vllm-command",
        FAKE_SERVER,
        "--ray",
        cluster.address,
        "--parallel",
        "2",
        "--trials",
        str(trials),
        "--studies-dir",
        str(tmp_path),
        "--sampler",
        "random",
        "--confirm-top",
        "0",
        "--ready-timeout",
        "60",
        "--json",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"}
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env)


def _trials(tmp_path: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / name}.db")
    return study.get_trials(deepcopy=False)


def _host(trial: optuna.trial.FrozenTrial) -> str:
    return str(trial.user_attrs["worker"]).split("/")[0]


def _allowed(cluster: Cluster, targets: set[str]) -> set[str]:
    """The targets outside 127.0.0.1 and the test's network (should be none)."""
    return {
        t for t in targets if t != "127.0.0.1" and ipaddress.ip_address(t) not in cluster.subnet
    }


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=_RUN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_parallel_study_runs_on_both_nodes_at_once_within_its_budget(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The best config is confirmed once more on the cluster, on a fresh server there.
    space = _space("both", sim_speed=20, output_tokens=32)
    proc = _driver(cluster, tmp_path, space, 4, "--confirm-top", "1", "--confirm-repeats", "1")
    seen: set[str] = set()
    busy_at_once = False
    try:
        while proc.poll() is None:
            seen |= process_targets(proc.pid)
            for worker in WORKERS:
                seen |= cluster.connection_targets(cluster.host(worker))
            servers = [cluster.processes(w, "tuner.sim.server serve") for w in WORKERS]
            busy_at_once = busy_at_once or all(servers)
            time.sleep(0.2)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["trials"] == 4
    trials = _trials(tmp_path, "both")
    ended = (TrialState.COMPLETE, TrialState.PRUNED)  # measured in rounds, as on one host
    assert len(trials) == 4 and all(t.state in ended for t in trials)  # the budget, exactly
    levels = [level for t in trials for level in t.user_attrs["levels"]]
    assert levels and all(level["stopped"] != "fixed count" for level in levels)
    ran = {_host(t) for t in trials if t.user_attrs.get("duplicate_of") is None}
    assert ran == {cluster.host(w) for w in WORKERS}
    assert busy_at_once  # a server on each node at the same moment
    assert all(t.user_attrs["source"] == "measured" for t in trials)
    study = optuna.load_study(study_name="both", storage=f"sqlite:///{tmp_path / 'both.db'}")
    (confirmed,) = study.user_attrs["confirmed"].values()
    assert [run["status"] for run in confirmed["runs"]] == ["ok"]
    assert study.user_attrs["run"]["backend"] == "process"  # what ran the servers
    assert study.user_attrs["run"]["vllm_version"] == "0.32.0"
    assert "127.0.0.1" in seen  # the driver's Ray Client connection
    assert _allowed(cluster, seen) == set()
    for worker in WORKERS:  # the study's servers are gone with it
        assert cluster.processes(worker, "tuner.sim.server serve") == []
    _confirm_on_the_cluster(cluster, tmp_path)


def _confirm_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """``spectune confirm --ray``: the study's best config measured again on a node's fresh
    server (this host has no GPU for the process backend to use)."""
    argv = [
        *(sys.executable, "-m", "tuner", "confirm", "both", "--backend", "process"),
        *("--vllm-command", FAKE_SERVER, "--ray", cluster.address, "--top", "1"),
        *("--repeats", "2", "--studies-dir", str(tmp_path), "--ready-timeout", "60", "--json"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160"}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env)
    served_on: set[str] = set()
    try:
        while proc.poll() is None:
            for worker in WORKERS:
                if cluster.processes(worker, "tuner.sim.server serve"):
                    served_on.add(cluster.host(worker))
            time.sleep(0.2)
    finally:
        out, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    (confirmed,) = json.loads(out)
    assert [run["status"] for run in confirmed["runs"]] == ["ok", "ok"]
    assert served_on and served_on <= {cluster.host(w) for w in WORKERS}


def test_a_config_handed_to_both_slots_at_once_is_measured_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    # One config: the driver asks for two trials at once (two idle slots), both name it.
    space = _space("one", sim_speed=20, output_tokens=32)
    space["search"] = {**space["search"], "draft": ["none"]}
    del space["search"]["temperature"]
    proc = _driver(cluster, tmp_path, space, 3)
    _, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    trials = _trials(tmp_path, "one")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    (ran,) = [t for t in trials if t.user_attrs.get("duplicate_of") is None]
    assert [t.user_attrs["restarted"] for t in trials].count(True) == 1  # one server, one node
    others = [t for t in trials if t is not ran]
    assert all(t.user_attrs["duplicate_of"] == ran.number for t in others)
    assert all(t.values == ran.values for t in others)


def test_a_setup_that_keeps_failing_stops_the_study_with_one_message(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Every start fails on every node; failed trials use none of the budget, so only the
    # lifecycle's count stops the study.
    space = _space("failing", sim_speed=20, output_tokens=32)
    space["server"]["extra_flags"]["sim-fault"] = "crash-at-start"
    proc = _driver(cluster, tmp_path, space, 6)
    out, err = _finish(proc)
    assert proc.returncode == 2, err[-3000:]
    message = json.loads(out)["error"]
    assert message.startswith(f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: ")
    assert "crash-at-start" in message
    trials = _trials(tmp_path, "failing")
    assert {t.state for t in trials} == {TrialState.FAIL}  # none counted toward the six
    # The count stops it; the other slot's trial, in flight then, is cancelled with it.
    assert MAX_FAILURES_IN_A_ROW <= len(trials) <= MAX_FAILURES_IN_A_ROW + 1
    for worker in WORKERS:
        assert cluster.processes(worker, "tuner.sim.server serve") == []


def test_a_study_whose_hardware_no_node_has_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    space = {**_space("h200", sim_speed=20, output_tokens=32), "hardware": "h200x1"}
    proc = _driver(cluster, tmp_path, space, 2)
    _, err = _finish(proc)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "no node of the Ray cluster at ray://127.0.0.1:" in lines[0]
    assert "has 1x H200 for the study" in lines[0]
    assert f"{cluster.host('w1')}: 2x RTX 4090 (declared)" in lines[0]
    storage = f"sqlite:///{tmp_path / 'h200.db'}"
    assert optuna.get_all_study_names(storage) == []  # refused before anything was stored


def _wait_for_servers(
    cluster: Cluster, proc: subprocess.Popen[str], workers: tuple[str, ...]
) -> None:
    deadline = time.monotonic() + _RUN_S
    while not all(cluster.processes(w, "tuner.sim.server serve") for w in workers):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_sigterm_on_the_driver_stops_the_servers_on_every_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    proc = _driver(cluster, tmp_path, _space("stopped", sim_speed=1, output_tokens=256), 6)
    try:
        _wait_for_servers(cluster, proc, WORKERS)
        proc.send_signal(signal.SIGTERM)
    finally:
        _finish(proc)
    assert proc.returncode == 128 + signal.SIGTERM
    for worker in WORKERS:
        assert cluster.processes(worker, "tuner.sim.server serve") == []
    states = [t.state for t in _trials(tmp_path, "stopped")]
    assert TrialState.RUNNING not in states and TrialState.FAIL in states


def test_a_node_lost_mid_trial_is_retried_on_the_other_and_the_budget_holds(
    cluster: Cluster, tmp_path: Path
) -> None:
    proc = _driver(cluster, tmp_path, _space("lost", sim_speed=5, output_tokens=64), 4)
    try:
        _wait_for_servers(cluster, proc, ("w1",))
        cluster.container(cluster.host("w1")).kill()  # the node, mid-trial
    finally:
        _, err = _finish(proc)
    assert proc.returncode == 0, err[-3000:]
    trials = _trials(tmp_path, "lost")
    failed = [t for t in trials if t.state is TrialState.FAIL]
    ended = (TrialState.COMPLETE, TrialState.PRUNED)  # measured in rounds: some pruned
    complete = [t for t in trials if t.state in ended]
    assert len(complete) == 4 and len(failed) == 1  # the budget holds; nothing else failed
    (lost,) = failed
    assert _host(lost) == cluster.host("w1")
    assert "was lost during trial" in lost.user_attrs["failure"]
    (retry,) = [t for t in complete if t.system_attrs.get("failed_trial") == lost.number]
    assert retry.params == lost.params  # nothing lost: the same config ran again
    assert _host(retry) == cluster.host("w2")
    assert cluster.processes("w2", "tuner.sim.server serve") == []
