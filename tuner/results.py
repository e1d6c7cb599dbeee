"""The records every backend produces: one per request, one per benchmark run.

The load generator (real servers) and the simulator fill the same :class:`TrialResult`, so scoring,
storage, export and reports never ask which backend ran. Records keep raw timestamps; latencies
and rates are derived properties. Failed requests stay in the record with their error.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MODELLED",
    "STALL_S",
    "TENANT_MOVE_GIB",
    "THROTTLED_SHARE",
    "Endpoint",
    "GpuWindow",
    "OnStartup",
    "RequestRecord",
    "Source",
    "SpecDecodeStats",
    "StartupEvent",
    "Throttle",
    "TrialResult",
    "percentile",
]


# A window throttled by heat or a hardware slowdown for at least this share of its length is a
# throttled measurement: a single reading of a transient slowdown is recorded, not held against
# the config.
THROTTLED_SHARE = 0.05

# Other processes' GPU memory that moved this much inside a measured window marks it: about the
# headroom a study leaves them on vLLM 0.34 (server.memory_headroom_gib's smallest step), and
# far above the tens of MiB a desktop's compositor moves by on its own.
TENANT_MOVE_GIB = 0.5

# A gap between streamed chunks that a reader notices as a stall (the field notes' "a 200 ms
# stall, then four words at once"); 150 ms is about where streamed text stops reading as smooth.
STALL_S = 0.150


@dataclass(frozen=True)
class Endpoint:
    """A ready server: where to send requests and under which model name.

    ``base_url`` is ``http://host:port`` for real servers; the simulator, which its backend
    measures in virtual time, puts a description there.
    """

    base_url: str
    model: str
    log_path: Path | None = None


@dataclass(frozen=True)
class StartupEvent:
    """What a server start is doing now, for the live table: pulling the image, downloading
    weights, then vLLM's own phases as its log shows them (loading weights, compiling,
    capturing graphs, ready).

    Attributes:
        phase: what it is doing, in a few words.
        detail: what is known of its progress, e.g. ``"1.2 of 3.4 GB, 2 of 5 layers"``.
        done: how far it is, in the unit of ``total``; None when unknown.
        total: where it ends; None when unknown.
        elapsed_s: seconds since this start began (pulls and downloads have their own clock).
    """

    phase: str
    detail: str = ""
    done: float | None = None
    total: float | None = None
    elapsed_s: float = 0.0


OnStartup = Callable[[StartupEvent], None]


class Source(enum.StrEnum):
    """Where a number came from; every number a user sees carries one."""

    MEASURED = "measured"
    SIMULATED = "simulated"
    PREDICTED = "predicted"


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class RequestRecord:
    """One request's raw timeline, in seconds on a monotonic clock.

    ``chunk_times`` holds the arrival of every streamed chunk that carried text; with speculative
    decoding one chunk can carry several tokens, so token counts come from the server's ``usage``.

    ``server_ttft_s`` and ``server_queue_s`` are durations the server itself reported in its
    response's ``metrics`` object (vLLM started with ``--enable-per-request-metrics``; 0.32.0
    to 0.34.0 were read to send it): its ``time_to_first_token_ms`` and ``queue_time_ms`` in
    seconds. They sit beside the client's timeline, never replace it, and are None where the
    release sends no ``metrics``. vLLM's TTFT counts from when the request was first scheduled,
    so it leaves out the queue time, which the client's :attr:`ttft` includes (with the network).
    """

    start: float
    first_token: float | None = None
    end: float | None = None
    chunk_times: tuple[float, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    server_ttft_s: float | None = None
    server_queue_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start

    @property
    def e2e_latency(self) -> float | None:
        return None if self.end is None else self.end - self.start

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.first_token is None or self.end is None or not self.completion_tokens:
            return None
        if self.completion_tokens < 2:
            return None
        return (self.end - self.first_token) / (self.completion_tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive chunks (inter-token latency as a client sees it)."""
        times = self.chunk_times
        return [b - a for a, b in itertools.pairwise(times)]


