"""The user-path tier's shell and its reading of what optimize prints (fixtures: conftest)."""

from __future__ import annotations

import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["User", "recommended"]


@dataclass
class User:
    """A shell in a fresh folder with the installed ``spectune`` first on PATH."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    def run(self, line: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """``line`` as bash runs it here."""
        return subprocess.run(
            ["bash", "-c", line],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, line: str) -> subprocess.Popen[str]:
        """``line`` in the background (stopped at the end of the test if still running)."""
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=self.home,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Ctrl-C as a terminal delivers it: a pytest started in the background inherits
            # SIGINT ignored, and Python keeps an ignored SIGINT ignored.
            preexec_fn=_default_sigint,
        )
        self.started.append(process)
        return process


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def recommended(output: str) -> tuple[int, str, float]:
    """The trial ``optimize`` recommends, where its numbers come from, and its first objective
    (the confirmed mean where it was confirmed), from the lines it prints at the end."""
    trial = re.search(r"^Recommended \(.*?\): trial (\d+):", output, re.MULTILINE)
    numbers = re.search(r"^  (measured|simulated): ([\d.]+)", output, re.MULTILINE)
    assert trial is not None and numbers is not None, output[-3000:]
    return int(trial.group(1)), numbers.group(1), float(numbers.group(2))
