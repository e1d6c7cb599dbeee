"""The held-out benchmark on a goodput space (benchmarks/truth.py): a config's true value is the
highest request-rate step its climb passes, as its trial scores it, not its one-request
throughput (which the benchmark once scored a goodput space's studies against)."""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.config.space import builtin_spaces, load_space
from tuner.search.forecast import predicted_goodput
from tuner.search.screen import grid_params

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from truth import config_of, key_of, world_truth
from worlds import SHIPPED


def _small_goodput_space(tmp_path: Path) -> Path:
    """The shipped goodput space, its search cut to a few points (seconds, not minutes)."""
    text = builtin_spaces()["qwen2.5-14b-awq-4090x1-goodput"].read_text()
    small = text[: text.index("search:")] + (
        "search:\n"
        "  draft: [none, Qwen/Qwen2.5-1.5B-Instruct]\n"
        "  num_speculative_tokens: {low: 3, high: 4}\n"
        "  gpu_memory_utilization: {low: 0.80, high: 0.96, step: 0.16}\n"
        "  max_num_batched_tokens: [2048]\n"
    )
    path = tmp_path / "small-goodput.yaml"
    path.write_text(small)
    return path


def test_a_goodput_truth_is_the_climb_its_trial_scores(tmp_path: Path) -> None:
    path = str(_small_goodput_space(tmp_path))
    space = load_space(path)
    _, truth = world_truth((path, SHIPPED))
    rates = set(space.workload.rate_steps)
    for params in grid_params(space):
        config = config_of(space, params)
        value = truth[key_of(config.server, config.client.sampling_temperature)]
        # The product's own forecast of the trial's climb, in the world the prior knows.
        forecast, _ = predicted_goodput(space, config.server, config.client.workload)
        assert value == forecast
    assert {v for v in truth.values() if v} <= rates | {r * 2**0.5 for r in rates}
    assert len(set(truth.values())) > 1  # the climb tells the configs apart
