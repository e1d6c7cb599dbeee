"""One source of truth: a simulated study run as a user runs it, then every number that the live
table, the closing recommendation, ``best.yaml``, the JSON export, the report and the
dashboard's stored attributes share is read back from each and compared.

Each surface rounds to its own digits, so a printed number is compared with the analysis value
to within half its last digit; the JSON export and the dashboard's storage hold the floats.
"""

from __future__ import annotations

import html
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tests.testbed.results import StudyCopy
from tuner.analysis.estimates import Measured
from tuner.analysis.recommendation import Recommendation, recommendation
from tuner.cli import app
from tuner.export.vllm import export
from tuner.report.dashboard import prepare_dashboard
from tuner.report.page import write_report
from tuner.study.paths import StudyPaths
from tuner.trial.record import TrialRecord, records

STUDY = "qwen2.5-32b-awq-4090x2"
# A live-table row: #, draft, K, mem, batch, temp, tok/s, TTFT, tok/J, acc, new, status.
ROW = re.compile(
    r"^\s*(\d+)\s+(\S+)\s+(\d+|-)\s+(\d\.\d\d)\s+(\d+)\s+(\S+)\s+([\d.]+|-)\s+(\d+|-)\s+"
    r"([\d.]+|-)\s+([\d.]+%|-)\s+(V1|V2|-)\s+(yes|no)\s+(\S.*?)\s*$"
)
NUMBER = r"(-?\d+(?:\.\d+)?)"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[StudyCopy, str]:
    """The README's simulator quick start, shortened: a study, confirmed, as the CLI runs it."""
    studies = tmp_path_factory.mktemp("agree") / "studies"
    argv = ["optimize", "--hardware", "4090x2", "--backend", "sim", "--trials", "8"]
    argv += ["--studies-dir", str(studies), "--confirm-top", "2", "--confirm-repeats", "2"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        result = CliRunner().invoke(app, [*argv, "--seed", "1"])
    assert result.exit_code == 0, result.output
    return StudyCopy(studies, STUDY), result.stdout


def _close(printed: str, value: float, digits: int) -> bool:
    return abs(float(printed) - value) <= 0.5 * 10.0**-digits + 1e-9


def _estimate(text: str, estimate: Measured, digits: int) -> None:
    """``text`` starts with ``estimate`` as every page prints it: value, and ± half width."""
    found = re.match(rf"{NUMBER}(?: ± {NUMBER})?", text)
    assert found is not None, text
    assert _close(found.group(1), estimate.value, digits), (text, estimate)
    if estimate.low is not None and estimate.high is not None and found.group(2):
        assert _close(found.group(2), (estimate.high - estimate.low) / 2, digits), text


def _live_rows(stdout: str) -> Iterator[list[str]]:
    for line in stdout.splitlines():
        found = ROW.match(line)
        if found:
            yield list(found.groups())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def test_every_surface_prints_the_same_numbers(run: tuple[StudyCopy, str], tmp_path: Path) -> None:
    copy, stdout = run
    study, space = copy.open()
    answer = recommendation(study, space)
    assert answer is not None and answer.candidate.numbers.confirmed
    done = {r.number: r for r in records(study.get_trials(deepcopy=False))}

    _live_table_is_the_stored_trials(stdout, done, study)
    _closing_lines(stdout, answer)
    _exports(copy, answer)
    _report(study, space, answer, done, tmp_path)
    _dashboard(study, copy, answer)


def _live_table_is_the_stored_trials(
    stdout: str, done: dict[int, TrialRecord], study: optuna.Study
) -> None:
    rows = list(_live_rows(stdout))
    assert {int(r[0]) for r in rows} == set(done)  # every trial, live and in the front table
    stored = {t.number: t.values for t in study.get_trials(deepcopy=False)}  # as the dashboard
    for number, _, k, mem, batch, _, tok_s, ttft, per_joule, acc, _, _, _ in rows:
        record = done[int(number)]
        # The simulator's energy is its power model's; a trial that ran no pair has none.
        per_joule_stored = record.tokens_per_joule
        if per_joule_stored is None:
            assert per_joule == "-"
        else:
            assert _close(per_joule, per_joule_stored, 2)
        assert k == (str(record.server.k) if record.server.speculative else "-")
        assert mem == f"{record.server.gpu_memory_utilization:.2f}"
        assert batch == str(record.server.max_num_batched_tokens)
        assert acc == _pct(record.acceptance_rate)
        if record.throughput is not None and record.p95_ttft_ms is not None:
            assert _close(tok_s, record.throughput, 1) and _close(ttft, record.p95_ttft_ms, 0)
            assert stored[int(number)] == [record.throughput, record.p95_ttft_ms]


def _closing_lines(stdout: str, answer: Recommendation) -> None:
    flat = " ".join(stdout.split())  # rich wraps at 80 columns
    numbers = answer.candidate.numbers
    said = re.search(
        r"trial (\d+): .*? simulated: (.*?) output tok/s, p95 TTFT (.*?), ([\d.]+) tok/J "
        r"\(([^()]*)\) ",
        flat,
    )
    assert said is not None, flat[-800:]
    assert int(said.group(1)) == answer.candidate.number
    _estimate(said.group(2), numbers.throughput, 1)
    _estimate(said.group(3), numbers.p95_ttft_ms, 0)
    # The simulator's energy is its power model's: the confirmation runs' mean.
    per_joule = answer.candidate.tokens_per_joule
    assert per_joule is not None and _close(said.group(4), per_joule, 2)
    assert said.group(5) == numbers.runs_note == "mean of 2 runs on fresh servers"


def _exports(copy: StudyCopy, answer: Recommendation) -> None:
    study, space = copy.open()
    numbers = answer.candidate.numbers
    data = json.loads(export(study, space, "json").text)
    facts = data["provenance"]
    assert facts["trial"] == answer.candidate.number
    assert facts["output_tok_s"] == numbers.throughput.value
    assert facts["output_tok_s_ci95"] == [numbers.throughput.low, numbers.throughput.high]
    assert facts["p95_ttft_ms"] == numbers.p95_ttft_ms.value
    assert facts["p95_ttft_ms_ci95"] == [numbers.p95_ttft_ms.low, numbers.p95_ttft_ms.high]
    assert (facts["runs"], facts["confirmed"]) == (numbers.runs, True)
    # best.yaml, as optimize wrote it, says the same: trial, numbers, runs.
    best = (copy.folder / "best.yaml").read_text().splitlines()
    assert best[0].endswith(f"trial {answer.candidate.number} (pick max-throughput)")
    said = re.match(r"# simulated: output (.*?) tok/s .*?, p95 TTFT (.*) \(([^()]*)\)", best[3])
    assert said is not None, best[3]
    _estimate(said.group(1), numbers.throughput, 1)
    _estimate(said.group(2), numbers.p95_ttft_ms, 1)
    assert said.group(3) == numbers.runs_note
    # Per-level bests: each level's own measurement, in the JSON and in best.yaml's notes.
    levels = answer.table.levels
    assert data["speculation_by_level"] == [
        {"concurrency": c.concurrency, "k": c.k, "output_tok_s": c.output_tok_s, "trial": c.trial}
        for c in levels
    ]
    note = next((line for line in best if "best speculation per concurrency level" in line), "")
    for c in levels:
        spelled = "off" if c.k == 0 else f"K={c.k}"
        assert f"{c.concurrency}: {spelled} ({c.output_tok_s:.1f} tok/s" in note


def _report(
    study: optuna.Study,
    space: object,
    answer: Recommendation,
    done: dict[int, TrialRecord],
    tmp_path: Path,
) -> None:
    from tuner.config.space import SearchSpace

    assert isinstance(space, SearchSpace)
    report = write_report(study, space, tmp_path / "report")
    text = html.unescape(report.html.read_text())
    numbers = answer.candidate.numbers
    assert f"Trial {answer.candidate.number}, pick max-throughput" in text
    head = re.search(r"<b>(.*?)</b> output tok/s · p95 TTFT <b>(.*?)</b>", text)
    assert head is not None
    _estimate(head.group(1), numbers.throughput, 1)
    _estimate(head.group(2), numbers.p95_ttft_ms, 0)
    # Best-config rows: a confirmed row shows its confirmation's numbers, a single run what
    # the live table showed for that trial.
    confirmed = {c.number: c for c in report.best if c.confirmed is not None}
    for number, row in re.findall(r"<tr data-trial='(\d+)'>(.*?)</tr>", text):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        tok_s, ttft, source = cells[6], cells[7], cells[10]  # after accept and runner
        if int(number) in confirmed:
            assert source.endswith("· confirmed")
            _estimate(tok_s, confirmed[int(number)].numbers.throughput, 1)
            _estimate(ttft, confirmed[int(number)].numbers.p95_ttft_ms, 0)
        else:
            record = done[int(number)]
            assert record.throughput is not None and record.p95_ttft_ms is not None
            assert _close(tok_s.split()[0], record.throughput, 1), number
            assert _close(ttft.split()[0], record.p95_ttft_ms, 0), number
    assert answer.candidate.number in confirmed
    # The levels table: the speculation column and the winning cell are the export's.
    table = text[text.index("<table id='levels'>") :].split("</table>")[0]
    drafts = re.findall(r"<th>([^<]+)</th>", table.split("</tr>")[0])[1:]
    draft = answer.candidate.record.draft
    for c in answer.table.levels:
        row = re.search(rf"<tr><td>{c.concurrency}</td>(.*?)</tr>", table)
        assert row is not None
        cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
        assert row.group(1).endswith(f"<td class='l'>{'off' if c.k == 0 else f'K={c.k}'}</td>")
        winner = cells[drafts.index("none" if c.k == 0 else draft)]
        assert winner.startswith(f"{c.output_tok_s:.1f}")


def _dashboard(study: optuna.Study, copy: StudyCopy, answer: Recommendation) -> None:
    from optuna_dashboard import get_note  # type: ignore[import-untyped]

    info = prepare_dashboard(study, StudyPaths.of(copy.studies_dir, copy.name, copy.url))
    assert info.recommendation_noted
    note = get_note(study)
    assert note.startswith("## Recommended: ")
    numbers = answer.candidate.numbers
    said = re.search(r"\*\*simulated\*\*: (.*?) output tok/s, p95 TTFT (.*) \(([^()]*)\)", note)
    assert said is not None, note
    assert f"Trial {answer.candidate.number} (pick max-throughput)" in note
    _estimate(said.group(1), numbers.throughput, 1)
    _estimate(said.group(2), numbers.p95_ttft_ms, 0)
    assert said.group(3) == numbers.runs_note
    assert "`vllm serve --config best.yaml`" in note
    # spectune's own note is rewritten (the same), a person's edit of it is kept.
    paths = StudyPaths.of(copy.studies_dir, copy.name, copy.url)
    assert prepare_dashboard(study, paths).recommendation_noted and get_note(study) == note
    from optuna_dashboard import save_note

    save_note(study, note + "\nOurs: we serve this from Monday.\n")
    again = prepare_dashboard(study, paths)
    assert not again.recommendation_noted and get_note(study).endswith("from Monday.\n")
