"""The fake server's ``/metrics``: vLLM V1's names and labels, written by ``prometheus_client``.

The numbers live in the scheduler and in :class:`ServerCounters`; :class:`ServerMetrics`, the one
collector in a registry of the server's own, reads them at each scrape, and ``prometheus_client``
writes them as it does for vLLM: every sample carries ``engine`` and ``model_name`` labels, a
counter shows as ``..._total`` with a ``..._created`` start time beside it, and the
speculative-decoding counters exist only when the server speculates.
``vllm:generation_tokens_total`` counts the tokens sent to clients, which is what a load
generator's ``usage`` totals are checked against. Some samples are spectune's own:
``spectune_sim_stream_chunks_total``, the SSE chunks that carried tokens, and what each
simulated GPU draws (``spectune_sim_gpu_power_watts``) and has drawn
(``spectune_sim_gpu_energy_joules_total``), from :mod:`tuner.sim.server.gpu`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from tuner.sim.scheduler import Scheduler
from tuner.sim.server.gpu import GpuTrace

__all__ = ["CONTENT_TYPE", "ServerCounters", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of ``/metrics``, as ``prometheus_client`` answers for vLLM."""
_LABELS = ("engine", "model_name")


@dataclass
class ServerCounters:
    """What the server counts besides the scheduler's own state.

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


class ServerMetrics(Collector):
    """The server's metric families, read from the scheduler and the counters at each scrape.

    Args:
        model_name: the first served model name (vLLM's ``model_name`` label).
        scheduler: the simulated scheduler (running and waiting requests, KV usage, preemptions,
            speculative counters).
        counters: the server's token and request counters.
        gpu: what each simulated GPU draws; None: nothing to show.
    """

    def __init__(
        self,
        model_name: str,
        scheduler: Scheduler,
        counters: ServerCounters,
        gpu: GpuTrace | None = None,
    ) -> None:
        self._labels = ["0", model_name]
        self._scheduler = scheduler
        self._counters = counters
        self._gpu = gpu
        self._created = time.time()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def render(self) -> bytes:
        """The body of ``GET /metrics``."""
        return generate_latest(self._registry)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The families of one scrape, in the order vLLM lists them."""
        scheduler, counters = self._scheduler, self._counters
        yield self._gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            len(scheduler.running),
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            len(scheduler.waiting),
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            scheduler.kv_usage,
        )
        yield self._counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            scheduler.preemptions,
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", counters.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            counters.generation_tokens,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=("engine", "finished_reason", "model_name"),
        )
        success.add_metric(["0", "length", self._labels[1]], counters.finished, self._created)
        yield success
        yield from self._spec_decode()
        yield self._counter(
            "spectune_sim_stream_chunks",
            "SSE chunks that carried tokens (spectune's simulated server only).",
            counters.stream_chunks,
        )
        if self._gpu is not None:
            power, energy = self._gpu.read(time.monotonic())
            yield self._gauge(
                "spectune_sim_gpu_power_watts",
                "What each simulated GPU draws now (spectune's simulated server only).",
                power,
            )
            yield self._counter(
                "spectune_sim_gpu_energy_joules",
                "Energy each simulated GPU drew since start (spectune's simulated server only).",
                energy,
            )

    def _spec_decode(self) -> Iterator[CounterMetricFamily]:
        spec = self._scheduler.spec_stats()
        if spec is None:
            return
        yield self._counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", spec.drafts
        )
        yield self._counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", spec.draft_tokens
        )
        yield self._counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            spec.accepted_tokens,
        )
        per_position = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=(*_LABELS, "position"),
        )
        for position, value in enumerate(spec.accepted_per_position):
            per_position.add_metric([*self._labels, str(position)], value, self._created)
        yield per_position

    def _gauge(self, name: str, documentation: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=_LABELS)
        family.add_metric(self._labels, value)
        return family

    def _counter(self, name: str, documentation: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, documentation, labels=_LABELS)
        family.add_metric(self._labels, value, self._created)
        return family
