"""The report's first screen: the recommended config, its numbers, what it beats, how to run it.

Everything here is read from :func:`tuner.analysis.recommendation.recommendation`, the same
answer ``spectune export`` writes as ``best.yaml`` and ``optimize`` prints; nothing is
recomputed on the page. Simulated numbers say so in the headline itself, not in a footnote.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.analysis.estimates import Numbers
from tuner.analysis.k_table import spell
from tuner.analysis.recommendation import Recommendation, config_line, short_label
from tuner.config.schema import Objective
from tuner.config.trial import ServerConfig
from tuner.results import Source

__all__ = ["HEADLINE_CSS", "headline", "no_recommendation"]

HEADLINE_CSS = """
#recommended{border:2px solid #1f77b4;border-radius:6px;padding:.4em 1em .8em;margin:.6em 0}
#recommended h2{border:none;margin:.3em 0;font-size:1.35em}
#recommended pre{background:#f4f6f8;padding:.5em .8em;margin:.3em 0;font-size:.95em;
white-space:pre-wrap}
.figures{font-size:1.1em;margin:.3em 0}.simulated{background:#fde9c8;color:#7a4a00;
font-weight:bold;border-radius:3px;padding:0 .35em}
"""


def _esc(value: object) -> str:
    return html.escape(str(value))


def _config(server: ServerConfig) -> str:
    return _esc(config_line(server))


def _first_pair(summary: Mapping[str, Any]) -> str:
    """Where the acceptance was read: the first measured pair, as the live table reads it."""
    where = []
    if summary.get("concurrency") is not None:
        where.append(f"concurrency {summary['concurrency']}")
    if summary.get("temperature") is not None:
        where.append(f"temperature {float(summary['temperature']):g}")
    return f" ({', '.join(where)})" if where else ""


def _figures(numbers: Numbers, objective: Objective, first_pair: str) -> str:
    tag = (
        "<span class='simulated'>SIMULATED: predicted by spectune's simulator, not measured "
        "on a GPU</span> "
        if numbers.source == Source.SIMULATED
        else f"<b>{_esc(numbers.source)}</b>: "
    )
    accept = (
        ""
        if numbers.acceptance_rate is None
        else f" · draft acceptance {numbers.acceptance_rate * 100:.1f} %{first_pair}"
    )
    return (
        f"<p class='figures'>{tag}<b>{_esc(numbers.throughput.text(objective.digits))}</b> "
        f"{objective.label} · p95 TTFT <b>{_esc(numbers.p95_ttft_ms.text(0, ' ms'))}</b>"
        f"{accept} <span class='muted'>({_esc(numbers.runs_note)})</span></p>"
    )


def _beats(chosen: Recommendation, objective: Objective) -> str:
    if not chosen.rivals:
        return "<p class='muted'>The study found no feasible config of another method.</p>"
    rows = []
    for rival in chosen.rivals:
        numbers = rival.candidate.numbers
        ratio = "-" if rival.ratio is None else f"{rival.ratio:.2f}x"
        rows.append(
            f"<tr data-rival='{_esc(rival.method)}'><td class='l'>{_esc(rival.method)}</td>"
            f"<td class='l'>{_config(rival.candidate.record.server)}</td>"
            f"<td>{rival.candidate.number}</td>"
            f"<td>{_esc(numbers.throughput.text(objective.digits))}</td>"
            f"<td>{numbers.p95_ttft_ms.value:.0f}</td>"
            f"<td class='l'>{_esc(numbers.runs_note)}</td><td>{ratio}</td></tr>"
        )
    return (
        "<table id='beats'><tr><th class='l'>against</th><th class='l'>its best config</th>"
        f"<th>trial</th><th>{objective.label}</th><th>p95 TTFT ms</th><th class='l'>runs</th>"
        f"<th>recommended ÷ it</th></tr>{''.join(rows)}</table>"
    )


def _table_line(chosen: Recommendation) -> str:
    verdict = chosen.table.verdict
    if not chosen.table.exported or verdict is None:
        return ""
    return (
        f"<p>It switches K by batch size ({_esc(spell(chosen.table.exported))}, 0 = off): that "
        f"table won as a config of its own ({_esc(verdict.evidence())}).</p>"
    )


def _command(argv: Sequence[str]) -> str:
    # A variable ($SPECTUNE_STORAGE) must expand in the user's shell; the rest is literal.
    return " ".join(f'"{a}"' if a.startswith("$") else shlex.quote(a) for a in argv)


def headline(chosen: Recommendation, study_name: str, export_flags: Sequence[str]) -> str:
    """The "Recommended" section: config, numbers, rivals and the commands to serve it.

    Args:
        chosen: the study's recommendation (the default pick).
        study_name: the study, for the ``spectune export`` command.
        export_flags: what ``spectune export`` needs to find the study (``--studies-dir``).
    """
    objective = chosen.space.objective
    candidate = chosen.candidate
    export = ["spectune", "export", study_name, *export_flags]
    serve = _command(chosen.serve_argv("best.yaml"))
    compose = _command([*export, "--format", "compose", "--out", "docker-compose.yml"])
    within = "every step" if objective is Objective.GOODPUT else "every level"
    return (
        "<section id='recommended'>"
        f"<h2>Recommended: {_esc(short_label(candidate.record.server))}</h2>"
        f"<p class='config'>{_config(candidate.record.server)}</p>"
        f"{_figures(candidate.numbers, objective, _first_pair(candidate.record.summary))}"
        f"<p class='muted'>Trial {candidate.number}, pick {_esc(chosen.pick)}: "
        f"{_chosen_for(chosen.pick, objective)} within p95 TTFT ≤ "
        f"{chosen.space.ttft_limit_ms:.0f} ms at {within}, on the traffic summarised below.</p>"
        f"{_table_line(chosen)}"
        f"{_beats(chosen, objective)}"
        "<p><b>Run it</b> with vLLM (the config file is what <code>spectune export</code> "
        "writes and <code>optimize</code> saved as best.yaml):</p>"
        f"<pre id='serve'>{_esc(_command([*export, '--out', 'best.yaml']))}\n"
        f"{_esc(serve)}</pre>"
        "<p>or with Docker Compose:</p>"
        f"<pre id='compose'>{_esc(compose)}\ndocker compose up -d</pre>"
        "</section>"
    )


def _chosen_for(pick: str, objective: Objective) -> str:
    """What the recommendation is best at, by the pick that chose it."""
    if pick == "min-energy":
        return "the most output tokens per joule of GPU energy"
    return f"the highest {objective.label}"


def no_recommendation() -> str:
    """The headline while no trial is feasible."""
    return (
        "<section id='recommended'><h2>No recommendation yet</h2><p>No trial is feasible: "
        "run more trials or relax the TTFT limit.</p></section>"
    )
