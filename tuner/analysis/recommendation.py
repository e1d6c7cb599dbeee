"""The answer a study gives: the recommended config, what it beats, and how to serve it.

The report's headline, the export and the CLI's closing lines all read it from here, so they
print the same config with the same numbers (:class:`~tuner.analysis.estimates.Numbers`). What
it beats is the best feasible config of every other method the study tried, ``none`` (no
speculation) first among them where it is a rival: each on its own numbers, confirmed or one
run, as :func:`~tuner.analysis.picks.best_per_method` finds them.

The serve command is the one ``best.yaml`` (``spectune export``'s vLLM format, which
``optimize`` writes) is started with: ``vllm serve --config best.yaml``, with the model as a
positional argument on the vLLM versions whose config file cannot carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.analysis.k_table import TableChoice, table_choice, with_table
from tuner.analysis.picks import (
    Candidate,
    best_per_method,
    check_pick,
    choose,
    pick_candidate,
    ranked,
    study_pick,
)
from tuner.config.methods import MethodFamily
from tuner.config.space import SearchSpace
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.config.vllm_args import config_file_argv, server_yaml
from tuner.trial.record import stored_run

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

__all__ = [
    "Recommendation",
    "Rival",
    "config_line",
    "dialect_space",
    "recommendation",
    "short_label",
]


@dataclass(frozen=True)
class Rival:
    """The best config of another method, and how the recommendation compares with it."""

    method: SpecMethod
    candidate: Candidate
    ratio: float | None  # the recommendation's first objective over this one's; None at 0


@dataclass(frozen=True)
class Recommendation:
    """The config a pick recommends, with everything a page says about it."""

    pick: str
    candidate: Candidate
    rivals: tuple[Rival, ...]  # no speculation first, then the other methods, fastest first
    table: TableChoice  # the per-batch-size K table decision for this config
    space: SearchSpace  # in the dialect of the vLLM that ran (see dialect_space)

    @property
    def method(self) -> SpecMethod:
        """The recommended config's speculation method (``none`` without speculation)."""
        return self.candidate.record.server.method

    def serve_argv(self, config_path: str = "best.yaml") -> list[str]:
        """``vllm serve`` and its arguments for the exported config file at ``config_path``."""
        server = with_table(self.candidate.record.server, self.table.exported)
        config = server_yaml(server, self.space.version)
        return ["vllm", "serve", *config_file_argv(config, config_path, model=server.model)]


def short_label(server: ServerConfig) -> str:
    """The config in a few words: ``Qwen2.5-0.5B-Instruct draft, K=2`` or ``no speculation``."""
    if server.speculative is None:
        return "no speculation"
    name = (server.draft or "").rstrip("/").rsplit("/", 1)[-1]
    what = f"{name} draft" if server.family is MethodFamily.DRAFT else name
    return f"{what}, K={server.k}"


def config_line(server: ServerConfig) -> str:
    """Every tuned server setting on one line, as the headline and the dashboard print it."""
    spec = "no speculation"
    if server.family is MethodFamily.DRAFT:
        spec = f"draft {server.draft}, K={server.k}"
    elif server.speculative is not None:  # ngram, suffix, a head: the choice names it
        spec = f"{server.draft}, K={server.k}"
    return (
        f"{spec} · gpu-memory-utilization {server.memory_label} · "
        f"max-num-batched-tokens {server.max_num_batched_tokens}"
    )


def dialect_space(study: optuna.Study, space: SearchSpace) -> SearchSpace:
    """``space``, speaking the dialect of the vLLM that ran where the space names no version."""
    ran = stored_run(study)
    if ran is not None and space.vllm_version is None:
        return space.with_vllm_version(ran.vllm_version)
    return space


def recommendation(
    study: optuna.Study, space: SearchSpace, pick: str | None = None
) -> Recommendation | None:
    """What ``pick`` recommends from ``study`` (by default the study's own pick,
    :func:`~tuner.analysis.picks.study_pick`); None while nothing is feasible.

    Raises:
        ConfigError: an unknown pick, or a trial number that did not complete.
    """
    if pick is not None and pick.isdigit():
        candidate: Candidate | None = pick_candidate(study, pick)
    else:
        cands = ranked(study)
        pick = check_pick(pick) if pick else study_pick(study, cands)
        candidate = choose(cands, pick)
    if candidate is None:
        return None
    spoken = dialect_space(study, space)
    return Recommendation(
        pick,
        candidate,
        _rivals(study, candidate),
        table_choice(study, spoken, candidate),
        spoken,
    )


def _rivals(study: optuna.Study, chosen: Candidate) -> tuple[Rival, ...]:
    own = chosen.record.server.method
    others = [c for c in best_per_method(study) if c.record.server.method is not own]
    others.sort(key=lambda c: c.record.server.method != SpecMethod.NONE)  # stable: fastest next
    return tuple(
        Rival(
            c.record.server.method,
            c,
            chosen.ranking_throughput / c.ranking_throughput if c.ranking_throughput > 0 else None,
        )
        for c in others
    )
