"""A real study against real ``vllm serve`` (CPU build), through the process backend.

Two trials (ngram at K=2, a draft model at K=3) restart the server between them and read the
spec-decode counters from vLLM's own /metrics; one more, after the ngram trial, changes only the
temperature and must reuse its server; no server is left once the study ends; the twin is
fitted from the real measurements; what vLLM says it ran is read from its log. (This is also
the backend contract's case on real vLLM.)

What is tested elsewhere on real vLLM, so not started again here: the exported best.yaml under
``vllm serve --config`` and ``spectune bench`` on it (tests/results/test_results_vllm.py), vLLM
without speculation in a container (tests/docker/test_docker_vllm.py); a KV cache too small is
classified from the real build's own log (tests/launch/test_failures.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from testbed import TinyModels, vllm_command, vllm_env

from tuner.config.space import space_from_dict
from tuner.launch.served import ServedFacts
from tuner.sim.twin.fit import FittedTwin
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import make_sampler, open_study
from tuner.study.twin_steer import stored_twin
from tuner.trial.backends import BackendOptions

pytestmark = pytest.mark.vllm

OUTPUT_TOKENS = 24
REQUESTS = 3
MAX_MODEL_LEN = 512


def _space(models: TinyModels) -> dict[str, Any]:
    return {
        "name": "tiny",
        "hardware": "4090x1",  # the pre-screen sizes these tiny models against one 4090
        "target": str(models.target),
        "server": {
            "max_model_len": MAX_MODEL_LEN,
            "extra_flags": {"enforce-eager": True, "kv-cache-memory-bytes": "64M"},
        },
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 60000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 48,
            "output_tokens": OUTPUT_TOKENS,
            "concurrency": [1],
            "requests": REQUESTS,
            "warmup": 1,
        },
        "search": {
            "draft": ["none", "ngram", str(models.draft)],
            "num_speculative_tokens": {"low": 2, "high": 4},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [512],
            "temperature": {"low": 0.0, "high": 0.5, "step": 0.5},
        },
    }


@pytest.fixture
def real_vllm_env(tmp_path: Path, vllm_cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in vllm_env(tmp_path / "run", vllm_cache_root).items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("real_vllm_env")
def test_a_study_on_real_vllm_measures_every_method_and_fits_its_twin(
    tiny_models: TinyModels, tmp_path: Path
) -> None:
    space = space_from_dict(_space(tiny_models))
    storage = open_storage(default_storage("tiny", tmp_path))
    study, _ = open_study("tiny", storage, space, make_sampler("spectune", 0))
    plan = [("ngram", 2), ("ngram", 2), (str(tiny_models.draft), 3)]
    temperatures = [0.0, 0.5, 0.0]  # the second: a request-side change only
    for (draft, k), temperature in zip(plan, temperatures, strict=True):
        params = {"draft": draft, "temperature": temperature}
        study.enqueue_trial({**params, **({"num_speculative_tokens": k} if k else {})})
    options = BackendOptions(study="", vllm_command=vllm_command(), ready_timeout_s=300)
    # No confirmation runs: each would be one more real start (about 30 s on 2 cores); the
    # confirmation path itself is tested on the simulator and the fake server.
    request = OptimizeRequest(
        "tiny", space, "process", len(plan), tmp_path, backend_options=options, confirm_top=0
    )
    result = optimize(request)

    done = optuna.load_study(study_name="tiny", storage=storage).get_trials()
    assert [t.state for t in done] == [TrialState.COMPLETE] * len(plan)
    assert [(t.params["draft"], t.params.get("num_speculative_tokens", 0)) for t in done] == plan
    assert [t.user_attrs["restarted"] for t in done] == [True, False, True]
    assert _servers_of(tiny_models.target) == []  # (children: the contract suite's fake server)
    assert all(t.user_attrs["source"] == "measured" for t in done)
    assert all(t.user_attrs["status"] == "ok" for t in done)
    summaries = [t.user_attrs["summary"] for t in done]
    assert all(s["acceptance_rate"] is not None for s in summaries)
    assert summaries[0]["acceptance_rate"] > 0  # ngram on code prompts finds its n-grams
    for summary in summaries:
        assert summary["output_tokens"] == REQUESTS * OUTPUT_TOKENS and summary["errors"] == 0
    logs = [(tmp_path / "tiny" / "logs" / f"trial-{t.number}.log").exists() for t in done]
    assert logs == [True, False, True]  # the second ran on the first's server
    assert result.recommended is not None
    # What vLLM's CPU build says it ran (it names no attention backend: platforms/cpu.py).
    served = [ServedFacts.from_dict(t.user_attrs["served"]) for t in done]
    assert all(s.device == "cpu" and s.chunked_prefill is not None for s in served)
    assert all(s.kv_cache_tokens and s.kv_cache_tokens >= MAX_MODEL_LEN for s in served)

    # The twin is fitted from these real measurements after every trial. How well it then
    # predicts a later real trial is not asserted: on this CPU, fitted on three trials of three
    # requests, it missed a fourth by 20 to 50 % (no better than the shipped model, which
    # lands near the CPU by chance). Its gain is judged on held-out worlds
    # (benchmarks/search_efficiency.py).
    twin = stored_twin(optuna.load_study(study_name="tiny", storage=storage))
    assert twin is not None and twin.observations >= 3
    assert twin.params != FittedTwin().params  # real CPU data moved it off the shipped model


def _servers_of(model: Path) -> list[int]:
    """Processes of this host whose command line names ``model`` (a `vllm serve` of it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # it ended while we looked
            continue
        if str(model).encode() in argv:
            found.append(int(cmdline.parent.name))
    return found
