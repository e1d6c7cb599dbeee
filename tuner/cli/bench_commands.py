"""``spectune bench``: measure a server that is already running, with the study's load generator.

Replies end where the model ends them (capped at ``--output-tokens``), as users' requests do;
``--max-tokens N`` forces every reply to N tokens (``ignore_eos``) for capacity tests. A run in
which requests failed prints its table, then one line saying how many failed, and exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from tuner.cli import options as opt
from tuner.cli.app import app, console, err_console, handle_errors, print_json
from tuner.errors import ConfigError
from tuner.results import STALL_S, Endpoint

__all__ = ["bench_command"]


@app.command("bench")
@handle_errors
def bench_command(
    url: Annotated[str, typer.Option("--url", help="The server, e.g. http://127.0.0.1:8000.")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Model name to request (default: the first one the server lists)."
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload", help="code, creative, chat, long-context, or a JSONL/ShareGPT file."
        ),
    ] = "code",
    concurrency: opt.Concurrency = 4,
    requests: Annotated[
        int, opt.bounded("--requests", "Requests", "Measured requests (about 40 for a p95).")
    ] = 40,
    max_tokens: Annotated[
        int | None,
        opt.bounded(
            "--max-tokens",
            "Tokens",
            "Force every reply to this many tokens (ignore_eos), for capacity tests.",
        ),
    ] = None,
    output_tokens: Annotated[
        int,
        opt.bounded("--output-tokens", "Tokens", "Most tokens a natural reply may have."),
    ] = 256,
    input_tokens: opt.InputTokens = 512,
    temperature: opt.Temperature = 0.0,
    request_rate: Annotated[
        float | None,
        opt.bounded(
            "--request-rate",
            "Rate",
            "Poisson arrivals per second (open loop); default closed loop.",
        ),
    ] = None,
    warmup: Annotated[
        int, opt.bounded("--warmup", "Warmup", "Requests sent first, not measured.")
    ] = 1,
    api: Annotated[str, typer.Option("--api", help="chat or completions.")] = "chat",
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="SPECTUNE_API_KEY",
            show_default=False,
            help="Bearer token for a server started with --api-key (never printed).",
        ),
    ] = None,
    seed: opt.Seed = 0,
    as_json: opt.Json = False,
) -> None:
    """Measure an already running OpenAI-compatible server (e.g. your production vLLM)."""
    # Here, not at the top: HTTP clients, and the workload's schema, only when measuring.
    from tuner.bench.measure import measure_endpoint
    from tuner.bench.summary import level_summary
    from tuner.config.workload import WorkloadSpec

    if api not in ("chat", "completions"):
        raise ConfigError(f"--api {api!r}: choose chat or completions")
    chosen_api: Literal["chat", "completions"] = "chat" if api == "chat" else "completions"
    name = model or _first_model(url, api_key)
    spec = WorkloadSpec(
        prompt_set=workload,
        input_tokens=input_tokens,
        output_tokens=output_tokens if max_tokens is None else max_tokens,
        concurrency=(concurrency,),
        requests=requests,
        warmup=warmup,
        request_rate=request_rate,
        seed=seed,
    )
    result = measure_endpoint(
        Endpoint(url.rstrip("/"), name),
        temperature,
        spec,
        concurrency,
        api=chosen_api,
        api_key=api_key,
        ignore_eos=max_tokens is not None,
    )
    summary = level_summary(result)
    if as_json:
        from tuner.cli.outputs import BenchOutput

        print_json(BenchOutput(url, name, summary))
    else:
        console.print(bench_table(url, name, summary))
    if result.errors:  # a benchmark that lost requests is no measurement of the server
        first = next(r.error for r in result.requests if r.error)
        err_console.print(
            f"error: {result.errors} of {len(result.requests)} requests failed; first: {first}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)


def _first_model(url: str, api_key: str | None) -> str:
    from tuner.bench.model_check import served_models

    models = served_models(url, api_key=api_key)
    if not models:
        raise ConfigError(f"{url} serves no model: pass --model")
    return models[0]


def bench_table(url: str, model: str, s: Mapping[str, Any]) -> Table:
    """The measured metrics of one run (:func:`level_summary`), labelled with its source."""
    table = Table(
        "metric", "value", title=f"{model} at {url} ({s['source']})", title_justify="left"
    )

    def row(name: str, value: object, fmt: str = "{:.1f}") -> None:
        table.add_row(name, "-" if value is None else fmt.format(value))

    row("requests (errors)", f"{s['requests']} ({s['errors']})", "{}")
    row("concurrency", s["concurrency"], "{}")
    row("output tokens (from usage)", s["output_tokens"], "{}")
    row("output tok/s", s["output_tok_s"])
    row("requests/s", s["request_rate"], "{:.2f}")
    for q in (50, 90, 95, 99):
        row(f"TTFT p{q} ms", s[f"ttft_p{q}_ms"])
    low, high = s["ttft_p95_interval_ms"]
    table.add_row(
        "TTFT p95 95 % interval",
        f"{'-' if low is None else f'{low:.1f}'} to "
        f"{'above the largest sample' if high is None else f'{high:.1f}'}",
    )
    row("TPOT p50 ms (per token)", s["tpot_p50_ms"])
    row("TPOT p95 ms (per token)", s["tpot_p95_ms"])
    row("ITL p50 ms (per chunk)", s["itl_p50_ms"])
    row("ITL p95 ms (per chunk)", s["itl_p95_ms"])
    row("ITL p99 ms (per chunk)", s["itl_p99_ms"])
    row("tokens per chunk", s["tokens_per_chunk"], "{:.2f}")
    row(f"chunk gaps over {STALL_S * 1000:.0f} ms", s["stall_share"], "{:.1%}")
    row("draft acceptance", s["acceptance_rate"], "{:.1%}")
    row("mean acceptance length", s["mean_acceptance_length"], "{:.2f}")
    row("KV cache usage (peak)", s["kv_cache_usage"], "{:.1%}")
    row("preemptions", s["preemptions"], "{:.0f}")
    for note in s["notes"]:
        table.add_row("note", str(note))
    return table
