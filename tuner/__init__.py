"""spectune: autotune vLLM speculative-decoding serving configs with Optuna.

The names a Python program needs, like Optuna's top level; everything else is inside the
packages and may change::

    from pathlib import Path

    import tuner

    # Predict one config on the simulator (nothing is launched).
    guess = tuner.estimate(
        tuner.parse_hardware("4090x2"),
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        draft="Qwen/Qwen2.5-0.5B-Instruct",
        workload=tuner.WorkloadSpec(concurrency=(1, 8)),
    )

    # Run a study, then read it back.
    space = tuner.load_space("default")
    result = tuner.optimize(
        tuner.OptimizeRequest(study="demo", space=space, backend="sim", trials=20,
                              studies_dir=Path("studies"))
    )
    print(result.best_yaml)                # studies/demo/best.yaml, as spectune writes it
    study, space = tuner.open_existing("demo", result.storage)
    best = tuner.recommend(study)          # a Candidate, or None when nothing was feasible
    print(tuner.export(study, space).text)  # vllm serve --config YAML

Each name is imported on first use (PEP 562): ``import tuner``, and ``spectune --help`` with
it, load neither Optuna nor the simulator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.analysis.picks import Candidate, pareto_front, recommend
    from tuner.catalog.gpus import Hardware, parse_hardware
    from tuner.catalog.models import ModelSpec, load_model
    from tuner.config.space import SearchSpace, load_space
    from tuner.config.workload import WorkloadSpec
    from tuner.errors import ConfigError, SpectuneError
    from tuner.export.vllm import Exported, export
    from tuner.sim.estimate import Estimate, estimate
    from tuner.study.listing import StudySummary, list_studies
    from tuner.study.optimize import OptimizeRequest, OptimizeResult, optimize
    from tuner.study.study import open_existing
    from tuner.trial.record import TrialRecord

__version__ = "0.1.0"

# Each public name and the module it lives in.
_HOMES = {
    "Candidate": "tuner.analysis.picks",
    "pareto_front": "tuner.analysis.picks",
    "recommend": "tuner.analysis.picks",
    "Hardware": "tuner.catalog.gpus",
    "parse_hardware": "tuner.catalog.gpus",
    "ModelSpec": "tuner.catalog.models",
    "load_model": "tuner.catalog.models",
    "SearchSpace": "tuner.config.space",
    "load_space": "tuner.config.space",
    "WorkloadSpec": "tuner.config.workload",
    "ConfigError": "tuner.errors",
    "SpectuneError": "tuner.errors",
    "Exported": "tuner.export.vllm",
    "export": "tuner.export.vllm",
    "Estimate": "tuner.sim.estimate",
    "estimate": "tuner.sim.estimate",
    "StudySummary": "tuner.study.listing",
    "list_studies": "tuner.study.listing",
    "OptimizeRequest": "tuner.study.optimize",
    "OptimizeResult": "tuner.study.optimize",
    "optimize": "tuner.study.optimize",
    "open_existing": "tuner.study.study",
    "TrialRecord": "tuner.trial.record",
}

__all__ = [
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
