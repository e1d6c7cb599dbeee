"""Writes a trial's server config as the YAML that ``vllm serve --config`` reads.

Keys are vLLM flag names; ``speculative-config`` is a nested mapping where the study's vLLM
version accepts one. A comment header says which study and trial it came from, the metrics and
whether they were measured or simulated. Secrets never enter: only the ServerConfig is written.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import optuna
import yaml

from tuner.errors import ConfigError
from tuner.recommend import TrialView, recommend, trial_view
from tuner.space import SearchSpace
from tuner.vllm_args import server_yaml

__all__ = ["pick_trial", "vllm_config_yaml"]


def pick_trial(study: optuna.Study, trial_number: int | None = None) -> TrialView:
    """The recommended trial, or a given one; ConfigError if there is nothing to export."""
    if trial_number is not None:
        try:
            trial = study.trials[trial_number]
        except IndexError:
            raise ConfigError(
                f"study {study.study_name!r} has no trial {trial_number}: it has "
                f"{len(study.trials)} trials (numbers 0..{len(study.trials) - 1})"
            ) from None
        if trial.values is None or "server" not in trial.user_attrs:
            raise ConfigError(f"trial {trial_number} did not complete: pick a completed trial")
        return trial_view(trial)
    best = recommend(study)
    if best is None:
        raise ConfigError(
            f"study {study.study_name!r} has no feasible trial yet: run more trials with "
            f"spectune optimize --study {study.study_name}, or relax --slo-ttft-ms"
        )
    return trial_view(best)


def _fmt(value: Any, unit: str = "", scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{float(value) * scale:.1f}{unit}"


def vllm_config_yaml(
    study: optuna.Study, space: SearchSpace, view: TrialView, today: dt.date | None = None
) -> str:
    """The exported file's text: provenance header, then the vLLM config."""
    version = space.version
    body = yaml.safe_dump(server_yaml(view.server, version), sort_keys=False)
    s = view.summary
    source = view.source
    header = [
        f"# spectune export: study {study.study_name}, trial {view.number}",
        f"# target {space.target.hf_id} on {space.hardware.label}, vLLM {version} "
        f"({space.vllm_image})",
        f"# {source}: output {_fmt(view.output_tok_s)} tok/s, "
        f"p95 TTFT {_fmt(view.p95_ttft_ms)} ms, "
        f"draft acceptance {_fmt(s.get('acceptance_rate'), ' %', 100.0)}",
        f"# workload {space.workload.prompt_set}, concurrency {s.get('concurrency', '?')}; "
        f"send temperature {view.temperature} with each request (request-side, not a flag)",
        f"# exported {(today or dt.date.today()).isoformat()}; use: vllm serve --config FILE",
    ]
    return "\n".join(header) + "\n" + body
