"""The held-out benchmark on a traffic mix (benchmarks/search_efficiency.py --mixed): each
world's optimum is scored on the same mix as the trials, and the runs it shares are exact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tuner.catalog.models import load_model
from tuner.config.space import load_space
from tuner.search.screen import Screen, grid_params
from tuner.sim.acceptance import shipped_rates
from tuner.sim.virtual_time import predict
from tuner.trial.scoring import Limits, score

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from search_efficiency import MIXED_SPACE_FILE, main
from truth import config_of, key_of, run_key, world_truth
from worlds import SHIPPED, WORLDS

TIGHT = next(w for w in WORLDS if w.name == "memory +1.1 GiB")


def _small_mixed_space(tmp_path: Path) -> Path:
    """The pinned mixed space, its search cut to a few points (seconds, not minutes)."""
    text = MIXED_SPACE_FILE.read_text()
    search = text.index("search:")
    small = text[:search] + (
        "search:\n"
        "  draft: [none, Qwen/Qwen2.5-0.5B-Instruct]\n"
        "  num_speculative_tokens: {low: 2, high: 3}\n"
        "  gpu_memory_utilization: {low: 0.80, high: 0.96, step: 0.16}\n"
        "  max_num_batched_tokens: [2048]\n"
    )
    path = tmp_path / "small-mixed.yaml"
    path.write_text(small.replace("requests: 32", "requests: 12"))
    return path


def test_the_pinned_space_scores_the_shipped_mix() -> None:
    space = load_space(str(MIXED_SPACE_FILE))
    default = load_space("default")
    assert space.workload.load_profile == default.workload.load_profile
    assert space.workload.temperature_mix == default.workload.temperature_mix
    assert len(space.workload.conditions) == 6


def test_truth_is_the_trials_score_on_every_pair(tmp_path: Path) -> None:
    """Each grid point's true value is what scoring the trial on the whole mix gives, from a
    noise-free run at each (level, temperature); the runs the truth shares change nothing."""
    path = str(_small_mixed_space(tmp_path))
    space = load_space(path)
    name, truth = world_truth((path, TIGHT))
    assert name == TIGHT.name
    points = list(grid_params(space))
    assert len(truth) == len(points) == 6
    hardware = TIGHT.hardware(space.hardware)
    limits = Limits.of(space)
    for params in points:
        config = config_of(space, params)
        key = key_of(config.server, config.client.sampling_temperature)
        draft = space.draft_model(str(params["draft"]))
        memory = TIGHT.memory(hardware, space.target, draft, config.server, version=space.version)
        if not memory.fits:
            assert truth[key] == 0.0
            continue
        workload = config.client.workload
        results = [
            predict(
                hardware,
                space.target,
                draft,
                config.server,
                c.sampling_temperature,
                workload,
                c.concurrency,
                physics=TIGHT,
                version=space.version,
            )
            for c in workload.conditions
        ]
        scored = score(results, limits, weights=[c.weight for c in workload.conditions])
        expected = scored.values[0] if scored.feasible else 0.0
        assert truth[key] == pytest.approx(expected, rel=1e-9)
        # The mix is what is scored: its value is not the one-request speed.
        assert expected != pytest.approx(results[0].output_tok_s, rel=1e-3)
    assert max(truth.values()) > 0


def test_runs_with_ample_cache_are_shared_and_equal() -> None:
    """At 32 requests in flight two caches that both hold every request give the same run;
    one that does not is keyed apart (the benchmark simulates each key once)."""
    space = load_space(str(MIXED_SPACE_FILE))
    hardware = SHIPPED.hardware(space.hardware)
    draft = load_model("Qwen/Qwen2.5-0.5B-Instruct")
    params = {"draft": draft.hf_id, "num_speculative_tokens": 3, "max_num_batched_tokens": 2048}
    workload = config_of(space, {**params, "gpu_memory_utilization": 0.9}).client.workload
    busiest = max(workload.conditions, key=lambda c: c.concurrency)
    runs: dict[object, list[tuple[float, float | None]]] = {}
    for util in (0.84, 0.9, 0.96):
        server = config_of(space, {**params, "gpu_memory_utilization": util}).server
        memory = SHIPPED.memory(hardware, space.target, draft, server)
        result = predict(
            hardware,
            space.target,
            draft,
            server,
            busiest.sampling_temperature,
            workload,
            busiest.concurrency,
            physics=SHIPPED,
        )
        key = run_key(server, workload, busiest, memory.kv_tokens)
        runs.setdefault(key, []).append((result.output_tok_s, result.ttft_ms(95)))
    shared = [values for values in runs.values() if len(values) > 1]
    assert shared, "no two capacities shared a run: the key holds back nothing"
    for values in shared:
        assert all(v == values[0] for v in values)
    # A cache too small for every request in flight is keyed by its size.
    server = config_of(space, {**params, "gpu_memory_utilization": 0.9}).server
    assert run_key(server, workload, busiest, 4096) != run_key(server, workload, busiest, 10**7)


def test_mixed_takes_no_other_space(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--mixed", "--space", "default"])
    assert exited.value.code == 2
    assert "--mixed tunes its own space" in capsys.readouterr().err


def test_the_shipped_world_is_the_shipped_simulator_for_every_method_and_option() -> None:
    """A held-out world changes what its note says and nothing else: on the 2026 space (DFlash,
    an EAGLE-3 head, a draft model, suffix, prompt lookup, each verification and drafting
    option), the shipped world's acceptance is the shipped model's, position by position."""
    space = load_space("qwen3-coder-30b-fp8-4090x2-2026")
    screen = Screen(space)
    decay = next(w for w in WORLDS if w.name == "acceptance decay")
    for arm in screen.arms:
        if arm.spec is None:
            continue
        draft = space.draft_model(arm.draft)
        args = (space.target, draft, arm.spec.method, "code", 0.7, arm.k)
        shipped = shipped_rates(*args, speculative=arm.spec)
        assert SHIPPED.position_rates(*args, speculative=arm.spec) == shipped
        changed = decay.position_rates(*args, speculative=arm.spec)
        assert changed[0] == shipped[0]  # the first position as shipped, the rest decay faster
        assert all(c <= s for c, s in zip(changed, shipped, strict=True))
