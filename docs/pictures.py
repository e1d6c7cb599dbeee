"""The docs' pictures, made again from a real (simulated) study: ``python docs/pictures.py``.

Runs a short study on the simulator backend in a temporary folder, as a user would from the
shell, and writes into ``docs/guides/img/``:

- ``live-table.txt`` and ``live-table.svg``: the live table's last state, as ``spectune optimize``
  printed it (the text for the report guide, the picture for README);
- ``report.png``: the report's first screen, rendered by headless Chromium;
- ``pareto.png``: the report's Pareto chart, as the report wrote it;

into ``docs/contributors/img/layers.svg`` the package's layers and the imports between them,
read from the code with the rungs ``tests/test_layers.py`` enforces (``--layers``: only this
picture, in a second; ``tests/docs/test_pictures.py`` fails when the committed one is stale);
and into ``docs/reference/examples/`` what ``spectune export`` writes in each format.

Needs spectune installed (``pip install -e .``) and Chromium (``SPECTUNE_CHROMIUM``, default
Debian's ``/usr/bin/chromium``). About a minute on one idle core.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
IMG = DOCS / "guides" / "img"
EXAMPLES = DOCS / "reference" / "examples"
LAYER_PICTURE = DOCS / "contributors" / "img" / "layers.svg"
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


def _layer_rules() -> Any:
    """``tests/test_layers.py``: the one place the rungs are written down."""
    path = DOCS.parent / "tests" / "test_layers.py"
    spec = importlib.util.spec_from_file_location("_layer_rules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BOX_W, _BOX_H, _ROW_H, _WIDTH = 130, 34, 80, 700


def layer_picture() -> str:
    """The layers as an SVG: one row per rung (the CLI on top), one box per package, one arrow
    per pair of packages where one imports the other (hover: how many imports).

    Only what changes with the design is drawn, not sizes, so the picture goes stale when a
    new pair of packages starts to import, and only then."""
    rules = _layer_rules()
    graph: dict[str, set[str]] = rules._graph()
    rungs = [rooms for rooms in rules.LAYERS if rooms != ("__main__",)][::-1]
    centre: dict[str, tuple[float, float]] = {}
    boxes = []
    for row, rooms in enumerate(rungs):
        y = 20 + row * _ROW_H
        for column, room in enumerate(rooms):
            x = (_WIDTH / (len(rooms) + 1)) * (column + 1) - _BOX_W / 2
            centre[room] = (x + _BOX_W / 2, y)
            name = f"{room}/" if (rules.ROOT / room).is_dir() else f"{room}.py"
            boxes.append(
                f'<rect x="{x:.0f}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" '
                'fill="#eef3fb" stroke="#2a5db0"/>'
                f'<text x="{x + _BOX_W / 2:.0f}" y="{y + 22}" class="room">{name}</text>'
            )
    pairs = {
        (rules._room(source), rules._room(target))
        for source, targets in graph.items()
        for target in targets
    }
    arrows = []
    for source, target in sorted(p for p in pairs if p[0] != p[1] and set(p) <= set(centre)):
        (x1, y1), (x2, y2) = centre[source], centre[target]
        arrows.append(
            f'<path class="imp" d="M{x1:.0f},{y1 + _BOX_H} C{x1:.0f},{y1 + _BOX_H + 40} '
            f'{x2:.0f},{y2 - 40} {x2:.0f},{y2}"><title>{source} imports {target}</title></path>'
        )
    height = 20 + len(rungs) * _ROW_H
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif">\n'
        '<defs><marker id="head" viewBox="0 0 8 8" refX="8" refY="4" '
        'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#7a8aa6"/></marker></defs>\n'
        "<style>.imp{fill:none;stroke:#7a8aa6;stroke-width:1.2;stroke-opacity:0.75;"
        "marker-end:url(#head)}"
        ".room{font-size:15px;font-weight:bold;text-anchor:middle;fill:#1b2a44}</style>\n"
        + "\n".join(arrows + boxes)
        + "\n</svg>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", action="store_true", help="only the layer picture")
    LAYER_PICTURE.parent.mkdir(parents=True, exist_ok=True)
    LAYER_PICTURE.write_text(layer_picture())
    if parser.parse_args().layers:
        print(f"wrote {LAYER_PICTURE}")
        return
    IMG.mkdir(parents=True, exist_ok=True)
    # A fixed folder, not a random temporary one: the report prints the studies folder in its
    # export command, and the screenshot should show a path a reader can make sense of.
    folder = Path(tempfile.gettempdir()) / "spectune-demo"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
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
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"wrote {IMG} and {EXAMPLES}")


if __name__ == "__main__":
    main()
