"""Proof on real data: the twin fitted on a study's first trials predicts its later ones better.

Four real ``vllm serve`` starts (CPU build, the test bed's tiny models): no speculation, ngram
at K=2 and a draft model at K=3 first, then ngram at K=4. The shipped simulator knows nothing
of a CPU (it predicts the tiny model on the space's GPU); the twin fitted to the first three
trials must predict the fourth trial's throughput with a smaller error than the shipped model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from testbed import TinyModels, vllm_command, vllm_env

from tuner.catalog.models import load_model
from tuner.config.space import space_from_dict
from tuner.config.trial import load_draft, server_from_dict
from tuner.sim.engine import predict
from tuner.sim.twin import TwinPhysics
from tuner.sim.twin.fit import FittedTwin, fit
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import make_sampler, open_study
from tuner.study.twin_steer import observations, stored_twin
from tuner.trial.backends import BackendOptions

pytestmark = pytest.mark.vllm


def _space(models: TinyModels) -> dict[str, Any]:
    return {
        "name": "tiny-twin",
        "hardware": "4090x1",
        "target": str(models.target),
        "server": {
            "max_model_len": 512,
            "extra_flags": {"enforce-eager": True, "kv-cache-memory-bytes": "64M"},
        },
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 60000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 48,
            "output_tokens": 32,
            "concurrency": [1],
            "requests": 3,
            "warmup": 1,
        },
        "search": {
            "draft": ["none", "ngram", str(models.draft)],
            "num_speculative_tokens": {"low": 2, "high": 4},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [512],
            "temperature": 0.0,
        },
    }


@pytest.fixture
def real_vllm_env(tmp_path: Path, vllm_cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in vllm_env(tmp_path / "run", vllm_cache_root).items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("real_vllm_env")
def test_fitted_twin_predicts_later_trials_better_than_the_shipped_model(
    tiny_models: TinyModels, tmp_path: Path
) -> None:
    raw = _space(tiny_models)
    space = space_from_dict(raw)
    storage = open_storage(default_storage("twin", tmp_path))
    study, _ = open_study("twin", storage, space, make_sampler("spectune", 0))
    plan = [("none", 0), ("ngram", 2), (str(tiny_models.draft), 3), ("ngram", 4)]
    for draft, k in plan:
        params: dict[str, Any] = {"draft": draft}
        if k:
            params["num_speculative_tokens"] = k
        study.enqueue_trial(params)
    options = BackendOptions(study="", vllm_command=vllm_command(), ready_timeout_s=300)
    request = OptimizeRequest(
        "twin", space, "process", 4, tmp_path, backend_options=options, confirm_top=0
    )
    optimize(request)

    trials = optuna.load_study(study_name="twin", storage=storage).get_trials()
    done = [t for t in trials if t.state is TrialState.COMPLETE]
    assert [(t.params["draft"], t.params.get("num_speculative_tokens", 0)) for t in done] == plan
    assert all(t.user_attrs["status"] == "ok" for t in done)
    assert stored_twin(optuna.load_study(study_name="twin", storage=storage)) is not None

    twin = fit(space.hardware, observations(space, done[:3]), FittedTwin())
    later = done[3]
    server = server_from_dict(later.user_attrs["server"])
    args = (space.hardware, load_model(server.model), load_draft(server), server, 0.0)
    shipped = predict(*args, space.workload, 1).output_tok_s
    fitted = predict(*args, space.workload, 1, TwinPhysics(twin.params)).output_tok_s
    measured = float(later.values[0])
    shipped_error, fitted_error = abs(shipped / measured - 1), abs(fitted / measured - 1)
    assert fitted_error < shipped_error, (measured, shipped, fitted)
    assert fitted_error < 0.5  # within a factor the search can use, not merely less wrong
