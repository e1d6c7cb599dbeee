"""README.md stays a front page: short, and every link and picture in it leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_every_relative_link_and_picture_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [target for target in targets if not re.match(r"[a-z]+://", target)]
    assert len(local) >= 20  # the site's pages and the two pictures
    assert "docs/guides/img/report.png" in local and "docs/guides/img/live-table.svg" in local
    missing = [target for target in local if not (ROOT / target).is_file()]
    assert missing == []


def test_every_page_of_the_site_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", README.read_text()))
    pages = {
        str(page.relative_to(ROOT))
        for page in (ROOT / "docs").rglob("*.md")
        if page.name != "index.md"
    }
    assert pages - linked == set()


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _tagged(name: str) -> str:
    found = re.search(
        rf"<!-- user-path: {name}\b[^>]*-->\n```bash\n(.*?)```", README.read_text(), re.S
    )
    assert found is not None, name
    return found.group(1)


def test_the_getting_started_pages_quote_the_readme_blocks_the_user_path_tier_runs() -> None:
    # The tier runs README's blocks; the site's pages must show the same commands, not a copy
    # that drifted.
    gpu_host = (ROOT / "docs/getting-started/gpu-host.md").read_text()
    laptop = (ROOT / "docs/getting-started/laptop.md").read_text()
    assert _bash_blocks(gpu_host)[0] == _tagged("gpu-quick-start")
    assert _bash_blocks(laptop)[0] == _tagged("sim-quick-start")
