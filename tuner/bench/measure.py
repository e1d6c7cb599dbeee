"""One benchmark of a ready server: check, warm up, measure, and read ``/metrics`` around it.

:func:`measure_endpoint` is the entry point the study runner and ``spectune bench`` call. It

1. checks with the openai SDK that the server lists the model and answers a 1-token request
   (:func:`~tuner.bench.model_check.check_model`), so a wrong model name fails fast with the
   served names in the message;
2. sends the warm-up requests and drops their records;
3. scrapes ``/metrics``, runs the measured window while sampling the KV cache gauge for its peak,
   scrapes again, and turns the counter deltas into acceptance and preemption figures;
4. returns a :class:`~tuner.results.TrialResult` marked :attr:`~tuner.results.Source.MEASURED`.

Single failed requests stay in the result as records; only a benchmark in which no request
succeeded (or whose warm-up found the server not answering) raises
:class:`~tuner.errors.MeasurementError`.

No request reuses a prompt the server has seen: each warm-up and measured prompt starts with a
tag of its own (:func:`fresh_prompts`), so vLLM's prefix cache (on by default) cannot serve any
of it from an earlier request, trial or study on the same server. Measured TTFT is then that of
a prompt the server has not seen, whether the server was just started or reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import httpx

from tuner.bench.loadgen import STALLED, Api, run_load
from tuner.bench.metrics import MetricsSnapshot, preemptions_delta, scrape, spec_decode_delta
from tuner.bench.transport import AiohttpTransport
from tuner.config.workload import ChatMessage, PromptRequest, WorkloadSpec, build_requests
from tuner.errors import ConfigError, MeasurementError
from tuner.results import Endpoint, RequestRecord, Source, TrialResult

__all__ = [
    "fresh_prompts",
    "measure_endpoint",
    "measure_endpoint_async",
]

_CONNECT_TIMEOUT_S = 10.0
_SPARE_CONNECTIONS = 4  # for /metrics scrapes beside the load


def measure_endpoint(  # noqa: PLR0913  (one keyword per measurement setting, as bench passes them)
    endpoint: Endpoint,
    temperature: float,
    workload: WorkloadSpec,
    concurrency: int,
    *,
    api: Api = "chat",
    transport: httpx.AsyncBaseTransport | None = None,
    request_timeout_s: float = 120.0,
    check: bool = True,
    check_timeout_s: float = 60.0,
    api_key: str | None = None,
    kv_sample_interval_s: float = 0.5,
    ignore_eos: bool = False,
) -> TrialResult:
    """Benchmarks a ready server at one concurrency level (blocking; see the async twin).

    Args:
        endpoint: the server to measure (``http://host:port``).
        temperature: sampling temperature for every request.
        workload: prompts, lengths, request count or duration, warm-up, rate and seed.
        concurrency: requests in flight (closed loop) or the cap on them (open loop).
        api: ``"chat"`` or ``"completions"``.
        transport: transport for the HTTP client built here (tests, proxies); the client gets a
            connection for every request in flight and is closed at the end.
        request_timeout_s: limit on one request.
        check: run :func:`~tuner.bench.model_check.check_model` first.
        check_timeout_s: limit on each call of the check.
        api_key: bearer token if the server was started with ``--api-key``.
        kv_sample_interval_s: how often ``/metrics`` is read during the window for the peak KV
            cache usage; 0 reads it only before and after.
        ignore_eos: force completions to exactly ``max_tokens`` tokens (capacity tests);
            by default replies end where the model ends them, capped at ``max_tokens``.

    Returns:
        The measured result; failed requests are in it as records with their error.

    Raises:
        MeasurementError: the model check failed or no measured request succeeded.
        ConfigError: a concurrency or request count below 1, or a bad workload.
    """
    return asyncio.run(
        measure_endpoint_async(
            endpoint,
            temperature,
            workload,
            concurrency,
            api=api,
            transport=transport,
            request_timeout_s=request_timeout_s,
            check=check,
            check_timeout_s=check_timeout_s,
            api_key=api_key,
            kv_sample_interval_s=kv_sample_interval_s,
            ignore_eos=ignore_eos,
        )
    )


async def measure_endpoint_async(  # noqa: PLR0913  (one keyword per measurement setting, as bench passes them)
    endpoint: Endpoint,
    temperature: float,
    workload: WorkloadSpec,
    concurrency: int,
    *,
    api: Api = "chat",
    client: httpx.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    request_timeout_s: float = 120.0,
    check: bool = True,
    check_timeout_s: float = 60.0,
    api_key: str | None = None,
    kv_sample_interval_s: float = 0.5,
    ignore_eos: bool = False,
) -> TrialResult:
    """:func:`measure_endpoint` for callers already inside an event loop.

    Takes the same arguments plus ``client``: an HTTP client to use instead of building one (it
    is left open, and should allow ``concurrency`` + 4 connections); ``transport`` is then
    ignored.
    """
    _validate(concurrency)
    base_url, model = endpoint.base_url.rstrip("/"), endpoint.model
    prompts = fresh_prompts(
        build_requests(workload, max(workload.warmup, 0) + max(workload.requests, 1))
    )
    warmup, measured = prompts[: max(workload.warmup, 0)], prompts[max(workload.warmup, 0) :]
    if check:
        from tuner.bench.model_check import check_model  # the SDK only where a server is

        await asyncio.to_thread(
            check_model, base_url, model, check_timeout_s, api=api, api_key=api_key
        )
    async with _client(client, transport, concurrency, request_timeout_s, api_key) as http:
        if warmup:
            warm, _ = await run_load(
                http,
                base_url,
                model,
                warmup,
                concurrency=min(concurrency, len(warmup)),
                temperature=temperature,
                api=api,
                request_timeout_s=request_timeout_s,
                ignore_eos=ignore_eos,
            )
            if any(STALLED in (r.error or "") for r in warm):
                raise MeasurementError(f"{base_url} did not answer the warm-up: {warm[0].error}")
        before = await scrape(http, base_url)
        peak: list[float] = []
        sampler = asyncio.create_task(_sample_kv(http, base_url, kv_sample_interval_s, peak))
        try:
            records, duration = await run_load(
                http,
                base_url,
                model,
                measured,
                concurrency=concurrency,
                temperature=temperature,
                request_rate=workload.request_rate,
                duration_s=workload.duration_s,
                api=api,
                request_timeout_s=request_timeout_s,
                seed=workload.seed,
                ignore_eos=ignore_eos,
            )
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        after = await scrape(http, base_url)
    return _result(
        records, duration, concurrency, before, after, peak, measured, ignore_eos, base_url, model
    )


def fresh_prompts(prompts: Sequence[PromptRequest]) -> list[PromptRequest]:
    """The prompts, each opened by a random tag, so none shares a prefix with any before it.

    vLLM's prefix cache hashes whole blocks from the first token on: a tag in the first block
    makes every block of the prompt new to the server. The tag is a few tokens.
    """
    fresh = []
    for prompt in prompts:
        tag = f"[{secrets.token_hex(6)}] "
        first, *rest = prompt.messages
        messages = (ChatMessage(first.role, tag + first.content), *rest)
        fresh.append(replace(prompt, messages=messages, prompt=tag + prompt.prompt))
    return fresh


def _validate(concurrency: int) -> None:
    # The workload's own fields were checked when it was built (tuner.config.schema).
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, got {concurrency}")


@contextlib.asynccontextmanager
async def _client(
    given: httpx.AsyncClient | None,
    transport: httpx.AsyncBaseTransport | None,
    concurrency: int,
    timeout_s: float,
    api_key: str | None,
) -> AsyncIterator[httpx.AsyncClient]:
    """The injected client as is, or one with a connection for every request in flight."""
    if given is not None:
        yield given
        return
    size = concurrency + _SPARE_CONNECTIONS
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    async with httpx.AsyncClient(
        transport=transport or AiohttpTransport(limits),
        limits=limits,
        timeout=httpx.Timeout(timeout_s, connect=min(_CONNECT_TIMEOUT_S, timeout_s)),
        headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
    ) as client:
        yield client


async def _sample_kv(
    client: httpx.AsyncClient, base_url: str, interval_s: float, values: list[float]
) -> None:
    """Appends the KV cache usage every ``interval_s`` until cancelled."""
    if interval_s <= 0:
        return
    while True:
        snapshot = await scrape(client, base_url)
        if snapshot is None:
            return  # no /metrics: stop asking
        if snapshot.kv_cache_usage is not None:
            values.append(snapshot.kv_cache_usage)
        await asyncio.sleep(interval_s)


def _result(  # noqa: PLR0913  (one keyword per measurement setting, as bench passes them)
    records: list[RequestRecord],
    duration: float,
    concurrency: int,
    before: MetricsSnapshot | None,
    after: MetricsSnapshot | None,
    kv_samples: list[float],
    prompts: Sequence[PromptRequest],
    ignore_eos: bool,
    base_url: str,
    model: str,
) -> TrialResult:
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    if not ok:
        first = failed[0].error if failed else "no request was sent"
        hint = f"; is '{model}' the served model name?" if "HTTP 404" in str(first) else ""
        raise MeasurementError(
            f"no request succeeded against {base_url} (model '{model}'); first error: {first}{hint}"
        )
    notes: list[str] = []
    if failed:
        notes.append(f"{len(failed)} of {len(records)} requests failed; first: {failed[0].error}")
    if before is None:
        notes.append(f"no /metrics at {base_url}: acceptance, KV usage, preemptions not measured")
    elif after is None:
        notes.append(f"{base_url}/metrics stopped answering during the window (server gone?)")
    if ignore_eos:
        asked = sum(prompts[i % len(prompts)].max_tokens for i, r in enumerate(records) if r.ok)
        got = sum(r.completion_tokens or 0 for r in ok)
        if got != asked:
            notes.append(
                f"completion tokens {got} != {asked} asked for with ignore_eos "
                "(the server may ignore ignore_eos or cap max_tokens)"
            )
    kv_values = [
        *kv_samples,
        *(s.kv_cache_usage for s in (before, after) if s and s.kv_cache_usage is not None),
    ]
    return TrialResult(
        source=Source.MEASURED,
        concurrency=concurrency,
        duration_s=duration,
        requests=tuple(records),
        spec_decode=spec_decode_delta(before, after),
        kv_cache_usage=max(kv_values) if kv_values else None,
        preemptions=preemptions_delta(before, after),
        notes=tuple(notes),
    )
