"""The report leads with its answer: the recommendation, its numbers, its rivals and the command
that serves it, above everything else and on the first screen; cells say what they know."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.testbed.results import StudyCopy, ink, run_chromium
from tuner import serde
from tuner.analysis.estimates import Measured
from tuner.analysis.recommendation import recommendation
from tuner.bench.percentiles import quantile_interval
from tuner.export.vllm import export
from tuner.report.page import write_report
from tuner.search.twin_steer import TWIN_ATTR
from tuner.sim.twin.fit import FittedTwin
from tuner.sim.twin.model import TwinParams

FLAGS = ("--studies-dir", "/srv/studies")


def _section(text: str, start: str, end: str = "</section>") -> str:
    return text[text.index(start) :].split(end)[0]


def test_the_page_opens_with_the_recommendation_and_its_commands(
    levels: StudyCopy, tmp_path: Path
) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path, export_flags=FLAGS)
    text = report.html.read_text()
    body = text[text.index("<body>") :]
    # The headline is the first thing under the title, before the summary and every table.
    assert body.index("<section id='recommended'>") < body.index("<table")
    headline = _section(body, "<section id='recommended'>")
    answer = recommendation(study, space)
    assert answer is not None and report.recommended == answer
    assert f"Trial {answer.candidate.number}, pick max-throughput" in headline
    assert "SIMULATED: predicted by spectune's simulator, not measured on a GPU" in headline
    numbers = answer.candidate.numbers
    assert f"<b>{numbers.throughput.text(1)}</b> output tok/s" in headline
    assert "(one run, not confirmed)" in headline
    # What it beats: every other method's best, "none" first, with the ratio of throughputs.
    rivals = re.findall(r"<tr data-rival='([^']+)'>(.*?)</tr>", headline)
    assert [m for m, _ in rivals] == [r.method for r in answer.rivals]
    assert rivals and rivals[0][0] == "none"
    for (_, row), rival in zip(rivals, answer.rivals, strict=True):
        assert f"<td>{rival.candidate.number}</td>" in row
        assert f"<td>{rival.ratio:.2f}x</td>" in row
    # The exact commands: what writes best.yaml, what serves it, and compose.
    serve = re.search(r"<pre id='serve'>(.*?)</pre>", headline, re.S)
    assert serve is not None
    written, served = serve.group(1).splitlines()
    assert shlex.split(written) == ["spectune", "export", "levels", *FLAGS, "--out", "best.yaml"]
    assert served == "vllm serve --config best.yaml"
    compose = re.search(r"<pre id='compose'>(.*?)</pre>", headline, re.S)
    assert compose is not None and compose.group(1).endswith("\ndocker compose up -d")
    # best.yaml is the config the headline names: the export's own header says so.
    exported = export(study, space, "vllm")
    assert exported.provenance.trial == answer.candidate.number
    assert "use: vllm serve --config FILE" in exported.text


def test_single_run_cells_say_which_bound_they_know(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    text = write_report(study, space, tmp_path).html.read_text()
    methods = text[text.index("<table id='methods'>") :].split("</table>")[0]
    assert "to ?" not in text  # was "95 % bounds 6975 to ?"
    # 128 requests per pair bound a p95 on both sides; each cell says so, and from how many.
    rows = re.findall(r"<tr data-method='[^']+'>(.*?)</tr>", methods)
    assert rows
    for row in rows:
        ttft = re.search(
            r"<td>(\d+) <span class='muted'>\(1 run; 95 % bounds (\d+) to (\d+) "
            r"from (\d+) requests",
            row,
        )
        assert ttft is not None, row
        value, low, high, n = (int(g) for g in ttft.groups())
        assert low <= value <= high and n == 128


def test_few_requests_bound_a_p95_from_below_only() -> None:
    # 32 requests: the order statistics give a lower bound on a p95 but no upper one.
    low, high = quantile_interval([float(i) for i in range(32)], 95)
    assert high is None and low is not None
    estimate = Measured.of_percentile(30.0, (low, high, 32))
    assert estimate.text(0, " ms") == (
        f"30 ms (95 % lower bound {low:.0f} ms from 32 requests, too few for an upper bound)"
    )


def test_twin_intervals_stay_inside_each_factor_domain(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    # A wide posterior, as a few noisy trials give: two sd below 1.24 is below zero.
    twin = FittedTwin(TwinParams(overhead=1.24), {"overhead": 0.63, "outside_gib": 0.5}, 0.5, 9)
    study.set_user_attr(TWIN_ATTR, serde.dump(twin))
    text = write_report(study, space, tmp_path).html.read_text()
    rows = dict(
        (name, (float(value), float(low), float(high)))
        for name, value, low, high in re.findall(
            r"<tr data-factor='(\w+)'><td class='l'>\w+</td><td>([-\d.]+)</td>"
            r"<td>([-\d.]+) \.\. ([-\d.inf]+)</td></tr>",
            text,
        )
    )
    assert set(rows) == {"decode", "draft", "overhead", "prefill", "outside_gib"}
    for name in ("decode", "draft", "overhead", "prefill"):  # time factors: never below zero
        value, low, high = rows[name]
        assert 0 < low <= value <= high, name
    value, low, high = rows["outside_gib"]  # memory beyond the model: either sign
    assert low < 0 < high and low <= value <= high


@pytest.mark.browser
def test_the_first_screen_shows_the_recommendation_and_its_command(
    levels: StudyCopy, tmp_path: Path, chromium: Path
) -> None:
    study, space = levels.open()
    report = write_report(study, space, tmp_path / "out", export_flags=FLAGS)
    # The page has no script of its own; a copy gets one that lists the text Chromium laid out
    # inside the first 1280x800 viewport, so the test reads what a reader sees first.
    probe = tmp_path / "probe.html"
    probe.write_text(report.html.read_text().replace("</body>", _VIEWPORT_PROBE + "</body>"))
    dom = run_chromium(
        chromium,
        tmp_path / "profile",
        probe.as_uri(),
        "--window-size=1280,800",
        "--virtual-time-budget=5000",
        "--dump-dom",
    ).stdout
    seen = re.search(r"<pre id=\"viewport-text\">(.*?)</pre>", dom, re.S)
    assert seen is not None, dom[-2000:]
    first_screen = " ".join(seen.group(1).split())
    answer = report.recommended
    assert answer is not None
    assert "Recommended:" in first_screen
    assert f"K={answer.candidate.record.server.k}" in first_screen
    assert answer.candidate.numbers.throughput.text(1) in first_screen
    assert "SIMULATED" in first_screen
    assert "vllm serve --config best.yaml" in first_screen
    assert "docker compose up -d" in first_screen
    assert "Best configs" not in first_screen  # the tables come after the answer
    shot = tmp_path / "first-screen.png"
    run_chromium(
        chromium,
        tmp_path / "profile",
        report.html.as_uri(),
        "--window-size=1280,800",
        "--hide-scrollbars",
        f"--screenshot={shot}",
    )
    assert shot.is_file() and ink(shot) > 0.001  # the headline's frame and label are coloured


_VIEWPORT_PROBE = """<script>
const seen = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const range = document.createRange();
  range.selectNodeContents(node);
  const box = range.getBoundingClientRect();
  if (box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight) seen.push(node.data);
}
const out = document.createElement("pre");
out.id = "viewport-text";
out.textContent = seen.join(" ");
document.body.appendChild(out);
</script>"""
