"""The recommendation as optuna-dashboard's study note: the answer on the dashboard's first page.

optuna-dashboard shows a study's note (Markdown, kept in the study's system attributes) at the
top of the study page. ``spectune dashboard`` writes the recommendation there, from the same
:func:`~tuner.analysis.recommendation.recommendation` the report and the export read, so the
three print the same config and numbers. A note a person wrote is never overwritten: only a
note that starts with :data:`MARKER` (one spectune wrote) is replaced.
"""

from __future__ import annotations

import shlex

import optuna

from tuner.analysis.recommendation import Recommendation, config_line, recommendation, short_label
from tuner.config.space import SearchSpace

__all__ = ["MARKER", "note_text", "write_note"]

MARKER = "<!-- spectune: the recommendation, rewritten by spectune dashboard -->"


def note_text(chosen: Recommendation | None, study_name: str) -> str:
    """The note's Markdown for ``chosen`` (or for a study with nothing feasible yet)."""
    if chosen is None:
        return f"{MARKER}\n## No recommendation yet\n\nNo trial is feasible yet.\n"
    candidate, objective = chosen.candidate, chosen.space.objective
    numbers = candidate.numbers
    serve = shlex.join(chosen.serve_argv("best.yaml"))
    return (
        f"{MARKER}\n"
        f"## Recommended: {short_label(candidate.record.server)}\n\n"
        f"Trial {candidate.number} (pick {chosen.pick}): {config_line(candidate.record.server)}\n\n"
        f"**{numbers.source}**: {numbers.throughput.text(objective.digits)} {objective.label}, "
        f"p95 TTFT {numbers.p95_ttft_ms.text(0, ' ms')} ({numbers.runs_note})\n\n"
        f"Serve it: `spectune export {study_name} --out best.yaml`, then `{serve}`\n"
    )


def write_note(study: optuna.Study, space: SearchSpace) -> bool:
    """Writes the recommendation as the study's note unless a person wrote the note there;
    returns whether it wrote."""
    from optuna_dashboard import get_note, save_note  # type: ignore[import-untyped]

    held = get_note(study)
    text = note_text(recommendation(study, space), study.study_name)
    if held and not held.startswith(MARKER):
        return False
    if held != text:
        save_note(study, text)
    return True
