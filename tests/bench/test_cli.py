"""``spectune bench`` against the shipped fake server."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.testbed.fake_server import RunningServer, StartServer
from tuner.cli import app


def test_bench_counts_tokens_from_usage_with_several_tokens_per_chunk(
    server: RunningServer,
) -> None:
    # The server drafts with a 0.5B model, so its chunks carry several tokens each.
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            server.base_url,
            "--workload",
            "code",
            "--concurrency",
            "4",
            "--requests",
            "16",
            "--max-tokens",
            "64",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "measured" and data["errors"] == 0
    assert data["output_tokens"] == 16 * 64  # from usage, not from counting chunks
    assert data["concurrency"] == 4 and data["ttft_p95_ms"] > 0


def test_bench_table_and_model_discovery(server: RunningServer) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            server.base_url,
            "--requests",
            "4",
            "--concurrency",
            "2",
            "--max-tokens",
            "8",
        ],
    )
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


def test_bench_exits_1_with_one_line_when_requests_failed(start_server: StartServer) -> None:
    broken = start_server("--sim-fault", "http-500-every=3")
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            broken.base_url,
            "--requests",
            "6",
            "--concurrency",
            "1",
            "--output-tokens",
            "8",
            "--json",
        ],
    )
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)  # the numbers still print, with their failed share
    assert data["errors"] == 2 and data["failed_share"] == 2 / 6
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: 2 of 6 requests failed; first: HTTP 500")


def test_bench_replies_end_naturally_unless_max_tokens_forces_them(
    server: RunningServer,
) -> None:
    def run(*flags: str) -> dict[str, object]:
        result = CliRunner().invoke(
            app, ["bench", "--url", server.base_url, "--requests", "2", "--json", *flags]
        )
        assert result.exit_code == 0, result.stderr
        return dict(json.loads(result.stdout))

    # The fake server stops at the cap; forced or natural, usage says how many came.
    assert run("--output-tokens", "12")["output_tokens"] == 2 * 12
    forced = run("--max-tokens", "20")
    assert forced["output_tokens"] == 2 * 20 and forced["notes"] == []
