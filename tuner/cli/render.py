"""What the CLI prints: the live trial table, the Pareto front, the recommendation.

Every number carries its source (measured, simulated, predicted) so nobody mistakes a
simulated figure for a measurement.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.table import Table

from tuner.analysis.confirmed import Confirmed, Interval, Run
from tuner.config.methods import MethodFamily
from tuner.config.schema import Objective
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.trial.model_runner import model_runner
from tuner.trial.scoring import TrialStatus

if TYPE_CHECKING:  # these load the simulator or Optuna; `spectune --help` need neither
    import optuna

    from tuner.analysis.k_table import KTableVerdict
    from tuner.analysis.picks import Candidate
    from tuner.config.space import SearchSpace
    from tuner.search.plan import StudyPlan
    from tuner.trial.record import TrialRecord

__all__ = [
    "TRIAL_COLUMNS",
    "config_label",
    "confirm_run_line",
    "confirmed_table",
    "draft_label",
    "energy_lines",
    "fitted_table",
    "k_table_line",
    "recommendation",
    "record_row",
    "records_table",
    "trial_table",
]

# Short enough that a row fits an 80-column terminal; the caption spells them out. The
# throughput column is named in the study's unit (tok/s, or req/s for goodput).
TRIAL_COLUMNS = (
    "#",
    "draft",
    "K",
    "mem",
    "batch",
    "temp",
    "tok/s",
    "TTFT",
    "tok/J",
    "acc",
    "run",
    "new",
    "status",
)
_CAPTION = (
    "mem: --gpu-memory-utilization, batch: --max-num-batched-tokens, temp: tuned or the "
    "workload's (mix: several), {unit}, tok/J: output tokens per joule of GPU energy (- where "
    "not read), acc: draft acceptance, run: vLLM's model runner (V1 is deprecated), new: server "
    "(re)started, lost N%: requests failed, pruned: measured until it could not reach the best, "
    "fly N%: lossy verification whose answers kept N% of the exact answers' words (lossy N%: "
    "below the space's quality.min_similarity), hot: the GPUs throttled (heat or a hardware "
    "slowdown) even when measured again, tenants: other processes' GPU memory moved while "
    "measured"
)
_UNITS = {
    Objective.THROUGHPUT: "tok/s: traffic-weighted, TTFT: worst p95 ms over the levels",
    Objective.GOODPUT: "req/s: goodput, the highest request rate within the limits, "
    "TTFT: worst p95 ms there",
}
_STATUS = {
    TrialStatus.OK: "ok",
    TrialStatus.OOM_PREDICTED: "OOM pred.",
    TrialStatus.OOM: "OOM",
    TrialStatus.OVER_TTFT: "over TTFT",
    TrialStatus.OVER_TPOT: "over TPOT",
    TrialStatus.OVER_STREAM: "choppy",
    TrialStatus.BELOW_QUALITY: "lossy",
    TrialStatus.FAILED_REQUESTS: "lost",
    TrialStatus.FAILED: "failed",
}
# The parameter count in a model id: Qwen2.5-0.5B-Instruct -> 0.5B, Llama-3.2-1B -> 1B.
_SIZE = re.compile(r"(?:^|[-_])(\d+(?:\.\d+)?[BM])(?=$|[-_])")


def _draft_name(server: ServerConfig) -> str:
    return (server.draft or SpecMethod.NONE).rstrip("/").split("/")[-1]


def draft_label(server: ServerConfig) -> str:
    """The draft as a table cell: ``none``, ``ngram``, the draft's size (``0.5B``), or the
    method of a head or block drafter (``eagle3``, ``p-eagle3`` with parallel drafting,
    ``dflash``): their long ids would not fit."""
    name = _draft_name(server)
    spec = server.speculative
    if spec is not None and server.family in (MethodFamily.HEAD, MethodFamily.BLOCK):
        return ("p-" if spec.parallel_drafting else "") + str(spec.method)
    if server.family is not MethodFamily.DRAFT:
        return name
    size = _SIZE.search(name)
    return size.group(1) if size else name


def config_label(server: ServerConfig, temperature: float | None = None) -> str:
    """A one-line description of a trial's server config; ``temperature`` only where the
    study tuned it (a served mix is the user's traffic, not part of the config)."""
    spec = server.speculative
    k = f" K={spec.num_speculative_tokens}" if spec else ""
    k += " verify=fly" if spec and spec.rejection_sample_method.lossy else ""
    temp = "" if temperature is None else f" temp={temperature:.2f}"
    return (
        f"draft={_draft_name(server)}{k} gpu-mem={server.memory_label} "
        f"batched={server.max_num_batched_tokens}{temp}"
    )


def _temperature_cell(record: TrialRecord) -> str:
    if len(record.temperature_mix) > 1 and not record.tunes_temperature:
        return "mix"
    return f"{record.trial_temperature:.2f}"


def _tuned_temperature(record: TrialRecord) -> float | None:
    return record.trial_temperature if record.tunes_temperature else None


def trial_table(title: str, objective: Objective = Objective.THROUGHPUT) -> Table:
    """An empty trial table (rows from :func:`record_row`), narrow enough for 80 columns."""
    caption = _CAPTION.format(unit=_UNITS[objective])
    # One space between columns (collapsed padding): with tok/J a row still fits 80 columns.
    table = Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=None,
        collapse_padding=True,
    )
    for name in TRIAL_COLUMNS:
        table.add_column(
            objective.unit if name == "tok/s" else name,
            justify="left" if name in ("draft", "status") else "right",
            no_wrap=True,
            max_width=12 if name == "draft" else None,
        )
    return table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def record_row(record: TrialRecord) -> list[str]:
    """One trial as a row: its config always (a failed trial's too), and what it measured."""
    server = record.server
    status = _STATUS[record.status]
    if record.status is TrialStatus.FAILED_REQUESTS and record.failed_share is not None:
        status = f"lost {record.failed_share * 100:.0f}%"
    if record.quality is not None and record.status in (TrialStatus.OK, TrialStatus.BELOW_QUALITY):
        kept = f"{record.quality.similarity * 100:.0f}%"
        status = f"{'fly' if record.status is TrialStatus.OK else 'lossy'} {kept}"
    if record.pruned is not None:
        status = "pruned"
    if record.duplicate_of is not None:
        status = f"same as #{record.duplicate_of}"
    status += " hot" if record.throttled else ""
    status += " tenants" if record.tenants_moved else ""
    return [
        str(record.number),
        draft_label(server),
        str(server.k) if server.speculative else "-",
        server.memory_label,
        str(server.max_num_batched_tokens),
        _temperature_cell(record),
        _number(record.throughput, 2 if record.steps else 1),
        _number(record.p95_ttft_ms, 0),
        _number(record.tokens_per_joule, 2),
        _pct(record.acceptance_rate),
        model_runner(record),
        "yes" if record.restarted else "no",
        status,
    ]


