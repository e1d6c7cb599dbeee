"""`import tuner`: the few names a Python program needs to run a study, estimate a config or
read results, each the library's own object, loaded on first use."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tuner
from tuner.analysis import picks
from tuner.errors import IncompatibleDraftError
from tuner.sim import estimate
from tuner.study import optimize, study

PUBLIC = [
    "Candidate",
    "ConfigError",
    "Estimate",
    "Exported",
    "Hardware",
    "ModelSpec",
    "OptimizeRequest",
    "OptimizeResult",
    "SearchSpace",
    "SpectuneError",
    "StudySummary",
    "TrialRecord",
    "WorkloadSpec",
    "__version__",
    "estimate",
    "export",
    "list_studies",
    "load_model",
    "load_space",
    "open_existing",
    "optimize",
    "pareto_front",
    "parse_hardware",
    "recommend",
]


def test_the_public_names_are_the_librarys_own_objects() -> None:
    assert tuner.__all__ == PUBLIC
    assert set(PUBLIC) <= set(dir(tuner))
    for name in PUBLIC:
        assert getattr(tuner, name) is not None, name
    assert tuner.optimize is optimize.optimize and tuner.OptimizeRequest is optimize.OptimizeRequest
    assert tuner.open_existing is study.open_existing and tuner.recommend is picks.recommend
    assert tuner.estimate is estimate.estimate
    with pytest.raises(AttributeError, match="no attribute 'optimise'"):
        _ = tuner.optimise


def test_a_config_is_estimated_on_the_simulator_through_the_public_names() -> None:
    hardware = tuner.parse_hardware("4090x2")
    workload = tuner.WorkloadSpec(concurrency=(1, 8))
    guess = tuner.estimate(
        hardware,
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        draft="Qwen/Qwen2.5-0.5B-Instruct",
        workload=workload,
    )
    assert isinstance(guess, tuner.Estimate) and isinstance(hardware, tuner.Hardware)
    assert guess.memory.fits and guess.result is not None
    assert guess.result.output_tok_s > 0
    assert tuner.load_model("Qwen/Qwen2.5-0.5B-Instruct").vocab == 151936
    with pytest.raises(tuner.SpectuneError):  # a Llama draft cannot serve a Qwen target
        tuner.estimate(
            hardware,
            "Qwen/Qwen2.5-32B-Instruct-AWQ",
            draft="meta-llama/Llama-3.2-1B-Instruct",
            workload=workload,
        )
    assert issubclass(IncompatibleDraftError, tuner.SpectuneError)


def test_importing_tuner_loads_none_of_them() -> None:
    script = (
        "import json, sys, tuner\n"
        "print(json.dumps([m for m in ('optuna', 'sqlalchemy', 'tuner.sim.estimate') "
        "if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []
