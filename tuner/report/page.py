"""``spectune report``: one self-contained HTML page plus the charts as PNG files.

The page embeds its charts (base64 ``data:`` URIs) and its style, so it opens from anywhere,
mailed or archived, with no network and no sibling files; the PNGs are written beside it for
slides and issues. Every number says where it came from (measured, simulated) and, where the
config was confirmed, carries its 95 % confidence interval.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.analysis.confirmed import load_confirmed
from tuner.analysis.energy import energy_cost, energy_note
from tuner.analysis.estimates import Bounds, Measured, Numbers
from tuner.analysis.levels import LevelChoice, best_by_draft
from tuner.analysis.picks import PICKS, Candidate, best_per_method, choose, ranked
from tuner.analysis.recommendation import Recommendation, recommendation
from tuner.analysis.trials import Outcome, Point, points
from tuner.config.schema import Objective
from tuner.config.space import SearchSpace
from tuner.config.trial import SpecMethod
from tuner.report import charts
from tuner.report.energy import energy_chart
from tuner.report.headline import HEADLINE_CSS, headline, no_recommendation
from tuner.report.importance import importance_points, param_importances
from tuner.report.traffic import per_temperature_section, speculation_note, traffic_rows
from tuner.search.twin_steer import stored_twin
from tuner.study.paths import write_whole
from tuner.trial.model_runner import model_runner, runner_note
from tuner.trial.record import PROPOSED_ATTR, records, stored_run

__all__ = ["Report", "write_report"]

_BEST_ROWS = 8


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote."""

    html: Path
    charts: tuple[charts.Chart, ...]
    best: tuple[Candidate, ...]  # the best-configs table, best first
    methods: tuple[Candidate, ...]  # the best config of each speculation method, best first
    levels: tuple[LevelChoice, ...]  # per-level speculation for the recommended draft
    recommended: Recommendation | None  # the headline's answer; None while none is feasible


def write_report(
    study: optuna.Study,
    space: SearchSpace,
    out_dir: Path,
    today: dt.date | None = None,
    export_flags: Sequence[str] = (),
) -> Report:
    """Writes ``out_dir/report.html`` and the charts as ``out_dir/<name>.png``.

    Args:
        study: the study.
        space: its search space.
        out_dir: the folder to write to.
        today: the date the page says it was written (tests pin it).
        export_flags: what ``spectune export`` needs to find the study (``--studies-dir``
            or ``--storage``), for the commands the page shows.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    label = space.objective.label if space.goodput else "output tokens/s"
    trials = points(study)
    confirmed = load_confirmed(study)
    best_first = ranked(study)
    picks = {pick: choose(best_first, pick) for pick in PICKS}  # as analysis.picks.recommend
    answer = recommendation(study, space)
    levels = list(answer.table.levels) if answer is not None else []
    drawn = [
        charts.pareto_chart(trials, confirmed, space.ttft_limit_ms, out_dir / "pareto.png", label),
        charts.k_chart(trials, out_dir / "k.png", label),
        charts.acceptance_chart(trials, out_dir / "acceptance.png"),
        charts.memory_chart(trials, out_dir / "memory.png", label),
        charts.importance_chart(
            param_importances(trials, space, label),
            len(importance_points(trials)),
            out_dir / "importance.png",
        ),
    ]
    if any(p.joules_per_token is not None for p in trials):
        chosen_trial = None if answer is None else answer.candidate.number
        drawn.insert(1, energy_chart(trials, chosen_trial, out_dir / "energy.png", label))
    if levels and answer is not None:
        draft = answer.candidate.record.draft
        drawn.append(charts.levels_chart(trials, levels, draft, out_dir / "levels.png"))
    # The best by throughput, plus whatever a pick chose further down.
    chosen = {c.number for c in picks.values() if c is not None}
    best_rows = [c for i, c in enumerate(best_first) if i < _BEST_ROWS or c.number in chosen]
    methods = best_per_method(study)
    top = (
        no_recommendation() if answer is None else headline(answer, study.study_name, export_flags)
    ) + _energy_section(space, best_first)
    page = out_dir / "report.html"
    body = _page(study, space, trials, best_rows, picks, drawn, levels, today, methods, top)
    write_whole(page, body)
    return Report(page, tuple(drawn), tuple(best_rows), tuple(methods), tuple(levels), answer)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:right}
th{background:#f4f6f8}td.l,th.l{text-align:left}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1em}
figure{margin:0;border:1px solid #eee;padding:.5em}figure img{width:100%}
figcaption{font-size:.85em;color:#555}.muted{color:#666}.tag{font-size:.8em;
background:#eef;border-radius:3px;padding:0 .3em;margin-left:.3em}
"""


