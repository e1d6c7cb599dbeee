"""``spectune bench`` against the shipped fake server."""

from __future__ import annotations

import json

from testbed.fake_server import RunningServer
from typer.testing import CliRunner

from tuner.cli import app


def test_bench_counts_tokens_from_usage_with_several_tokens_per_chunk(
    server: RunningServer,
) -> None:
    # The server drafts with a 0.5B model, so its chunks carry several tokens each.
    result = CliRunner().invoke(
        app,
        [
            "bench", "--url", server.base_url, "--workload", "code", "--concurrency", "4",
            "--requests", "16", "--max-tokens", "64", "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "measured" and data["errors"] == 0
    assert data["output_tokens"] == 16 * 64  # from usage, not from counting chunks
    assert data["concurrency"] == 4 and data["ttft_p95_ms"] > 0


def test_bench_table_and_model_discovery(server: RunningServer) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench", "--url", server.base_url, "--requests", "4", "--concurrency", "2",
            "--max-tokens", "8",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "(measured)" in result.stdout and "output tok/s" in result.stdout


def test_bench_wrong_model_and_unreachable_server_are_one_line(
    server: RunningServer, closed_port: int
) -> None:
    wrong = CliRunner().invoke(
        app, ["bench", "--url", server.base_url, "--model", "nope", "--requests", "2"]
    )
    assert wrong.exit_code == 2 and "model 'nope' is not served" in wrong.stderr
    gone = CliRunner().invoke(app, ["bench", "--url", f"http://127.0.0.1:{closed_port}"])
    assert gone.exit_code == 2 and "cannot reach" in gone.stderr
    assert len(gone.stderr.strip().splitlines()) == 1
