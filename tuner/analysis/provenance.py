"""Where an exported config came from: study, trial, vLLM, GPUs, driver, numbers and date.

Every export and the report carry this, so a config found in a repository months later still
says what it was measured on and how sure the numbers are. What ran is what the study recorded
when its servers started (:class:`~tuner.trial.record.RunFacts`): the backend, the vLLM version
spoken to (detected where nobody gave one), the image for the docker backend only, and the GPUs
as NVML detected them beside the hardware the study declares.
Studies written before that was recorded fall back to the space's image and version and to
the older ``environment`` attribute. Nothing secret is part of it: no storage URL, token or key.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
    model_validator,
)

from tuner.analysis.estimates import Bounds, Measured, Numbers
from tuner.analysis.picks import Candidate
from tuner.bench.quality import QualityCheck
from tuner.config.prompt_sets import describe_prompt_set
from tuner.config.schema import Objective
from tuner.config.space import SearchSpace
from tuner.launch.served import ServedFacts
from tuner.results import MODELLED, Source
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.model_runner import runner_note
from tuner.trial.record import stored_run

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

__all__ = [
    "ENVIRONMENT_ATTR",
    "Provenance",
    "provenance",
]

ENVIRONMENT_ATTR = "environment"  # NVML's findings, as studies before RunFacts stored them


@dataclass(frozen=True)
class Provenance:
    """The facts an export's header states; as JSON (:func:`tuner.serde.dump`, the JSON
    export's ``provenance``) every field but ``numbers``, which its properties flatten."""

    study: str
    trial: int
    pick: str
    vllm_version: str
    backend: str | None  # sim | process | docker; None: not recorded (older studies)
    image: str | None  # the image that ran (docker); None for the process and sim backends
    hardware: str  # as the study declares it, e.g. "2x RTX 4090"
    gpu: str | None  # as NVML detected it; None: not detected
    gpu_count: int | None
    driver: str | None
    cuda: str | None
    # The candidate's numbers, each with the bounds of its own measurement; stored as the
    # properties below.
    numbers: Annotated[Numbers, Field(exclude=True)]
    target: str
    draft: str
    k: int
    temperatures: tuple[tuple[float, float], ...]  # (temperature, share) measured at
    temperature_tuned: bool  # the study chose it (search.temperature), not the workload
    workload: str
    prompts: str  # the set and where its prompts come from: real or synthetic
    concurrency: tuple[tuple[int, float], ...]  # (level, share of the time)
    ttft_limit_ms: float
    failed_share: float | None  # failed over sent requests in the trial
    max_failed_share: float
    date: str
    served: ServedFacts | None = None  # what the trial's server log says vLLM ran
    stream_gap_limit_ms: float | None = None  # the space's limit on the p99 chunk gap
    tpot_limit_ms: float | None = None  # the space's limit on the p95 time per output token
    objective: Objective = Objective.THROUGHPUT
    rate_steps: tuple[float, ...] = ()  # the request rates a goodput study climbs
    model_runner: str | None = None  # vLLM's model runner for the config, and how it is known
    quality: QualityCheck | None = None  # a lossy verifier's answers against the exact ones
    # What the GPUs did through the trial's measured pairs (TrialRecord.gpu); None: not read.
    gpu_state: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _numbers_read_back(cls, data: Any) -> Any:
        """The numbers from the keys :meth:`_metric_named` and the properties flatten them
        into (a JSON export read back)."""
        if not isinstance(data, dict) or "numbers" in data:
            return data
        data = dict(data)
        metric = Objective(data.get("objective", Objective.THROUGHPUT)).metric
        runs = int(data["runs"])
        bounds = data.get("p95_ttft_ms_bounds")
        ttft = (
            Measured(data["p95_ttft_ms"], bounds[0], bounds[1], Bounds.ORDER_STATISTIC, bounds[2])
            if bounds is not None
            else _measured(data["p95_ttft_ms"], data.get("p95_ttft_ms_ci95"), runs)
        )
        throughput = _measured(data[metric], data.get(f"{metric}_ci95"), runs)
        source, acceptance = Source(data["source"]), data.get("acceptance_rate")
        data["numbers"] = Numbers(source, throughput, ttft, acceptance, runs, data["confirmed"])
        return data

    @model_serializer(mode="wrap")
    def _metric_named(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The first objective under its metric's name (``output_tok_s`` or ``goodput_req_s``)."""
        data: dict[str, Any] = handler(self)
        metric = self.objective.metric
        data[metric] = data.pop("throughput")
        data[f"{metric}_ci95"] = data.pop("throughput_ci95")
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def source(self) -> Source:
        """Where the numbers came from: measured or simulated."""
        return self.numbers.source

    @computed_field  # type: ignore[prop-decorator]
    @property
    def throughput(self) -> float:
        """The first objective: output tok/s, or goodput req/s."""
        return self.numbers.throughput.value

    @computed_field  # type: ignore[prop-decorator]
    @property
    def p95_ttft_ms(self) -> float:
        """The p95 TTFT in ms."""
        return self.numbers.p95_ttft_ms.value

    @computed_field  # type: ignore[prop-decorator]
    @property
    def runs(self) -> int:
        """Measurements behind the numbers."""
        return self.numbers.runs

    @computed_field  # type: ignore[prop-decorator]
    @property
    def confirmed(self) -> bool:
        """Whether the numbers come from confirmation runs on fresh servers."""
        return self.numbers.confirmed

    @computed_field  # type: ignore[prop-decorator]
    @property
    def throughput_ci95(self) -> tuple[float, float] | None:
        """The first objective's 95 % confidence interval, where several runs give one."""
        return _ci(self.numbers.throughput)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def p95_ttft_ms_ci95(self) -> tuple[float, float] | None:
        """The p95 TTFT's 95 % confidence interval, where several runs give one."""
        return _ci(self.numbers.p95_ttft_ms)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def p95_ttft_ms_bounds(self) -> tuple[float | None, float | None, int] | None:
        """The p95 TTFT's order-statistic bounds and the requests behind them, where its
        one run gives them."""
        ttft = self.numbers.p95_ttft_ms
        if ttft.bounds is not Bounds.ORDER_STATISTIC:
            return None
        return ttft.low, ttft.high, ttft.n

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over drafted tokens; None without speculation."""
        return self.numbers.acceptance_rate

    def _ran(self) -> str:
        if self.backend == BackendKind.DOCKER:
            return f"vLLM {self.vllm_version}, image {self.image}"
        if self.backend == BackendKind.PROCESS:
            return f"vLLM {self.vllm_version}, process backend (vllm serve on the host, no image)"
        if self.backend == BackendKind.SIM:
            return f"vLLM {self.vllm_version} flags, simulator (nothing ran)"
        return f"vLLM {self.vllm_version}, image {self.image} (backend not recorded)"

    def _gpus(self) -> str:
        if self.backend == BackendKind.SIM or (
            self.backend is None and self.source is Source.SIMULATED
        ):
            return f"GPUs {self.hardware} (simulated)"
        if self.gpu is None:
            return f"GPUs {self.hardware} as declared; none detected (no NVML)"
        driver = (
            f"driver {self.driver}" + (f", CUDA {self.cuda}" if self.cuda else "")
            if self.driver
            else "driver not recorded"
        )
        return f"GPUs {self.hardware} declared; detected {self.gpu_count}x {self.gpu} ({driver})"

    def lines(self) -> list[str]:
        """The header as text lines (callers add their comment marker)."""
        spec = "no speculation" if self.k == 0 else f"draft {self.draft}, K={self.k}"
        return [
            f"spectune export: study {self.study}, trial {self.trial} (pick {self.pick})",
            f"{self._ran()}; {self._gpus()}",
            f"target {self.target}, {spec}",
            f"{self.source}: {self._numbers()}",
            f"measured on the traffic: {self._load()}; prompts {self.prompts}; {self._limits()}",
            self._temperatures(),
            f"failed requests {_percent(self.failed_share)} "
            f"(at most {self.max_failed_share * 100:g} % allowed)",
            *self._served(),
            *([f"model runner {self.model_runner}"] if self.model_runner else []),
            *self._quality(),
            *self._energy(),
            f"exported {self.date}",
        ]

    def _load(self) -> str:
        if self.objective is Objective.GOODPUT:
            steps = ", ".join(f"{rate:g}" for rate in self.rate_steps)
            return f"request rates climbed {steps} per s (Poisson arrivals)"
        return f"concurrency {_shares(self.concurrency)}"

    def _limits(self) -> str:
        where = "every step" if self.objective is Objective.GOODPUT else "every level"
        limits = [f"p95 TTFT limit {self.ttft_limit_ms:.0f} ms"]
        if self.tpot_limit_ms is not None:
            limits.append(f"p95 TPOT limit {self.tpot_limit_ms:g} ms")
        if self.stream_gap_limit_ms is not None:
            limits.append(f"p99 stream gap limit {self.stream_gap_limit_ms:.0f} ms")
        return ", ".join(limits) + f" at {where}"

    def _quality(self) -> list[str]:
        check = self.quality
        if check is None:
            return []
        return [
            f"LOSSY verification (fly): greedy answers kept {check.similarity * 100:.1f} % of "
            f"standard verification's words, {check.identical} of {check.prompts} identical"
        ]

    def _energy(self) -> list[str]:
        state = self.gpu_state
        if not state or state.get("joules_per_token") is None:
            return []
        source = state.get("energy_from") or "power"
        facts = [
            f"GPU energy {state['joules_per_token']:.3f} J per output token "
            f"({state['tokens_per_joule']:.2f} tok/J, "
            + ("simulated by the power model" if source == MODELLED else source)
            + ")"
        ]
        if state.get("mean_power_w") is not None:  # summed, beside the limit of each GPU
            facts.append(f"mean power {state['mean_power_w']:.0f} W, all GPUs together")
        if state.get("sm_clock_mhz") is not None:
            facts.append(f"SM clock {state['sm_clock_mhz']:.0f} MHz")
        limits = state.get("power_limit_w") or []
        if limits:
            facts.append("power limit " + ", ".join(f"{w:.0f}" for w in limits) + " W")
        held = {r: t for r, t in (state.get("throttled_s") or {}).items() if t}
        if held:
            facts.append("throttled " + ", ".join(f"{r} {t:.1f} s" for r, t in held.items()))
        return ["; ".join(facts)]

    def _served(self) -> list[str]:
        if self.served is None:  # the simulator, or a log that names nothing
            return []
        return [f"vLLM ran: {self.served.describe()}"] + [
            f"WARNING: {w}" for w in self.served.warnings
        ]

    def _temperatures(self) -> str:
        # A description of the traffic measured, never advice: sampling is the product's call.
        if self.temperature_tuned:
            (temperature, _), *_ = self.temperatures
            return (
                f"measured at temperature {temperature:g}, which the study tuned; the server "
                "config was best there (sampling settings stay your product's choice)"
            )
        return (
            f"measured at temperatures {_shares(self.temperatures)} as requests send them; "
            "the server config holds for that mix"
        )

    def _numbers(self) -> str:
        numbers = self.numbers
        accept = (
            ""
            if numbers.acceptance_rate is None
            else f", draft acceptance {numbers.acceptance_rate * 100:.1f} %"
        )
        what, unit = self.objective.label.split()
        there = " there" if self.objective is Objective.GOODPUT else ""
        throughput = numbers.throughput.text(self.objective.digits, f" {unit}")
        ttft = numbers.p95_ttft_ms.text(1, " ms")
        return f"{what} {throughput}, p95 TTFT{there} {ttft} ({numbers.runs_note}){accept}"


def _shares(pairs: tuple[tuple[Any, float], ...]) -> str:
    if len(pairs) == 1:
        return f"{pairs[0][0]:g}"
    return ", ".join(f"{value:g} ({share * 100:.0f} %)" for value, share in pairs)


def _percent(share: float | None) -> str:
    return "not recorded" if share is None else f"{share * 100:.1f} %"


def _measured(value: float, ci95: list[float] | None, runs: int) -> Measured:
    """A mean over ``runs`` with its 95 % interval as JSON wrote it (none: one number)."""
    if ci95 is None:
        return Measured(value, n=runs)
    return Measured(value, ci95[0], ci95[1], Bounds.CI95, runs)


def _ci(estimate: Measured) -> tuple[float, float] | None:
    if estimate.bounds is not Bounds.CI95 or estimate.low is None or estimate.high is None:
        return None
    return estimate.low, estimate.high


def provenance(
    study: optuna.Study,
    space: SearchSpace,
    candidate: Candidate,
    pick: str,
    today: dt.date | None = None,
) -> Provenance:
    """The provenance of exporting ``candidate`` from ``study``."""
    record = candidate.record
    ran = stored_run(study)
    detected = (ran.gpus if ran is not None else study.user_attrs.get(ENVIRONMENT_ATTR)) or {}
    return Provenance(
        study=study.study_name,
        trial=record.number,
        pick=pick,
        vllm_version=ran.vllm_version if ran is not None else str(space.version),
        backend=None if ran is None else ran.backend,
        image=space.vllm_image if ran is None else ran.image,
        hardware=space.hardware.label,
        gpu=detected.get("gpu"),
        gpu_count=detected.get("gpu_count"),
        driver=detected.get("driver"),
        cuda=detected.get("cuda"),
        numbers=candidate.numbers,
        target=record.server.model,
        draft=record.draft,
        k=record.server.k,
        temperatures=record.temperature_mix or ((record.trial_temperature, 1.0),),
        temperature_tuned=record.tunes_temperature,
        workload=space.workload.prompt_set,
        prompts=describe_prompt_set(space.workload.prompt_set),
        concurrency=space.workload.load_profile,
        ttft_limit_ms=space.ttft_limit_ms,
        failed_share=record.failed_share,
        max_failed_share=space.max_failed_requests,
        date=(today or dt.date.today()).isoformat(),
        served=record.served,
        stream_gap_limit_ms=space.stream_gap_limit_ms,
        tpot_limit_ms=space.tpot_limit_ms,
        objective=space.objective,
        rate_steps=space.workload.rate_steps,
        model_runner=runner_note(record),
        quality=record.quality,
        gpu_state=None if record.gpu is None else dict(record.gpu),
    )
