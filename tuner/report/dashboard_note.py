"""The recommendation as optuna-dashboard's study note: the answer in the dashboard itself.

optuna-dashboard keeps a study's note (Markdown) in the study's system attributes and shows it
on the study's Note page. ``spectune dashboard`` writes the recommendation there, from the same
:func:`~tuner.analysis.recommendation.recommendation` the report and the export read, so the
three print the same config and numbers. A note a person wrote or edited is never replaced:
spectune keeps the digest of the note it last wrote (:data:`WRITTEN_ATTR`) and replaces only a
note that still reads as it wrote it.
"""

from __future__ import annotations

import hashlib
import shlex

import optuna

from tuner.analysis.recommendation import Recommendation, config_line, recommendation, short_label
from tuner.config.space import SearchSpace
from tuner.trial import optuna_private

__all__ = ["WRITTEN_ATTR", "note_text", "write_note"]

WRITTEN_ATTR = "spectune:note_sha256"  # a study system attribute: the digest of spectune's note


def note_text(chosen: Recommendation | None, study_name: str) -> str:
    """The note's Markdown for ``chosen`` (or for a study with nothing feasible yet)."""
    if chosen is None:
        return "## No recommendation yet\n\nNo trial is feasible yet.\n"
    candidate, objective = chosen.candidate, chosen.space.objective
    numbers = candidate.numbers
    serve = shlex.join(chosen.serve_argv("best.yaml"))
    return (
        f"## Recommended: {short_label(candidate.record.server)}\n\n"
        f"Trial {candidate.number} (pick {chosen.pick}): {config_line(candidate.record.server)}\n\n"
        f"**{numbers.source}**: {numbers.throughput.text(objective.digits)} {objective.label}, "
        f"p95 TTFT {numbers.p95_ttft_ms.text(0, ' ms')} ({numbers.runs_note})\n\n"
        f"Serve it: `spectune export {study_name} --out best.yaml`, then `{serve}`\n\n"
        "_Written by spectune dashboard, which rewrites this note until you edit it._\n"
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_note(study: optuna.Study, space: SearchSpace) -> bool:
    """Writes the recommendation as the study's note unless a person wrote or edited the note
    there; returns whether the note now holds it."""
    from optuna_dashboard import get_note, save_note  # type: ignore[import-untyped]

    storage, study_id = optuna_private.storage_of(study), optuna_private.study_id(study)
    held = get_note(study)
    text = note_text(recommendation(study, space), study.study_name)
    written = storage.get_study_system_attrs(study_id).get(WRITTEN_ATTR)
    if held and _digest(held) not in (written, _digest(text)):
        return False
    if held != text:
        save_note(study, text)
        storage.set_study_system_attr(study_id, WRITTEN_ATTR, _digest(text))
    return True
