"""Which nodes a study's trials may use: declared or NVML-named GPUs, spread, one-line refusals.

Pure functions over what ``ray.nodes()`` returns: no cluster needed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.errors import ConfigError
from tuner.study.cluster import RayOptions, check_ray_options
from tuner.study.cluster.nodes import plan_slots, read_nodes, require_matching


def _node(node_id: str, host: str, alive: bool = True, **resources: float) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerHostname": host, "Alive": alive, "Resources": resources}


def _no_nvml(ids: list[str]) -> Mapping[str, list[str] | None]:
    return dict.fromkeys(ids)


CLUSTER = [
    _node("h", "head", CPU=4),
    _node("a", "gpu-a", GPU=2, spectune_gpu_4090=2),
    _node("b", "gpu-b", GPU=4, spectune_gpu_rtx4090=4),
    _node("c", "gpu-c", GPU=8),  # no declaration: NVML names its GPUs
    _node("d", "gpu-d", GPU=2),  # no declaration, no NVML
    _node("x", "gone", alive=False, GPU=2, spectune_gpu_4090=2),
]


def _nvml(ids: list[str]) -> Mapping[str, list[str] | None]:
    return {i: (["NVIDIA H100 80GB HBM3"] * 8 if i == "c" else None) for i in ids}


def test_gpus_are_declared_or_named_by_nvml_on_the_node() -> None:
    asked: list[list[str]] = []

    def detect(ids: list[str]) -> Mapping[str, list[str] | None]:
        asked.append(ids)
        return _nvml(ids)

    nodes = {n.host: n for n in read_nodes(CLUSTER, detect)}
    assert asked == [["c", "d"]]  # only undeclared nodes with GPUs are asked
    assert "gone" not in nodes
    assert (nodes["gpu-a"].model, nodes["gpu-a"].how) == (parse_hardware("4090").gpu, "declared")
    assert nodes["gpu-b"].gpus == 4 and nodes["gpu-b"].model == parse_hardware("4090").gpu
    assert (nodes["gpu-c"].model, nodes["gpu-c"].how) == (parse_hardware("h100").gpu, "nvml")
    assert nodes["gpu-d"].model is None and nodes["gpu-d"].label == "gpu-d: 2 GPUs of unknown model"
    assert nodes["head"].label == "head: no GPU"


def test_only_matching_nodes_take_trials_spread_least_used_first() -> None:
    nodes = read_nodes(CLUSTER, _nvml)
    tp2 = parse_hardware("4090x2")
    matching = require_matching(nodes, tp2, "ray://x")
    assert [n.host for n in matching] == ["gpu-a", "gpu-b"]
    assert [n.slots(tp2) for n in matching] == [1, 2]
    # Spread: one on each before a second on gpu-b; never more than the GPUs allow.
    assert plan_slots(matching, tp2, 5, Counter()) == ["a", "b", "b"]
    assert plan_slots(matching, tp2, 2, Counter({"a": 1})) == ["b", "b"]
    assert plan_slots(matching, parse_hardware("4090x4"), 3, Counter()) == ["b"]
    h100 = parse_hardware("h100x8")
    assert [n.host for n in require_matching(nodes, h100, "ray://x")] == ["gpu-c"]


def test_a_study_whose_hardware_no_node_has_is_one_line() -> None:
    nodes = read_nodes(CLUSTER, _no_nvml)
    with pytest.raises(ConfigError) as error:
        require_matching(nodes, parse_hardware("h200x1"), "ray://head:10001")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("no node of the Ray cluster at ray://head:10001 has 1x H200")
    assert "gpu-a: 2x RTX 4090 (declared)" in message
    assert "gpu-c: 8 GPUs of unknown model" in message
    assert "--resources '{\"spectune_gpu_h200\": N}'" in message


def test_bad_ray_options_are_refused_before_anything_connects() -> None:
    with pytest.raises(ConfigError, match=r"--parallel 0: run at least 1 trial at a time"):
        check_ray_options(RayOptions("auto", parallel=0))
    with pytest.raises(ConfigError, match=r"--workers 2 with --ray: use --parallel 2 instead"):
        check_ray_options(RayOptions("auto"), workers=2)
    with pytest.raises(ConfigError, match=r"--ray '': give the cluster"):
        check_ray_options(RayOptions(" "))