def _esc(value: object) -> str:
    return html.escape(str(value))


def _summary(study: optuna.Study, space: SearchSpace, trials: Sequence[Point]) -> str:
    counts = {o: sum(p.outcome is o for p in trials) for o in Outcome}
    failed = sum(t.state is optuna.trial.TrialState.FAIL for t in study.trials)
    pruned = sum(t.state is optuna.trial.TrialState.PRUNED for t in study.trials)
    sources = ", ".join(sorted({p.source for p in trials})) or "n/a"
    limited = space.stream_gap_limit_ms is not None
    choppy = f"{counts[Outcome.OVER_STREAM]} over the stream-gap limit, " if limited else ""
    slow = f"{counts[Outcome.OVER_TPOT]} over the TPOT limit, " if space.tpot_limit_ms else ""
    where = "every step" if space.goodput else "every level"
    rows = [
        ("study", study.study_name),
        ("target", space.target.hf_id),
        ("GPUs", space.hardware.label),
        ("vLLM", _ran(study, space)),
        *traffic_rows(space, records(study.get_trials(deepcopy=False))),
        ("p95 TTFT limit", f"{space.ttft_limit_ms:.0f} ms at {where}"),
        *(
            [("p95 TPOT limit", f"{space.tpot_limit_ms:g} ms at {where}")]
            if space.tpot_limit_ms is not None
            else []
        ),
        *(
            [("p99 stream-gap limit", f"{space.stream_gap_limit_ms:.0f} ms at {where}")]
            if limited
            else []
        ),
        (
            "trials",
            f"{len(study.trials)}: {counts[Outcome.FEASIBLE]} feasible, "
            f"{counts[Outcome.OVER_TTFT]} over the TTFT limit, {slow}{choppy}"
            f"{counts[Outcome.LOST_REQUESTS]} lost requests, {counts[Outcome.OOM]} OOM, "
            f"{pruned} pruned, {failed} failed",
        ),
        ("numbers", sources),
    ]
    cells = "".join(
        f"<tr><th class='l'>{_esc(k)}</th><td class='l'>{_esc(v)}</td></tr>" for k, v in rows
    )
    return f"<table id='summary'>{cells}</table>"


def _ran(study: optuna.Study, space: SearchSpace) -> str:
    ran = stored_run(study)
    if ran is None:  # a study written before spectune recorded what ran
        return f"{space.version} ({space.vllm_image})"
    return f"{ran.vllm_version} ({ran.backend} backend" + (
        f", image {ran.image})" if ran.image else ")"
    )


def _best_table(
    best: Sequence[Candidate], picks: dict[str, Candidate | None], objective: Objective
) -> str:
    if not best:
        return "<p id='best'>No feasible config yet: run more trials or relax the TTFT limit.</p>"
    head = (
        "<tr><th>trial</th><th class='l'>draft</th><th>K</th><th>gpu-mem</th><th>batched</th>"
        f"<th>temp</th><th>{objective.label}</th><th>p95 TTFT ms</th><th>accept</th>"
        "<th>runner</th><th class='l'>source</th><th>tok/J</th><th class='l'>pick</th></tr>"
    )
    rows = []
    for c in best:
        server = c.record.server
        tags = "".join(
            f"<span class='tag'>{_esc(p)}</span>"
            for p, chosen in picks.items()
            if chosen is not None and chosen.number == c.number
        )
        tok_s, ttft, accept, source = _measured_cells(c, objective)
        rows.append(
            f"<tr data-trial='{c.number}'><td>{c.number}</td>"
            f"<td class='l'>{_esc(c.record.draft)}</td><td>{server.k or '-'}</td>"
            f"<td>{server.memory_label}</td><td>{server.max_num_batched_tokens}</td>"
            f"<td>{_temperature(c)}</td>{tok_s}{ttft}{accept}{_runner(c)}{source}"
            f"{_per_joule(c)}<td class='l'>{tags}</td></tr>"
        )
    note = (
        "Confirmed configs were measured again on fresh servers; their numbers are the mean "
        "and Student-t 95 % interval of those runs."
        if any(c.confirmed for c in best)
        else "Single measurements, not confirmed: run <code>spectune confirm</code> for "
        "repeat runs with confidence intervals."
    )
    return (
        f"<table id='best'>{head}{''.join(rows)}</table><p class='muted'>{note}</p>"
        f"{_served(best[0])}"
    )


