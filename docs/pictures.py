"""The docs' pictures, made again from a real (simulated) study: ``python docs/pictures.py``.

Runs a short study on the simulator backend in a temporary folder, as a user would from the
shell, and writes into ``docs/guides/img/``:

- ``live-table.txt`` and ``live-table.svg``: the live table's last state, as ``spectune optimize``
  printed it (the text for the report guide, the picture for README);
- ``report.png``: the report's first screen, rendered by headless Chromium;
- ``pareto.png``: the report's Pareto chart, as the report wrote it;

and into ``docs/reference/examples/`` what ``spectune export`` writes in each format.

Needs spectune installed (``pip install -e .``) and Chromium (``SPECTUNE_CHROMIUM``, default
Debian's ``/usr/bin/chromium``). About a minute on one idle core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IMG = Path(__file__).resolve().parent / "guides" / "img"
EXAMPLES = Path(__file__).resolve().parent / "reference" / "examples"
# spectune export's formats (tuner.export.vllm.FORMATS), with the file name each is shown as.
EXPORTS = {
    "vllm": "best.yaml",
    "compose": "docker-compose.yml",
    "docker-run": "run.sh",
    "kubernetes": "vllm.yaml",
    "json": "best.json",
}
STUDY = "pictures"
CHROMIUM = os.environ.get("SPECTUNE_CHROMIUM", "/usr/bin/chromium")
# The spectune of the interpreter that runs this script (a venv's, activated or not).
SPECTUNE = shutil.which("spectune") or str(Path(sys.executable).with_name("spectune"))


def _spectune(folder: Path, *args: str) -> str:
    """One spectune command in ``folder``, as typed in a shell 100 columns wide."""
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    done = subprocess.run(
        [SPECTUNE, *args], cwd=folder, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"spectune {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}")
    return done.stdout


def _live_table(out: str) -> str:
    """The live table's last state: from its title to the progress bar under it."""
    lines = [line.rstrip() for line in out.splitlines()]
    start = next(n for n, line in enumerate(lines) if line.startswith(f"study {STUDY}: "))
    end = next(n for n in range(start, len(lines)) if lines[n].startswith("trials "))
    return "\n".join(lines[start:end]) + "\n"


def _terminal_svg(text: str, svg: Path) -> None:
    """``text`` as a terminal shows it, drawn by Rich (what spectune prints with)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=max(len(line) for line in text.splitlines()) + 2)
    console.print(Text(text), soft_wrap=True)
    console.save_svg(str(svg), title="spectune optimize")


def _screenshot(html: Path, png: Path, profile: Path) -> None:
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1200,1500",
        f"--screenshot={png}",
        html.as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 or not png.is_file():
        sys.exit(f"Chromium made no screenshot of {html}:\n{done.stderr[-2000:]}")


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        common = ("--study", STUDY, "--hardware", "4090x2")
        out = _spectune(
            folder, "optimize", "--backend", "sim", *common, "--trials", "12", "--seed", "1"
        )
        table = _live_table(out)
        (IMG / "live-table.txt").write_text(table)
        _terminal_svg(table, IMG / "live-table.svg")
        report = folder / "report"
        _spectune(folder, "report", STUDY, "--out", str(report))
        _screenshot(report / "report.html", IMG / "report.png", folder / "chromium")
        pareto = sorted(report.glob("*pareto*.png"))
        if pareto:
            shutil.copyfile(pareto[0], IMG / "pareto.png")
        EXAMPLES.mkdir(parents=True, exist_ok=True)
        for fmt, name in EXPORTS.items():
            text = _spectune(folder, "export", STUDY, "--format", fmt)
            (EXAMPLES / name).write_text(text.replace(str(folder), "."))
    print(f"wrote {IMG} and {EXAMPLES}")


if __name__ == "__main__":
    main()
