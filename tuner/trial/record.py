"""What a study stores, written and read in this one module.

Study attributes: the search space (``space``), the kind of numbers it holds (``source``) and
what ran its servers (``run``: a :class:`RunFacts`).

Each trial's outcome is one :class:`TrialRecord`. The study loop writes it with
:meth:`TrialRecord.to_attrs` (Optuna user attributes, one key per field, JSON values) plus the
constraints (``oom``, ``ttft_slo``, ``errors``: :func:`constraint_keys` says which a study
takes) and the two objective values Optuna keeps itself; every reader (picks, points, export,
report, dashboard, CLI) gets it back with :meth:`TrialRecord.from_trial`. Earlier versions'
studies still open: a missing ``status`` reads as ``ok`` (``failed`` for a FAIL trial), a
missing ``source`` as ``measured``, a missing ``errors`` constraint as met.

Each measured (concurrency, temperature) pair is one entry of ``levels``: its summary, its
``temperature`` and ``weight``, its p95 TTFT's order-statistic interval, its failed share, and
how much it was measured: its ``requests``, the ``rounds`` they took, its output tok/s with 95 %
bounds (``tok_s_interval``: low, estimate, high) and why measuring it ``stopped``. A trial that
could not reach the incumbent is PRUNED, with the pairs it measured and the reason (``pruned``);
it has no objective values and no constraints, so nothing recommends it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, field, replace
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import TypeAdapter, field_serializer, field_validator
from pydantic.dataclasses import dataclass

from tuner import serde
from tuner.bench.quality import QualityCheck
from tuner.bench.summary import gpu_summary, level_summary
from tuner.config.space import SearchSpace, space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod, TrialConfig
from tuner.config.vllm_runner import RunnerForecast
from tuner.errors import SpectuneError, StartupFailure
from tuner.launch.served import ServedFacts
from tuner.results import Source
from tuner.trial.run_facts import RUN_ATTR, RunFacts, stored_run
from tuner.trial.scoring import (
    CONSTRAINT_KEYS,
    LEGACY_CONSTRAINT_KEYS,
    QUALITY_KEY,
    STREAM_KEY,
    TPOT_KEY,
    TrialStatus,
)

if TYPE_CHECKING:  # the runner imports the load generator and its HTTP client
    from tuner.trial.runner import TrialOutcome

__all__ = [
    "BUDGET_ATTR",
    "COUNTED_STATES",
    "PROPOSED_ATTR",
    "RECORD_ATTRS",
    "RUN_ATTR",
    "SOURCE_ATTR",
    "SPACE_ATTR",
    "WARM_START_ATTR",
    "RunFacts",
    "TrialRecord",
    "constraint_keys",
    "records",
    "stored_run",
    "stored_space",
]

SPACE_ATTR = "space"
BUDGET_ATTR = "trial_budget"
# States that use up the budget: a FAIL does not, since its retry (WAITING) takes its place.
COUNTED_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.PRUNED)
SOURCE_ATTR = "source"
# The simulator's forecast an enqueued warm-start trial carries (tuner.search.strategy).
WARM_START_ATTR = "warm_start"
# The twin's forecast a config it enqueued carries (tuner.search.proposals).
PROPOSED_ATTR = "twin_proposal"
# What Optuna keeps of a trial itself; every other field of a record is a user attribute.
_TRIAL_OWNED = frozenset({"number", "state", "values", "constraints", "params"})
_LOG_TAIL_CHARS = 4000
# What to_attrs leaves out (``restarted`` False and a 0.0 temperature are written).
_EMPTY: tuple[object, ...] = (None, "", {}, [])
# Fields stored under another name: the key studies have always had.
_STORED_AS = {"trial_temperature": "temperature"}


def stored_space(study: optuna.Study) -> SearchSpace | None:
    """The search space the study was created with; None for a study spectune did not create."""
    raw = study.user_attrs.get(SPACE_ATTR)
    return None if raw is None else space_from_dict(raw, origin=f"study {study.study_name}")


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the study stores it: its config, how it ended, and what it measured.

    The model is its own stored form: :meth:`to_attrs` dumps every field but those Optuna
    keeps itself (number, state, values, constraints, params) as JSON user attributes, and
    :meth:`from_trial` validates them back, enums and nested configs included.

    Attributes:
        number: the Optuna trial number.
        state: Optuna's state: COMPLETE (OOM trials included), PRUNED, FAIL, or RUNNING/WAITING.
        server: the server config the trial ran (or would have run).
        trial_temperature: the trial's temperature when the space tunes it; otherwise the
            workload mix's weighted mean (the mix itself is ``temperature_mix``). Stored as
            ``temperature``.
        status: how it ended (an OOM is COMPLETE with status OOM; a fault is FAILED).
        source: where its numbers came from: measured, simulated, or predicted (OOM predicted).
        values: the objectives Optuna holds, (output tok/s or goodput req/s, p95 TTFT ms);
            pessimistic but finite for OOM trials; None for a trial that did not complete.
        constraints: Optuna's keyed constraints (``oom``, ``ttft_slo``, ``errors``); <= 0 is
            feasible.
        restarted: whether the trial started a server (False when it reused the running one).
        startup_s: the seconds its server took to start until ready, as the runner timed them
            (:mod:`tuner.search.startup` prices each config family's start-ups by them); None
            when it reused the running server, its start failed, or the backend has no
            start-up clock (the simulator). Labelled by ``source`` like every other figure.
        memory: the pre-screen's memory estimate (the fields of ``MemoryEstimate``, in GiB).
        summary: the first measured pair's :func:`level_summary`; empty when nothing was
            measured.
        levels: every measured pair's summary, level by level, temperature by temperature.
        failure: why the server did not start, the trial failed, or is not scored (requests
            failed).
        log_tail: the end of the server log of a failed start.
        duplicate_of: the earlier trial whose result this one reuses ("same as #N").
        worker: ``host/worker-id`` of the worker that ran it.
        params: the Optuna parameters the sampler chose.
        failed_share: failed over sent requests, all pairs together; None when none was sent.
        temperature_mix: the (temperature, share) pairs the trial was measured at.
        served: what its server's log says vLLM ran (attention backend, CUDA graphs, KV cache).
        steps: a goodput trial's (request rate, passed) per step measured, lowest rate first.
        runner: the model runner predicted before launch (logged: ``served.model_runner``).
        pruned: why the trial stopped before its last pair could count (state PRUNED).
        quality: a lossy verifier's answers against standard verification's (None: lossless,
            or nothing measured to check).
        gpu: what the GPUs did through all its measured pairs (:func:`gpu_summary`: energy,
            joules per output token, mean power, clocks, the throttle reasons seen and for how
            long, the power limit, other tenants' memory); on the simulator, its power model's
            energy (``energy_from`` ``model``); None where nothing was read (no NVML, a
            simulated GPU without board power, a study older than this field).
    """

    number: int
    state: TrialState
    server: ServerConfig
    trial_temperature: float
    status: TrialStatus
    source: Source
    values: tuple[float, float] | None = None
    constraints: Mapping[str, float] = field(default_factory=dict)
    restarted: bool = False
    startup_s: float | None = None
    memory: Mapping[str, Any] = field(default_factory=dict)
    summary: Mapping[str, Any] = field(default_factory=dict)
    levels: tuple[Mapping[str, Any], ...] = ()
    failure: str | None = None
    log_tail: str = ""
    duplicate_of: int | None = None
    worker: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    failed_share: float | None = None
    temperature_mix: tuple[tuple[float, float], ...] = ()
    served: ServedFacts | None = None
    steps: tuple[tuple[float, bool], ...] = ()
    runner: RunnerForecast | None = None
    pruned: str | None = None
    quality: QualityCheck | None = None
    gpu: Mapping[str, Any] | None = None

    @classmethod
    def from_outcome(
        cls, number: int, outcome: TrialOutcome, source: Source, worker: str | None = None
    ) -> TrialRecord:
        """The record of a trial that ran (or was predicted out of memory) on ``source``."""
        predicted = outcome.status is TrialStatus.OOM_PREDICTED
        measures = outcome.measures or (None,) * len(outcome.results)
        levels = tuple(
            {**level_summary(r, c), **(serde.dump(m) if m is not None else {})}
            for r, c, m in zip(outcome.results, outcome.conditions, measures, strict=False)
        )
        pruned = outcome.pruned
        return cls(
            number=number,
            state=TrialState.PRUNED if pruned else TrialState.COMPLETE,
            server=outcome.config.server,
            trial_temperature=outcome.config.client.sampling_temperature,
            status=outcome.status,
            source=Source.PREDICTED if predicted else source,
            values=None if pruned else outcome.score.values,
            constraints=outcome.score.keyed(),
            restarted=outcome.restarted,
            startup_s=outcome.startup_s,
            memory=asdict(outcome.memory),
            summary=levels[0] if levels else {},
            levels=levels,
            failure=outcome.failure,
            log_tail=outcome.log_tail,
            worker=worker,
            failed_share=outcome.score.failed_share if outcome.results else None,
            temperature_mix=outcome.config.client.workload.temperature_mix,
            served=outcome.served,
            steps=outcome.score.steps,
            runner=outcome.runner,
            pruned=pruned,
            quality=outcome.quality,
            gpu=gpu_summary(outcome.results) if outcome.results else None,
        )

    @classmethod
    def failed(
        cls,
        number: int,
        config: TrialConfig,
        error: SpectuneError,
        source: Source,
        worker: str | None = None,
    ) -> TrialRecord:
        """The record of a trial that ended in an infrastructure fault (a FAIL trial)."""
        return cls(
            number=number,
            state=TrialState.FAIL,
            server=config.server,
            trial_temperature=config.client.sampling_temperature,
            status=TrialStatus.FAILED,
            source=source,
            failure=str(error),
            log_tail=error.log_tail if isinstance(error, StartupFailure) else "",
            worker=worker,
            temperature_mix=config.client.workload.temperature_mix,
        )

    def reused_by(self, number: int, worker: str | None = None) -> TrialRecord:
        """This record's result, recorded again for trial ``number`` ("same as #N").

        Who ran it, and its logs and failures, stay the original's; nothing restarted. A
        pruned original's copy is pruned too.
        """
        return replace(
            self,
            number=number,
            state=TrialState.PRUNED if self.pruned else TrialState.COMPLETE,
            restarted=False,
            startup_s=None,
            failure=None,
            log_tail="",
            duplicate_of=self.duplicate_of if self.duplicate_of is not None else self.number,
            worker=worker,
        )

    @field_validator("memory", "summary", mode="before")
    @classmethod
    def _null_mapping(cls, value: object) -> object:
        """Earlier versions may have stored null for a field that had nothing."""
        return {} if value is None else value

    @field_validator("levels", "temperature_mix", "steps", mode="before")
    @classmethod
    def _null_sequence(cls, value: object) -> object:
        return () if value is None else value

    @field_serializer("memory", "summary")
    def _finite_mapping(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return _finite(data)

    @field_serializer("levels")
    def _finite_levels(self, levels: tuple[Mapping[str, Any], ...]) -> list[dict[str, Any]]:
        return [_finite(level) for level in levels]

    @field_serializer("log_tail")
    def _tail(self, tail: str) -> str:
        return tail[-_LOG_TAIL_CHARS:]

    def to_attrs(self) -> dict[str, Any]:
        """The user attributes the study loop writes: JSON values; an empty field (nothing
        measured, no failure, not a repeat) is left out."""
        attrs = _STORED.dump_python(self, mode="json", exclude=set(_TRIAL_OWNED))
        return {_STORED_AS.get(k, k): value for k, value in attrs.items() if value not in _EMPTY}

    @classmethod
    def from_trial(cls, trial: FrozenTrial) -> TrialRecord | None:
        """The record of a stored trial; None when it holds no config (not run yet, foreign)."""
        attrs = trial.user_attrs
        if "server" not in attrs:
            return None
        status = TrialStatus.FAILED if trial.state is TrialState.FAIL else TrialStatus.OK
        values = trial.values
        return _STORED.validate_python(
            {
                # What studies older than these fields lack (see the module docstring).
                "trial_temperature": 0.0,
                "status": status,
                "source": Source.MEASURED,
                **{name: attrs[key] for name, key in _FIELD_KEYS.items() if key in attrs},
                "number": trial.number,
                "state": trial.state,
                "values": tuple(values) if values and len(values) == 2 else None,
                "constraints": dict(trial.constraints),
                "params": dict(trial.params),
            }
        )

    @property
    def draft(self) -> str:
        """The draft model id, the method's name (``ngram``), or ``none``."""
        return self.server.draft or SpecMethod.NONE

    @property
    def oom(self) -> bool:
        """Ran out of memory at start-up, or was predicted to."""
        return self.status.oom or self.constraints.get("oom", -1.0) > 0

    @property
    def over_ttft(self) -> bool:
        """Measured, but the p95 TTFT broke the limit."""
        return self.status is TrialStatus.OVER_TTFT or self.constraints.get("ttft_slo", -1.0) > 0

    @property
    def over_stream(self) -> bool:
        """Measured, but its stream paused longer than the space's limit."""
        return self.constraints.get(STREAM_KEY, -1.0) > 0

    @property
    def over_tpot(self) -> bool:
        """Measured, but its tokens came slower than the space's TPOT limit."""
        return self.constraints.get(TPOT_KEY, -1.0) > 0

    @property
    def below_quality(self) -> bool:
        """Measured, but a lossy verifier's answers kept too little of the target's own."""
        return self.constraints.get(QUALITY_KEY, -1.0) > 0

    @property
    def lost_requests(self) -> bool:
        """More requests failed than the space allows: not scored on the rest."""
        return (
            self.status is TrialStatus.FAILED_REQUESTS or self.constraints.get("errors", -1.0) > 0
        )

    @property
    def feasible(self) -> bool:
        """Completed with every constraint met (a missing ``oom`` or ``ttft_slo`` is not met;
        a missing ``errors``, from a study older than it, is)."""
        return (
            self.state is TrialState.COMPLETE
            and not self.lost_requests
            and not self.over_stream
            and not self.over_tpot
            and not self.below_quality
            and all(self.constraints.get(key, 1.0) <= 0 for key in LEGACY_CONSTRAINT_KEYS)
        )

    @property
    def measured(self) -> bool:
        """Completed with numbers that count: not OOM, not failed, no requests lost."""
        return (
            self.state is TrialState.COMPLETE
            and self.values is not None
            and not self.oom
            and not self.lost_requests
        )

    @property
    def tunes_temperature(self) -> bool:
        """Whether the sampler chose this trial's temperature (``search.temperature``)."""
        return "temperature" in self.params

    @property
    def objective(self) -> tuple[float, float]:
        """(throughput, p95 TTFT ms) as Optuna holds them (pessimistic for OOM trials).

        Raises:
            ValueError: the trial did not complete.
        """
        if self.values is None:
            raise ValueError(f"trial {self.number} did not complete: it has no values")
        return self.values

    @property
    def throughput(self) -> float | None:
        """The measured first objective (output tok/s, or goodput req/s in a goodput study);
        None when nothing was measured."""
        return self.values[0] if self.measured and self.values else None

    @property
    def p95_ttft_ms(self) -> float | None:
        """Measured p95 time to first token (ms); None when nothing was measured."""
        return self.values[1] if self.measured and self.values else None

    @property
    def throttled(self) -> bool:
        """Whether heat or a hardware slowdown throttled a measured pair (even after its
        re-measure): its numbers say more about the GPU than the config."""
        return bool(self.gpu and self.gpu.get("throttled_pairs"))

    @property
    def tenants_moved(self) -> bool:
        """Whether other processes' GPU memory moved while a pair was measured (a notebook
        loading a model, a desktop app): the memory the server had to itself changed, so its
        numbers, and any OOM, may be the other tenant's doing."""
        return bool(self.gpu and self.gpu.get("tenants_moved_pairs"))

    @property
    def tokens_per_joule(self) -> float | None:
        """Output tokens per joule of GPU energy, all measured pairs together; None where the
        GPUs were not read."""
        value = self.gpu.get("tokens_per_joule") if self.gpu else None
        return None if value is None else float(value)

    @property
    def joules_per_token(self) -> float | None:
        """GPU joules per output token, all measured pairs together; None where not read."""
        value = self.gpu.get("joules_per_token") if self.gpu else None
        return None if value is None else float(value)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over drafted tokens at the first level; None without speculation."""
        value = self.summary.get("acceptance_rate")
        return None if value is None else float(value)


# Each stored field's user attribute key.
_FIELD_KEYS = {
    name: _STORED_AS.get(name, name)
    for name in TrialRecord.__dataclass_fields__
    if name not in _TRIAL_OWNED
}
# The trial user attributes a record writes: what a retried trial must not inherit.
RECORD_ATTRS = tuple(_FIELD_KEYS.values())
# The record's stored form: pydantic dumps it to JSON values and validates them back.
_STORED = TypeAdapter(TrialRecord)


def records(trials: Iterable[FrozenTrial]) -> list[TrialRecord]:
    """The records among ``trials`` (trials without a recorded config are left out)."""
    found = (TrialRecord.from_trial(t) for t in trials)
    return [r for r in found if r is not None]


def constraint_keys(study: optuna.Study) -> tuple[str, ...]:
    """The constraint keys this study's trials carry (samplers want the same keys on all): a
    study written before ``errors`` existed keeps the two it has; a space that limits the
    stream's smoothness adds ``stream``, one that limits the time per output token
    ``tpot_slo``, one that offers a lossy verifier ``quality``."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        keys = tuple(sorted(k for k in trial.constraints if not k.isdigit()))  # not the legacy list
        if keys:
            return keys
    space = stored_space(study)
    if space is None:
        return CONSTRAINT_KEYS
    limits = (space.stream_gap_limit_ms, space.tpot_limit_ms, space.quality)
    added = [
        key
        for key, limit in zip((STREAM_KEY, TPOT_KEY, QUALITY_KEY), limits, strict=True)
        if limit is not None
    ]
    return tuple(sorted((*CONSTRAINT_KEYS, *added)))


def _finite(data: Mapping[str, Any]) -> dict[str, Any]:
    """JSON has no inf/nan; the database gets None instead."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()
    }
