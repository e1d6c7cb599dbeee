"""One benchmark of a ready server: check, warm up, measure, and read ``/metrics`` around it.

:func:`measure_endpoint` is the entry point the study runner and ``spectune bench`` call. It

1. checks with the openai SDK that the server lists the model and answers a 1-token request
   (:func:`check_model`), so a wrong model name fails fast with the served names in the message;
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
import openai

from tuner.bench.loadgen import STALLED, Api, run_load
from tuner.bench.metrics import MetricsSnapshot, preemptions_delta, scrape, spec_decode_delta
from tuner.config.workload import ChatMessage, PromptRequest, WorkloadSpec, build_requests
from tuner.errors import ConfigError, MeasurementError
from tuner.results import Endpoint, RequestRecord, Source, TrialResult

__all__ = [
    "check_model",
    "fresh_prompts",
    "measure_endpoint",
    "measure_endpoint_async",
    "served_models",
]

_CONNECT_TIMEOUT_S = 10.0
_SPARE_CONNECTIONS = 4  # for /metrics scrapes beside the load


def check_model(
    base_url: str, model: str, timeout_s: float, *, api: Api = "chat", api_key: str | None = None
) -> None:
    """Checks that the server serves ``model`` and answers a real 1-token request.

    Uses the openai SDK, the client users deploy against, so the check fails the way their
    applications would.

    Args:
        base_url: the server's ``http://host:port``.
        model: the model name requests will carry.
        timeout_s: limit on each of the two calls.
        api: ``"chat"`` sends a chat request (needs a chat template), ``"completions"`` a prompt.
        api_key: bearer token if the server was started with ``--api-key``.

    Raises:
        MeasurementError: the server cannot be reached, does not list ``model`` (the message names
            the models it serves), or does not answer the request.
    """
    root = base_url.rstrip("/")
    client = _openai_client(root, timeout_s, api_key)
    try:
        served = _list_models(client, root)
        if model not in served:
            names = ", ".join(served) or "none"
            raise MeasurementError(
                f"model '{model}' is not served at {root} (it serves: {names}); "
                "pass one of those names as the model"
            )
        try:
            if api == "chat":
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
                )
            else:
                client.completions.create(model=model, prompt="Say OK.", max_tokens=1)
        except openai.APIError as exc:
            # A refused chat request, unlike a timeout, often means a model without a template.
            refused = api == "chat" and isinstance(exc, openai.APIStatusError)
            hint = " (a base model without a chat template needs api 'completions')"
            raise MeasurementError(
                f"model '{model}' at {root} did not answer a 1-token {api} request: "
                f"{_openai_message(exc)}{hint if refused else ''}"
            ) from exc
    finally:
        client.close()


def served_models(
    base_url: str, timeout_s: float = 10.0, *, api_key: str | None = None
) -> list[str]:
    """The model names a server lists at ``/v1/models`` (MeasurementError when unreachable)."""
    root = base_url.rstrip("/")
    client = _openai_client(root, timeout_s, api_key)
    try:
        return _list_models(client, root)
    finally:
        client.close()


def _openai_client(root: str, timeout_s: float, api_key: str | None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{root}/v1", api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0
    )


def _list_models(client: openai.OpenAI, root: str) -> list[str]:
    try:
        return [m.id for m in client.models.list()]
    except openai.APIConnectionError as exc:
        raise MeasurementError(
            f"cannot reach {root}/v1/models ({exc}); is the server up at that address?"
        ) from exc
    except openai.APIStatusError as exc:
        raise MeasurementError(
            f"{root}/v1/models answered HTTP {exc.status_code}; is this an OpenAI-compatible "
            "server (vLLM), and is the API key right?"
        ) from exc


def _openai_message(exc: openai.APIError) -> str:
    message = " ".join(str(exc.message).split())
    if isinstance(exc, openai.APIStatusError):
        message = f"HTTP {exc.status_code}: {message}"
    return message[:200]


def measure_endpoint(
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
        check: run :func:`check_model` first.
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


async def measure_endpoint_async(
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
    async with httpx.AsyncClient(
        transport=transport,
        limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
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


def _result(
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