def _served(best: Candidate) -> str:
    """What vLLM ran for the best config, by its server log, and any slower path it took."""
    served = best.record.served
    if served is None:
        return ""
    warnings = "".join(f"<p><strong>WARNING:</strong> {_esc(w)}</p>" for w in served.warnings)
    return (
        f"<p id='served'>vLLM ran trial {best.number} with {_esc(served.describe())} "
        f"<span class='muted'>(its start-up log)</span>.</p>{warnings}"
    )


def _per_joule(c: Candidate) -> str:
    """Output tokens per joule of GPU energy as the trial read it; - where not read."""
    value = c.tokens_per_joule
    return "<td>-</td>" if value is None else f"<td>{value:.2f}</td>"


def _runner(c: Candidate) -> str:
    """vLLM's model runner for the config (V1 is deprecated), its source on hover."""
    return f"<td title='{_esc(runner_note(c.record))}'>{_esc(model_runner(c.record))}</td>"


def _measured_cells(c: Candidate, objective: Objective) -> tuple[str, str, str, str]:
    """A candidate's throughput, p95 TTFT (each with the bounds of its own measurement),
    acceptance and source, as table cells."""
    numbers = c.numbers
    accept = numbers.acceptance_rate
    source = numbers.source + (" · confirmed" if numbers.confirmed else "")
    return (
        f"<td>{_estimate(numbers.throughput, objective.digits, numbers)}</td>",
        f"<td>{_estimate(numbers.p95_ttft_ms, 0, numbers)}</td>",
        f"<td>{'-' if accept is None else f'{accept * 100:.1f} %'}</td>",
        f"<td class='l'>{_esc(source)}</td>",
    )


def _estimate(estimate: Measured, digits: int, numbers: Numbers) -> str:
    value = f"{estimate.value:.{digits}f}"
    if estimate.bounds is Bounds.CI95 and estimate.low is not None and estimate.high is not None:
        half = (estimate.high - estimate.low) / 2
        return f"{value} ± {half:.{digits}f} <span class='muted'>(95 % CI, n={estimate.n})</span>"
    runs = "1 run" if not numbers.confirmed else f"n={numbers.runs}"
    if estimate.bounds is Bounds.ORDER_STATISTIC:
        runs += f"; {estimate.bounds_text(digits)}"
    return f"{value} <span class='muted'>({_esc(runs)})</span>"


def _methods_table(methods: Sequence[Candidate], objective: Objective) -> str:
    if len(methods) < 2:
        return "<p class='muted'>The study measured one speculation method.</p>"
    baseline = next((c for c in methods if c.record.server.method == SpecMethod.NONE), None)
    head = (
        "<tr><th class='l'>method</th><th class='l'>draft</th><th>K</th><th>trial</th>"
        f"<th>{objective.label}</th><th>vs none</th><th>p95 TTFT ms</th><th>accept</th>"
        "<th>runner</th><th class='l'>source</th></tr>"
    )
    rows = []
    for c in methods:
        speedup = (
            "-"
            if baseline is None or baseline.throughput <= 0
            else f"{c.throughput / baseline.throughput:.2f}x"
        )
        tok_s, ttft, accept, source = _measured_cells(c, objective)
        rows.append(
            f"<tr data-method='{_esc(c.record.server.method)}'>"
            f"<td class='l'>{_esc(c.record.server.method)}</td>"
            f"<td class='l'>{_esc(c.record.draft)}</td><td>{c.record.server.k or '-'}</td>"
            f"<td>{c.number}</td>{tok_s}<td>{speedup}</td>{ttft}{accept}{_runner(c)}{source}</tr>"
        )
    return (
        f"<table id='methods'>{head}{''.join(rows)}</table><p class='muted'>The fastest "
        "feasible config of each method the study tried; <i>vs none</i> is its throughput "
        "over the best config without speculation.</p>"
    )


def _energy_section(space: SearchSpace, best: Sequence[Candidate]) -> str:
    """What the fastest config costs in energy against the most frugal, and a line where an
    energy preference found energy unread; nothing where no trial's GPUs were read and the
    study prefers throughput."""
    cost = energy_cost(best, space.objective.unit)
    note = energy_note(space.prefer, best)
    if cost is None and note is None:
        return ""
    lines = "".join(f"<p>{_esc(line)}</p>" for line in (cost, note and f"WARNING: {note}") if line)
    return f"<h2>Energy</h2><div id='energy'>{lines}</div>"