def records_table(
    title: str, records: list[TrialRecord], objective: Objective = Objective.THROUGHPUT
) -> Table:
    """A trial table holding ``records``."""
    table = trial_table(title, objective)
    for record in records:
        table.add_row(*record_row(record))
    return table


def recommendation(
    best: Candidate,
    limit_ms: float,
    objective: Objective = Objective.THROUGHPUT,
    pick: str = "max-throughput",
) -> str:
    """The recommendation lines optimize prints: the numbers as export and report print them
    (:attr:`tuner.analysis.picks.Candidate.numbers`); ``pick`` is the one that chose it."""
    record, numbers = best.record, best.numbers
    throughput = numbers.throughput.text(objective.digits)
    ttft = numbers.p95_ttft_ms.text(0, " ms")
    target = "goodput" if objective is Objective.GOODPUT else "throughput"
    if pick == "min-energy":
        target = "output tokens per joule"
    energy = "" if best.tokens_per_joule is None else f", {best.tokens_per_joule:.2f} tok/J"
    return (
        f"Recommended (highest {target} within p95 TTFT <= {limit_ms:.0f} ms): "
        f"trial {record.number}: {config_label(record.server, _tuned_temperature(record))}\n"
        f"  {numbers.source}: {throughput} {objective.label}, p95 TTFT {ttft}{energy} "
        f"({numbers.runs_note})" + _quality_note(record)
    )


