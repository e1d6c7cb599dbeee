"""``spectune optimize`` as a library call: open the study, run trials, export the best."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.backends import Backend, backend_factory
from tuner.errors import ConfigError
from tuner.export import pick_trial, vllm_config_yaml
from tuner.recommend import TrialView, pareto_front, recommend, trial_view
from tuner.space import SearchSpace
from tuner.storage import default_storage, open_storage
from tuner.study import OnTrial, StudyOptions, extend_budget, make_sampler, open_study, run_trials

__all__ = ["OptimizeRequest", "OptimizeResult", "optimize", "study_dir"]


@dataclass(frozen=True)
class OptimizeRequest:
    study: str
    space: SearchSpace | None  # None: resume with the stored space
    backend: str
    trials: int
    studies_dir: Path
    storage: str | None = None
    sampler: str = "tpe"
    seed: int = 0


@dataclass(frozen=True)
class OptimizeResult:
    study: str
    storage: str
    space: SearchSpace
    trials: int  # trials in the study now, all runs together
    pareto: list[TrialView]
    recommended: TrialView | None
    best_yaml: Path | None


def study_dir(studies_dir: Path, study: str) -> Path:
    return studies_dir / study


def optimize(
    request: OptimizeRequest, on_trial: OnTrial | None = None, backend: Backend | None = None
) -> OptimizeResult:
    """Runs ``request.trials`` more trials and writes ``<studies>/<study>/best.yaml``."""
    if request.trials < 1:
        raise ConfigError(f"--trials {request.trials}: ask for at least 1 trial")
    sampler = make_sampler(request.sampler, request.seed)
    build_backend = backend_factory(request.backend)
    storage_url = request.storage or default_storage(request.study, request.studies_dir)
    storage = open_storage(storage_url)
    study, space = open_study(request.study, storage, request.space, sampler)
    folder = study_dir(request.studies_dir, request.study)
    folder.mkdir(parents=True, exist_ok=True)
    backend = backend or build_backend(space, request.seed)
    extend_budget(study, request.trials)
    options = StudyOptions(request.trials, request.seed, folder / "logs", space.ttft_limit_ms)
    run_trials(study, space, backend, options, on_trial)
    best = recommend(study)
    best_yaml = None
    if best is not None:
        best_yaml = folder / "best.yaml"
        best_yaml.write_text(vllm_config_yaml(study, space, pick_trial(study)))
    return OptimizeResult(
        study=request.study,
        storage=storage_url,
        space=space,
        trials=len(study.trials),
        pareto=[trial_view(t) for t in pareto_front(study)],
        recommended=None if best is None else trial_view(best),
        best_yaml=best_yaml,
    )