@dataclass(frozen=True)
class SpecDecodeStats:
    """Speculative-decoding counters over the measured window (deltas of vLLM's /metrics)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: tuple[float, ...] = ()

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens produced per verification step: the bonus token plus the accepted drafts."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_rate(self) -> tuple[float, ...]:
        return tuple(a / self.drafts for a in self.accepted_per_position) if self.drafts else ()


class Throttle(enum.StrEnum):
    """Why the GPU held its clocks down, as NVML's clocks-event reasons group them.

    ``power_cap`` is the power limit in force: a limit the user set is the condition the study
    measures under, not a fault. ``thermal`` (the GPU's own or the driver's thermal slowdown)
    and ``hw_slowdown`` (an external slowdown signal or power brake) are the GPU's state, not
    the config's: a pair measured under them is not a fair measurement of its config.
    """

    POWER_CAP = "power_cap"
    THERMAL = "thermal"
    HW_SLOWDOWN = "hw_slowdown"

    @property
    def distorts(self) -> bool:
        """Whether a measurement under this reason says more about the GPU than the config."""
        return self is not Throttle.POWER_CAP


MODELLED = "model"
"""``GpuWindow.energy_from`` of a simulated window: the simulator's power model, no GPU read."""


@dataclass(frozen=True)
class GpuWindow:
    """What the GPUs did through one measured window, all of the study's GPUs together.

    Attributes:
        seconds: the window's length the figures cover.
        samples: readings taken in it (per GPU).
        energy_j: joules drawn by all GPUs through the window: from the boards' energy
            counters where they have one, else mean power times time (``energy_from``).
        energy_from: ``"counter"``, ``"power"``, or ``"model"`` (the simulator's power model,
            :mod:`tuner.sim.power`: no GPU was read).
        mean_power_w: mean board power, all GPUs summed.
        sm_clock_mhz: mean SM clock over readings and GPUs.
        memory_clock_mhz: mean memory clock over readings and GPUs.
        max_temperature_c: the hottest reading of any GPU.
        power_limit_w: the power limit in force per GPU (the last reading's).
        throttled_s: seconds each :class:`Throttle` reason was seen on any GPU (a reading
            counts for the time until the next).
        others_memory_gib: the most memory held on the GPUs by processes other than the
            server, summed over GPUs; None where NVML lists no processes.
        others_memory_change_gib: how far that memory moved within the window.
    """

    seconds: float
    samples: int
    energy_j: float | None = None
    energy_from: str | None = None
    mean_power_w: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    max_temperature_c: float | None = None
    power_limit_w: tuple[float, ...] = ()
    throttled_s: dict[str, float] = field(default_factory=dict)
    others_memory_gib: float | None = None
    others_memory_change_gib: float | None = None

    @property
    def distorted_s(self) -> float:
        """Seconds the window ran under a reason that :attr:`Throttle.distorts` (the longest)."""
        return max(
            (s for reason, s in self.throttled_s.items() if Throttle(reason).distorts),
            default=0.0,
        )

    @property
    def throttled(self) -> bool:
        """Whether heat or a hardware slowdown held the clocks down for at least
        :data:`THROTTLED_SHARE` of the window: a measurement of the GPU's state, not the
        config's."""
        return self.seconds > 0 and self.distorted_s >= THROTTLED_SHARE * self.seconds

    @property
    def tenants_moved(self) -> bool:
        """Whether other processes' GPU memory moved by :data:`TENANT_MOVE_GIB` or more
        inside the window: the memory the server had to itself changed while measured."""
        change = self.others_memory_change_gib
        return change is not None and change >= TENANT_MOVE_GIB

    def reasons_text(self) -> str:
        """The distorting reasons with their seconds and the peak temperature, for a note:
        ``thermal 2.1 s of 4.0 s, up to 91 °C``."""
        held = ", ".join(
            f"{reason} {s:.1f} s"
            for reason, s in self.throttled_s.items()
            if Throttle(reason).distorts and s > 0
        )
        heat = (
            f", up to {self.max_temperature_c:.0f} °C" if self.max_temperature_c is not None else ""
        )
        return f"{held} of {self.seconds:.1f} s{heat}"