def _twin_section(study: optuna.Study, trials: Sequence[Point]) -> str:
    twin = stored_twin(study)
    if twin is None or twin.observations == 0:
        return (
            "<p class='muted'>No twin fitted: the study ran with another sampler than "
            "<code>spectune</code>, or no trial has finished.</p>"
        )
    rows = "".join(
        f"<tr data-factor='{name}'><td class='l'>{name}</td><td>{value:.3f}</td>"
        f"<td>{low:.3f} .. {high:.3f}</td></tr>"
        for name, value, low, high in twin.intervals()
    )
    proposed = sum(bool(t.user_attrs.get(PROPOSED_ATTR)) for t in study.get_trials(deepcopy=False))
    source = trials[0].source if trials else "measured"
    return (
        f"<table id='twin'><tr><th class='l'>factor</th><th>fitted</th><th>95 % interval</th>"
        f"</tr>{rows}</table><p class='muted'>Fitted to {twin.observations} {_esc(source)} "
        f"trials: each step-time factor scales the shipped simulator's (1 = as shipped), "
        f"outside_gib is what a start-up needs outside vLLM's budget beyond the memory "
        f"model; the memory margin a proposal "
        f"keeps is {twin.margin_gib:.2f} GiB. The twin proposed {proposed} of the "
        f"{len(study.trials)} trials.</p>"
    )


def _temperature(candidate: Candidate) -> str:
    record = candidate.record
    if record.tunes_temperature or len(record.temperature_mix) < 2:
        return f"{record.trial_temperature:.2f}"
    return "mix"


def _levels_section(trials: Sequence[Point], levels: Sequence[LevelChoice]) -> str:
    table = best_by_draft(trials)
    if len(table) < 2:
        return "<p class='muted'>The workload measures one concurrency level.</p>"
    drafts = sorted(
        {d for row in table.values() for d in row}, key=lambda d: (d != SpecMethod.NONE, d)
    )
    head = "<tr><th>concurrency</th>" + "".join(f"<th>{_esc(d)}</th>" for d in drafts)
    head += "<th class='l'>speculation</th></tr>" if levels else "</tr>"
    chosen = {c.concurrency: c for c in levels}
    rows = []
    for concurrency, row in table.items():
        cells = "".join(
            "<td>-</td>"
            if d not in row
            else f"<td>{row[d][1]:.1f}" + (f" (K={row[d][0]})" if row[d][0] else "") + "</td>"
            for d in drafts
        )
        decision = ""
        if levels and concurrency in chosen:
            c = chosen[concurrency]
            decision = f"<td class='l'>{'off' if c.k == 0 else f'K={c.k}'}</td>"
        rows.append(f"<tr><td>{concurrency}</td>{cells}{decision}</tr>")
    return (
        f"<table id='levels'>{head}{''.join(rows)}</table><p class='muted'>Best output tok/s "
        "per draft at each level (with its K). The last column is the recommended draft's best "
        "K at each level; vLLM 0.24+ takes it as num_speculative_tokens_per_batch_size, "
        "which <code>spectune export</code> writes only where that table, run as its own "
        "config, beat the fixed K.</p>"
    )


def _figure(chart: charts.Chart) -> str:
    data = base64.b64encode(chart.path.read_bytes()).decode("ascii")
    return (
        f"<figure id='chart-{chart.name}' data-points='{chart.points}'>"
        f"<img alt='{_esc(chart.title)}' src='data:image/png;base64,{data}'>"
        f"<figcaption><b>{_esc(chart.title)}</b> ({chart.points} drawn). "
        f"{_esc(chart.caption)}</figcaption></figure>"
    )


def _page(  # noqa: PLR0913  (the page takes each section it draws)
    study: optuna.Study,
    space: SearchSpace,
    trials: Sequence[Point],
    best: Sequence[Candidate],
    picks: dict[str, Candidate | None],
    drawn: Sequence[charts.Chart],
    levels: Sequence[LevelChoice],
    today: dt.date | None,
    methods: Sequence[Candidate],
    top: str,
) -> str:
    date = (today or dt.date.today()).isoformat()
    figures = "".join(_figure(c) for c in drawn)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>spectune report: {_esc(study.study_name)}</title>"
        f"<style>{_CSS}{HEADLINE_CSS}</style></head>"
        f"<body><h1>spectune report: {_esc(study.study_name)}</h1>{top}"
        f"<h2>Study</h2><p class='muted'>Written {date}.</p>{_summary(study, space, trials)}"
        f"<h2>Best configs</h2>{_best_table(best, picks, space.objective)}"
        f"{per_temperature_section(space, best)}"
        f"<h2>Best config per method</h2>{_methods_table(methods, space.objective)}"
        f"<h2>Fitted twin</h2>{_twin_section(study, trials)}"
        f"<h2>Charts</h2><div class='charts'>{figures}</div>"
        f"<h2>Speculation per load level</h2>{speculation_note(levels)}"
        f"{_levels_section(trials, levels)}"
        "</body></html>\n"
    )