def energy_lines(study: optuna.Study, space: SearchSpace) -> list[str]:
    """What optimize prints on energy after the recommendation: where the study prefers
    both, the tok/s against J/token front; what the fastest config costs against the most
    frugal; and a line where an energy preference found energy unread. Empty where no
    trial's GPUs were read and the study prefers throughput."""
    from tuner.analysis.energy import energy_cost, energy_front, energy_note
    from tuner.analysis.picks import ranked
    from tuner.config.preference import Preference

    cands = ranked(study)
    lines = []
    front = energy_front(cands) if space.prefer is Preference.BOTH else []
    if front:
        unit = space.objective.unit
        lines.append("Front of throughput against energy (fastest first, the first recommended):")
        lines += [
            f"  trial {c.number}: {c.throughput:.{space.objective.digits}f} {unit}, "
            f"{c.joules_per_token or 0.0:.3f} J/token, {config_label(c.record.server)}"
            for c in front
        ]
    cost = energy_cost(cands, space.objective.unit)
    note = energy_note(space.prefer, cands)
    return [*lines, *([cost] if cost else []), *([f"WARNING: {note}"] if note else [])]


def _quality_note(record: TrialRecord) -> str:
    """What a lossy recommendation costs in answers, on its own line; empty for a lossless one."""
    check = record.quality
    if check is None:
        return ""
    return (
        f"\n  lossy verification (fly): its greedy answers kept {check.similarity * 100:.1f}% of "
        f"standard verification's words; {check.identical} of {check.prompts} were identical"
    )


def _interval(value: Interval | None, digits: int) -> str:
    return "-" if value is None else value.cell(digits)


def confirmed_table(
    results: list[Confirmed], ttft_limit_ms: float, objective: Objective = Objective.THROUGHPUT
) -> Table:
    """Re-measured configs: mean and 95 % confidence interval over their runs, said once in
    the title (a config of one run shows its value alone: no interval)."""
    source = results[0].source if results else "measured"
    table = Table(
        "trial",
        "runs (n)",
        objective.label,
        "p95 TTFT ms",
        "verdict",
        title=f"Confirmed ({source}; each cell: mean ± 95 % CI over its n runs)",
        title_justify="left",
    )
    for c in results:
        verdict = "ok" if c.feasible(ttft_limit_ms) else "dropped"
        table.add_row(
            str(c.trial),
            str(len(c.runs)),
            _interval(c.throughput, objective.digits),
            _interval(c.p95_ttft_ms, 0),
            verdict,
        )
    return table


def confirm_run_line(
    number: int,
    repeat: int,
    run: Run,
    repeats: int,
    source: str,
    objective: Objective = Objective.THROUGHPUT,
) -> str:
    measured = "-" if run.throughput is None else f"{run.throughput:.1f} {objective.unit} {source}"
    return f"confirming trial {number}, run {repeat + 1}/{repeats}: {run.status}, {measured}"


def _no_share(space: SearchSpace) -> str:
    from tuner.search.plan import benchmarked_spaces

    ran = benchmarked_spaces()
    if space.name not in ran:
        return (
            f"no share of the optimum to expect: the search benchmark has not run on "
            f"{space.name} (its shipped shares are for {', '.join(ran) or 'no space'})"
        )
    return "no share of the optimum to expect: the search benchmark ran no budget this short"