@dataclass(frozen=True)
class TrialResult:
    """One benchmark run of one server config at one concurrency level."""

    source: Source
    concurrency: int
    duration_s: float
    requests: tuple[RequestRecord, ...]
    spec_decode: SpecDecodeStats | None = None
    kv_cache_usage: float | None = None  # peak fraction 0..1
    preemptions: float | None = None
    peak_memory_gib: tuple[float, ...] = ()  # per GPU
    notes: tuple[str, ...] = field(default=())
    gpu: GpuWindow | None = None  # what the GPUs did through the measured window

    @property
    def window(self) -> tuple[float, float] | None:
        """The measured window on the monotonic clock the requests' timestamps use; None
        without requests (the simulator's clock is virtual: its records start at 0)."""
        if not self.requests:
            return None
        start = min(r.start for r in self.requests)
        return start, start + self.duration_s

    @property
    def joules_per_token(self) -> float | None:
        """GPU energy per output token through the measured window; None where not measured."""
        energy = self.gpu.energy_j if self.gpu is not None else None
        return energy / self.output_tokens if energy and self.output_tokens else None

    @property
    def tokens_per_joule(self) -> float | None:
        """Output tokens per joule of GPU energy; None where energy was not measured."""
        per_token = self.joules_per_token
        return 1.0 / per_token if per_token else None

    @property
    def succeeded(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.ok]

    @property
    def errors(self) -> int:
        return sum(1 for r in self.requests if not r.ok)

    @property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.succeeded)

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def request_rate(self) -> float:
        return len(self.succeeded) / self.duration_s if self.duration_s > 0 else 0.0

    def ttft_ms(self, q: float) -> float | None:
        value = percentile([r.ttft for r in self.succeeded if r.ttft is not None], q)
        return None if value is None else value * 1000.0

    def server_ttft_ms(self, q: float) -> float | None:
        """The ``q`` percentile of the TTFT the server reported; None where it reported none."""
        value = percentile(
            [r.server_ttft_s for r in self.succeeded if r.server_ttft_s is not None], q
        )
        return None if value is None else value * 1000.0

    def server_queue_ms(self, q: float) -> float | None:
        """The ``q`` percentile of the queue time the server reported; None where it sent none."""
        value = percentile(
            [r.server_queue_s for r in self.succeeded if r.server_queue_s is not None], q
        )
        return None if value is None else value * 1000.0

    def itl_ms(self, q: float) -> float | None:
        value = percentile([gap for r in self.succeeded for gap in r.itl], q)
        return None if value is None else value * 1000.0

    @property
    def tokens_per_chunk(self) -> float | None:
        """Mean output tokens per streamed chunk: above 1, the reader gets tokens in bursts."""
        chunks = sum(len(r.chunk_times) for r in self.succeeded)
        return self.output_tokens / chunks if chunks else None

    @property
    def stall_share(self) -> float | None:
        """Share of gaps between chunks longer than :data:`STALL_S`, a pause a reader sees."""
        gaps = [gap for r in self.succeeded for gap in r.itl]
        return sum(g > STALL_S for g in gaps) / len(gaps) if gaps else None

    def tpot_ms(self, q: float) -> float | None:
        value = percentile([r.tpot for r in self.succeeded if r.tpot is not None], q)
        return None if value is None else value * 1000.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.spec_decode.acceptance_rate if self.spec_decode else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return self.spec_decode.mean_acceptance_length if self.spec_decode else None

    def summary(self) -> dict[str, Any]:
        """The aggregates, as stored with the trial and printed with ``--json``."""
        return {
            "source": self.source.value,
            "concurrency": self.concurrency,
            "requests": len(self.requests),
            "errors": self.errors,
            "duration_s": self.duration_s,
            "output_tokens": self.output_tokens,
            "output_tok_s": self.output_tok_s,
            "request_rate": self.request_rate,
            **{f"ttft_p{q}_ms": self.ttft_ms(q) for q in (50, 90, 95, 99)},
            **{f"itl_p{q}_ms": self.itl_ms(q) for q in (50, 95, 99)},
            "tokens_per_chunk": self.tokens_per_chunk,
            "stall_share": self.stall_share,
            "tpot_p50_ms": self.tpot_ms(50),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_per_position": list(self.spec_decode.per_position_rate)
            if self.spec_decode
            else [],
            # The steps the rates count: their sample size (tuner.sim.twin.counters).
            "spec_drafts": self.spec_decode.drafts if self.spec_decode else None,
            "kv_cache_usage": self.kv_cache_usage,
            "preemptions": self.preemptions,
            "peak_memory_gib": list(self.peak_memory_gib),
            "notes": list(self.notes),
            **self._gpu_summary(),
        }

    def _gpu_summary(self) -> dict[str, Any]:
        """The GPU window's figures under ``gpu_*`` keys; none where nothing was sampled (a
        reader of an older study finds the keys missing, as it finds them here)."""
        if self.gpu is None:
            return {}
        window = asdict(self.gpu)
        return {
            **{f"gpu_{key}": value for key, value in window.items()},
            "gpu_throttled": self.gpu.throttled,
            "gpu_power_limit_w": list(self.gpu.power_limit_w),
            "joules_per_token": self.joules_per_token,
            "tokens_per_joule": self.tokens_per_joule,
        }
