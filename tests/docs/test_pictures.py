"""The docs' layer picture is the code's: drawn from the import graph, never by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_layer_picture_is_current() -> None:
    spec = importlib.util.spec_from_file_location("_pictures", ROOT / "docs" / "pictures.py")
    assert spec is not None and spec.loader is not None
    pictures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pictures)
    drawn = pictures.layer_picture()
    assert drawn.count('class="room"') >= 13  # every package and top-level module of tuner/
    committed = pictures.LAYER_PICTURE.read_text()
    assert committed == drawn, "the imports changed: run python docs/pictures.py --layers"