def plan_table(plan: StudyPlan, space: SearchSpace) -> Table:
    """The expected GPU time of a run: each warm-start trial, the sampler's, confirmation."""
    from tuner.search.plan import format_duration as took

    budget = "" if plan.budget_s is None else f" within a {took(plan.budget_s)} time budget"
    caption = (
        "benchmarks predicted by the simulator at the full count (rounds and pruning spend "
        "less), +/- the error that holds 85 % of public sources of its kind; "
        + _startups_line(plan)
    )
    if plan.budget_s is not None:
        caption += ";\n" + (plan.expected.describe() if plan.expected else _no_share(space))
    table = Table(
        title=f"plan: {len(plan.trials)} trials on {space.hardware.label}{budget}, "
        f"{took(plan.total_s)} of GPU time expected",
        caption=caption,
    )
    for column in ("trials", "config", "start-up", "benchmark", "total"):
        table.add_column(column, justify="left" if column == "config" else "right")
    rows: list[tuple[int, int, str, float, float, str]] = []
    for number, (what, cost) in enumerate(plan.trials):
        band = "" if cost.band is None else " " + cost.band.short()
        if rows and rows[-1][2] == what and what.startswith("a config the sampler"):
            first, _, _, start, bench, _ = rows[-1]
            rows[-1] = (first, number, what, start + cost.start_s, bench + cost.bench_s, band)
        else:
            rows.append((number, number, what, cost.start_s, cost.bench_s, band))
    for first, last, what, start, bench, band in rows:
        span = f"{first}" if first == last else f"{first}-{last}"
        table.add_row(span, what, took(start), took(bench) + band, took(start + bench))
    confirm = plan.confirm_cost
    if not plan.confirm_runs:
        confirming = "no confirmation: the best trial is recommended as measured"
    elif plan.k_table:
        confirming = "confirmation runs (the K table's too), each on a fresh server"
    else:
        confirming = "confirmation runs, each on a fresh server (no time left for a K table)"
    table.add_row(
        f"+{plan.confirm_runs}",
        confirming,
        took(plan.confirm_runs * confirm.start_s),
        took(plan.confirm_runs * confirm.bench_s),
        took(plan.confirm_s),
    )
    return table


def _startups_line(plan: StudyPlan) -> str:
    """Where the plan's start-up prices come from: the study's own, family by family, or the
    prior."""
    from tuner.search.plan import format_duration as took

    if not plan.startups:
        return (
            f"start-ups a prior ({took(plan.confirm_cost.start_s)}) until trials measure their own"
        )
    measured = "; ".join(
        f"{family.describe()} {took(price.seconds)} ({price.describe()})"
        for family, price in plan.startups
    )
    return f"start-ups as the study measured them: {measured}; any other family a prior"


def k_table_line(verdict: KTableVerdict) -> str:
    """What the per-batch-size K table's own runs decided."""
    outcome = "exported" if verdict.wins else "fixed K exported"
    return f"K table {verdict.spelled}: {verdict.evidence()}; {outcome}"


# What rich draws around each cell of a plain table: a border and one space each side.
_CELL_FRAME = 3


def fitted_table(columns: list[tuple[str, list[str]]], width: int) -> Table:
    """A table of ``columns`` (header, cells), most important first, that never cuts a cell:
    the first column (the identifier the user types) whole, then as many of the others, in
    order, as ``width`` holds whole; the rest left out (``--json`` has them all)."""
    kept: list[tuple[str, list[str]]] = []
    used = 1  # the table's closing border
    for index, (header, cells) in enumerate(columns):
        need = max(len(header), *(len(c) for c in cells)) + _CELL_FRAME
        if index and used + need > width:
            break
        kept.append((header, cells))
        used += need
    table = Table()
    for header, _ in kept:
        table.add_column(header, no_wrap=True)
    for row in zip(*(cells for _, cells in kept), strict=True):
        table.add_row(*row)
    return table
