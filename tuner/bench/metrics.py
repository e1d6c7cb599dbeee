"""vLLM's Prometheus ``/metrics``: its samples and the numbers a trial keeps.

``/metrics`` is scraped before and after the measured window; counters are differenced, so
warm-up traffic and earlier trials on the same server drop out. Both generations of names are
read:

- V1 engine: ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total{position="i"}``,
  ``vllm:kv_cache_usage_perc``, ``vllm:num_preemptions_total``.
- V0 engine: the same draft/accepted token counters plus ``..._num_emitted_tokens_total``
  (accepted + one bonus or recovered token per verification step, so steps = emitted -
  accepted); the KV gauge is ``vllm:gpu_cache_usage_perc``. V0's
  ``vllm:spec_decode_draft_acceptance_rate`` gauge is ignored: it is cumulative since start-up.

Samples with several label sets (``model_name``, ``engine`` for data-parallel ranks) are summed
for counters; the KV cache gauge takes the fullest engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tuner.results import SpecDecodeStats

__all__ = [
    "ACCEPTED_PER_POSITION",
    "ACCEPTED_TOKENS",
    "DRAFTS",
    "DRAFT_TOKENS",
    "EMITTED_TOKENS_V0",
    "KV_CACHE_USAGE",
    "PREEMPTIONS",
    "MetricsSnapshot",
    "Sample",
    "parse_prometheus",
    "preemptions_delta",
    "scrape",
    "spec_decode_delta",
]

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
EMITTED_TOKENS_V0 = "vllm:spec_decode_num_emitted_tokens_total"
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""New name first; the first name a server exposes wins."""
PREEMPTIONS = ("vllm:num_preemptions_total",)

_SCRAPE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name{labels} value``."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        """The value of label ``key``, or None when the sample lacks it."""
        return next((value for name, value in self.labels if name == key), None)


def parse_prometheus(text: str) -> list[Sample]:
    """Parses the Prometheus text exposition format with ``prometheus_client``'s parser.

    Each sample line goes through the parser on its own, for two reasons: the library stops at
    the first line it rejects, and a line it rejects should cost only that line; and it renames
    a bare ``x`` sample under ``# TYPE x counter`` to ``x_total``, while spectune reads names
    as the server wrote them. ``_created`` samples are samples of their own name, never added
    to a counter. Comments, ``# HELP``/``# TYPE`` lines, timestamps and exemplars are skipped.

    Args:
        text: the body of a ``/metrics`` response.

    Returns:
        The samples in their order of appearance.
    """
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            samples.extend(_parse_line(line))
    return samples


def _parse_line(line: str) -> list[Sample]:
    try:
        families = list(text_string_to_metric_families(line))
    except (ValueError, IndexError):  # IndexError: the parser slips on a few malformed labels
        return []
    return [
        Sample(sample.name, tuple(sample.labels.items()), float(sample.value))
        for family in families
        for sample in family.samples
    ]


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of ``/metrics``.

    Attributes:
        samples: every sample of the scrape.
        taken_at: ``time.monotonic()`` when the scrape completed.
    """

    samples: tuple[Sample, ...]
    taken_at: float

    @classmethod
    def from_text(cls, text: str, taken_at: float | None = None) -> MetricsSnapshot:
        """Parses a ``/metrics`` body into a snapshot."""
        taken = time.monotonic() if taken_at is None else taken_at
        return cls(tuple(parse_prometheus(text)), taken)

    def _named(self, names: Iterable[str]) -> list[Sample]:
        """Samples of the first of ``names`` that is present (old/new spellings)."""
        for name in names:
            found = [s for s in self.samples if s.name == name]
            if found:
                return found
        return []

    def total(self, *names: str) -> float | None:
        """Sum over label sets of the first present name; None if none is present."""
        found = self._named(names)
        return sum(s.value for s in found) if found else None

    def maximum(self, *names: str) -> float | None:
        """Largest value over label sets of the first present name; None if absent."""
        found = self._named(names)
        return max(s.value for s in found) if found else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sums of ``name`` grouped by the value of ``label`` (samples without it skipped)."""
        grouped: dict[str, float] = {}
        for sample in self.samples:
            key = sample.label(label) if sample.name == name else None
            if key is not None:
                grouped[key] = grouped.get(key, 0.0) + sample.value
        return grouped

    @property
    def kv_cache_usage(self) -> float | None:
        """KV cache usage as a fraction 0..1 (fullest engine), under either name."""
        return self.maximum(*KV_CACHE_USAGE)

    @property
    def preemptions(self) -> float | None:
        """Preemptions since the server started."""
        return self.total(*PREEMPTIONS)

    @property
    def has_spec_decode(self) -> bool:
        """Whether the server exposes speculative-decoding counters (it speculates)."""
        return self.total(DRAFT_TOKENS) is not None


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> float | None:
    end = after.total(name)
    if end is None:
        return None
    return end - (before.total(name) or 0.0)


def spec_decode_delta(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None
) -> SpecDecodeStats | None:
    """Speculative-decoding counters over the window between two scrapes.

    Args:
        before: the scrape taken just before the measured window.
        after: the scrape taken just after it.

    Returns:
        The deltas, or None when a scrape is missing, the server does not speculate, or a
        counter went backwards (the server restarted in between).
    """
    if before is None or after is None or not after.has_spec_decode:
        return None
    draft_tokens = _delta(before, after, DRAFT_TOKENS)
    accepted = _delta(before, after, ACCEPTED_TOKENS)
    if draft_tokens is None or accepted is None:
        return None
    drafts = _delta(before, after, DRAFTS)
    if drafts is None:
        emitted = _delta(before, after, EMITTED_TOKENS_V0)
        drafts = emitted - accepted if emitted is not None else 0.0
    start = before.by_label(ACCEPTED_PER_POSITION, "position")
    end = after.by_label(ACCEPTED_PER_POSITION, "position")
    positions = sorted(end, key=lambda p: (not p.isdigit(), int(p) if p.isdigit() else 0, p))
    per_position = tuple(end[p] - start.get(p, 0.0) for p in positions)
    if min((drafts, draft_tokens, accepted, *per_position)) < 0:
        return None
    return SpecDecodeStats(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=per_position,
    )


def preemptions_delta(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None
) -> float | None:
    """Preemptions during the window; None when unknown or the counter went backwards."""
    if before is None or after is None or after.preemptions is None:
        return None
    delta = after.preemptions - (before.preemptions or 0.0)
    return delta if delta >= 0 else None


async def scrape(client: httpx.AsyncClient, base_url: str) -> MetricsSnapshot | None:
    """Fetches and parses ``{base_url}/metrics``.

    Args:
        client: the shared HTTP client.
        base_url: the server's ``http://host:port``.

    Returns:
        The snapshot, or None when the endpoint is missing, errs or cannot be reached (metrics
        are a bonus; their absence never fails a trial).
    """
    try:
        response = await client.get(f"{base_url.rstrip('/')}/metrics", timeout=_SCRAPE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    # vLLM's body has hundreds of samples, tens of milliseconds of parsing: in a thread, so
    # the event loop keeps timing the requests under measurement meanwhile.
    return await asyncio.to_thread(MetricsSnapshot.from_text, response.text, time.monotonic())
