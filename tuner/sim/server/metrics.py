"""The fake server's ``/metrics``: vLLM V1's Prometheus names, labels and counter semantics.

As in vLLM, every sample carries ``engine`` and ``model_name`` labels (sorted, the way
``prometheus_client`` writes them), counters end in ``_total`` with ``# TYPE`` naming the base
name, and the speculative-decoding counters exist only when the server speculates.
``vllm:generation_tokens_total`` counts the tokens sent to clients, which is what a load
generator's ``usage`` totals are checked against. One sample is spectune's own:
``spectune_sim_stream_chunks_total``, the SSE chunks that carried tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.results import SpecDecodeStats

__all__ = ["ServerCounters", "render_metrics"]


@dataclass
class ServerCounters:
    """What the server counts besides the engine's own state.

    Attributes:
        prompt_tokens: prompt tokens of the requests admitted.
        generation_tokens: tokens sent to clients.
        stream_chunks: SSE chunks that carried tokens.
        finished: requests that ran to their end.
    """

    prompt_tokens: int = 0
    generation_tokens: int = 0
    stream_chunks: int = 0
    finished: int = 0


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(
    model_name: str,
    *,
    running: int,
    waiting: int,
    kv_usage: float,
    preemptions: int,
    counters: ServerCounters,
    spec: SpecDecodeStats | None,
) -> str:
    """The text of ``GET /metrics``.

    Args:
        model_name: the first served model name (vLLM's ``model_name`` label).
        running: requests in the running batch.
        waiting: requests queued.
        kv_usage: KV-cache usage, 0..1.
        preemptions: preemptions since start.
        counters: the server's token and request counters.
        spec: the engine's cumulative speculative counters; None without speculation.
    """
    labels = f'engine="0",model_name="{_escape(model_name)}"'
    lines: list[str] = []

    def metric(name: str, kind: str, doc: str, value: float, extra: str = "") -> None:
        base = name.removesuffix("_total") if kind == "counter" else name
        lines.append(f"# HELP {base} {doc}")
        lines.append(f"# TYPE {base} {kind}")
        lines.append(f"{name}{{{labels}{extra}}} {float(value)!r}")

    metric(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        running,
    )
    metric(
        "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting
    )
    metric(
        "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv_usage
    )
    metric(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        preemptions,
    )
    metric(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        counters.prompt_tokens,
    )
    metric(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        counters.generation_tokens,
    )
    metric(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        counters.finished,
        ',finished_reason="length"',
    )
    if spec is not None:
        metric(
            "vllm:spec_decode_num_drafts_total",
            "counter",
            "Number of spec decoding drafts.",
            spec.drafts,
        )
        metric(
            "vllm:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            spec.draft_tokens,
        )
        metric(
            "vllm:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted tokens.",
            spec.accepted_tokens,
        )
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        lines.append(f"# HELP {name.removesuffix('_total')} Accepted tokens per draft position.")
        lines.append(f"# TYPE {name.removesuffix('_total')} counter")
        for position, value in enumerate(spec.accepted_per_position):
            lines.append(f'{name}{{{labels},position="{position}"}} {float(value)!r}')
    metric(
        "spectune_sim_stream_chunks_total",
        "counter",
        "SSE chunks that carried tokens (spectune's simulated server only).",
        counters.stream_chunks,
    )
    return "\n".join(lines) + "\n"
