"""The model runner each of a space's speculation configs lands on, and the one warning a space
with configs on the deprecated V1 runner gets (``spectune space check``, ``spectune optimize``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.catalog.heads import heads_for
from tuner.catalog.models import ModelSpec
from tuner.catalog.seed_drafters import drafters_for
from tuner.config.methods.draft_model import same_vocabulary_draft
from tuner.config.trial import SpecMethod
from tuner.config.vllm_features import choice_runners
from tuner.config.vllm_runner import ModelRunner, RunnerForecast, predict_runner
from tuner.config.vllm_runner_defaults import DEFAULT_V2_SINCE, EVERY_TARGET_V2_SINCE
from tuner.config.vllm_version import VllmVersion

if TYPE_CHECKING:  # the space imports this layer's rules; only types come back
    from tuner.config.space import SearchSpace

__all__ = ["RunnerRow", "space_runners", "v1_warning"]

_MIXED = "heterogeneous-vocabulary draft models"


@dataclass(frozen=True)
class RunnerRow:
    """One speculation config of a space (a choice, and its P-EAGLE variant where searched)."""

    label: str
    forecast: RunnerForecast


def space_runners(space: SearchSpace) -> tuple[RunnerRow, ...]:
    """Each config's runner on the space's vLLM release, in the order the space lists them."""
    rows = []
    for choice in space.choices:
        if choice.method == SpecMethod.NONE:
            server = space.config(None, space.gpu_memory_utilization.low, 2048, 0.0).server
            rows.append(RunnerRow(choice.label, predict_runner(server, space.version)))
            continue
        runners = choice_runners(choice, space.target, space.version)
        for parallel, forecast in runners:
            variant = " +parallel_drafting" if parallel and len(runners) > 1 else ""
            rows.append(RunnerRow(choice.label + variant, forecast))
    return tuple(rows)


def _fix(reason: str, target: ModelSpec) -> str:
    """What to change for one reason a config falls back to V1."""
    if reason == _MIXED:
        offers = [f"a draft with the target's {target.vocab} vocabulary rows"]
        same = same_vocabulary_draft(target)
        if same:
            offers[0] += f" (e.g. {same})"
        heads = [h.hf_id for h in heads_for(target.hf_id) if h.method is SpecMethod.EAGLE3]
        offers.append(
            f"the EAGLE-3 head {heads[0]}"
            if heads
            else f"an EAGLE-3 head (none in the catalog for {target.hf_id})"
        )
        blocks = [d.hf_id for d in drafters_for(target.hf_id) if d.method is SpecMethod.DFLASH]
        offers.append(
            f"the DFlash drafter {blocks[0]}"
            if blocks
            else f"a DFlash drafter (none published for {target.hf_id})"
        )
        return "use " + ", ".join(offers) + ", or accept V1"
    if "parallel drafting" in reason:
        return (
            "P-EAGLE runs on V1 in every release so far: accept V1 or set parallel_drafting false"
        )
    return "accept V1 or drop that method"


def _on_v1(version: VllmVersion) -> str:
    if version >= EVERY_TARGET_V2_SINCE:
        return (
            f"on vLLM {version}'s deprecated V1 model runner (V2 is the default; maintainers "
            "plan to remove V1, vllm #45951)"
        )
    return (
        f"on vLLM {version}'s V1 model runner (that release runs V2 by default only for some "
        f"targets, every target from {EVERY_TARGET_V2_SINCE}; maintainers plan to remove V1, "
        "vllm #45951)"
    )


def _so(all_v1: bool) -> str:
    if all_v1:
        return "so the study measures V1, not the runner later releases use"
    return "so the study compares runners as well as methods"


def v1_warning(space: SearchSpace) -> str | None:
    """One warning naming the space's configs that land on V1, why, and what to change; None
    when every config lands on V2, the release's runner is not predicted, or the release runs
    everything on V1 by default (before 0.22: V1 is then neither deprecated nor compared)."""
    if space.version < DEFAULT_V2_SINCE:
        return None
    every = space_runners(space)
    rows = [r for r in every if r.forecast.runner is ModelRunner.V1]
    if not rows:
        return None
    total = len(every)
    # What to say, keyed by why: the release never tries V2 for this target (0.22-0.28), or
    # V2 does not yet support something the config uses.
    by_reason: dict[str, list[str]] = {}
    fixes: dict[str, str] = {}
    for row in rows:
        forecast = row.forecast
        if forecast.off_by_default:
            pairs = [
                (
                    forecast.off_by_default,
                    f"use vLLM {EVERY_TARGET_V2_SINCE} or later, or accept V1",
                )
            ]
        else:
            pairs = [
                (f"Model Runner V2 does not yet support {r}", _fix(r, space.target))
                for r in forecast.reasons
            ]
        for reason, fix in pairs:
            by_reason.setdefault(reason, []).append(row.label)
            fixes[reason] = fix
    count = (
        "1 config of this space runs"
        if len(rows) == 1
        else f"{len(rows)} configs of this space run"
    )
    lines = [f"WARNING: {count} {_on_v1(space.version)}, {_so(len(rows) == total)}:"]
    lines += [f"  {', '.join(labels)}: {why}; {fixes[why]}" for why, labels in by_reason.items()]
    return "\n".join(lines)
