"""README's simulator quick start, as written, from a fresh folder."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.userpath.readme_blocks import tagged_block
from tests.userpath.userpath_support import User, recommended

pytestmark = pytest.mark.userpath

STUDY = "qwen2.5-32b-awq-4090x2"  # the default space's name: optimize's default study


def test_the_simulator_quick_start_runs_as_written(user: User) -> None:
    (line,) = tagged_block("sim-quick-start")
    install, _, command = line.partition(" && ")
    assert install == "pip install ."  # what the `installed` fixture ran, offline
    done = user.run(command)
    assert done.returncode == 0, done.stderr[-3000:]
    trial, source, throughput = recommended(done.stdout)
    assert source == "simulated" and f"study {STUDY}: simulated trials" in done.stdout
    studies = user.home / "studies"  # the default, relative to where the user ran it
    best = studies / STUDY / "best.yaml"
    assert (studies / f"{STUDY}.db").is_file() and best.is_file()
    assert f"Wrote {best} (vllm serve --config)" in done.stdout
    header = best.read_text()
    assert f"trial {trial}" in header and f"# simulated: output {throughput:.1f}" in header
    assert yaml.safe_load(header)["tensor-parallel-size"] == 2  # the 4090x2 of the command

    exported = json.loads(user.run(f"spectune export {STUDY} --format json --json").stdout)
    assert (exported["trial"], exported["source"]) == (trial, "simulated")
    assert round(exported["output_tok_s"], 1) == throughput
    # No --trials and no --time-budget: the 2-GPU-hour default, said first, stopped the run.
    assert "no --trials or --time-budget: running to a 2h budget" in done.stderr
    assert "time budget 2h00m of simulated GPU time: stopped after" in done.stdout
    (listed,) = json.loads(user.run("spectune studies --json").stdout)
    assert listed["state"] == "stopped" and 1 <= listed["trials"] < listed["budget"] == 30
    assert listed["best"]["trial"] == trial and round(listed["best"]["throughput"], 1) == throughput
