"""The reference table (``reference_figures.yaml``) as typed records, and each figure's prediction.

    from reference_table import load_table, predict_figure
    table = load_table()
    predict_figure(table.figures[0], SHIPPED)

A figure's setup becomes a server config, a workload and a vLLM version; its kind says what to
read from the simulator (see the YAML's header). Step-level kinds (``step_ms``, ``draft_ms``,
``pass_ratio``, ``lookup_share``) ask the step-time model directly, as the cost models they were
read from are stated per step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tuner.catalog.gpus import Hardware, parse_hardware
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.methods import method_of
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling, Verification
from tuner.config.vllm_version import VllmVersion, parse_version
from tuner.config.workload import WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.band import Regime, method_family, regime_of
from tuner.sim.perfmodel import ForwardPass, PerfModel, StepShape
from tuner.sim.virtual_time import Physics, predict

__all__ = [
    "Figure",
    "FigureKind",
    "ReferenceTable",
    "Setup",
    "Source",
    "load_table",
    "predict_figure",
]

HERE = Path(__file__).parent
TABLE = HERE / "reference_figures.yaml"


class FigureKind(enum.StrEnum):
    """What a figure measures (the YAML header explains each)."""

    TOK_S = "tok_s"
    DECODE_TOK_S = "decode_tok_s"
    TPOT_MS = "tpot_ms"
    TTFT_MS = "ttft_ms"
    SPEEDUP = "speedup"
    SCALING = "scaling"
    ACCEPTANCE_RATE = "acceptance_rate"
    ACCEPTANCE_LENGTH = "acceptance_length"
    LENGTH_RATIO = "length_ratio"
    POSITION_RATE = "position_rate"
    STEP_MS = "step_ms"
    DRAFT_MS = "draft_ms"
    PASS_RATIO = "pass_ratio"
    LOOKUP_SHARE = "lookup_share"


@dataclass(frozen=True)
class Source:
    """Where figures come from.

    Attributes:
        fitted: False for a source read after the constants were fitted (the YAML's
            ``fitted: false``): its figures are held out of the fit and of the 20 % bar.
    """

    key: str
    title: str
    address: str
    fitted: bool = True


@dataclass(frozen=True)
class Setup:
    """What a figure was measured on, as far as the simulator needs it."""

    hardware: str
    model: str
    engine: str
    version: VllmVersion | None
    method: SpecMethod
    draft: str | None = None
    k: int = 0
    concurrency: int = 1
    prompt_set: str = "chat"
    dataset: str = ""
    input_tokens: int = 256
    output_tokens: int = 256
    temperature: float = 0.0
    requests: int = 4
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    batch: int = 1
    context: int = 1024
    parallel_drafting: bool = False
    draft_sample_method: str = "greedy"
    rejection_sample_method: str = "standard"
    enable_adaptive_verification: bool = False

    @property
    def hardware_spec(self) -> Hardware:
        return parse_hardware(self.hardware)

    def target(self) -> ModelSpec:
        return _model(self.model)

    def drafter(self) -> ModelSpec | None:
        return _model(self.draft) if self.draft else None

    def server(self) -> ServerConfig:
        speculative = None
        if self.method != SpecMethod.NONE:
            model = self.draft if method_of(self.method).takes_model else None
            if model is not None:  # a catalog id, or this folder's model as an absolute path
                model = _model(model).hf_id
            lookup = self.method in (SpecMethod.NGRAM, SpecMethod.NGRAM_GPU)
            speculative = SpeculativeConfig(
                self.method,
                self.k,
                model=model,
                prompt_lookup_max=4 if lookup else None,
                prompt_lookup_min=1 if lookup else None,
                parallel_drafting=self.parallel_drafting,
                rejection_sample_method=Verification(self.rejection_sample_method),
                draft_sample_method=DraftSampling(self.draft_sample_method),
                enable_adaptive_verification=self.enable_adaptive_verification,
            )
        return ServerConfig(
            model=self.target().hf_id,
            tensor_parallel_size=self.hardware_spec.count,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_batched_tokens=2048,
            speculative=speculative,
        )

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec(
            self.prompt_set,
            self.input_tokens,
            self.output_tokens,
            concurrency=(self.concurrency,),
            requests=self.requests,
            warmup=0,
        )


@dataclass(frozen=True)
class Figure:
    """One public figure: what its source says and the setup it was measured on.

    Attributes:
        baseline: for ``speedup`` and ``scaling``, the setup the ratio is taken against.
        position: for ``position_rate``, the drafted position (0-based).
        spread: the figure's own relative uncertainty (weights the fit).
        assumed: what the prediction assumes where the source is silent.
        fitted: whether the fit sees the figure: False where its source was read after the
            constants were fitted (:attr:`Source.fitted`).
    """

    id: str
    source: str
    what: str
    kind: FigureKind
    measured: float
    setup: Setup
    baseline: Setup | None = None
    position: int = 0
    spread: float = 0.0
    assumed: str = ""
    fitted: bool = True

    @property
    def regime(self) -> Regime:
        setup = self.setup
        load = setup.batch if self.kind in _STEP_KINDS else setup.concurrency
        return regime_of(setup.hardware_spec, setup.server(), load)

    @property
    def label(self) -> str:
        """GPU class x method family x load, as the regime tables print it."""
        regime = self.regime
        return f"{regime.gpu} / {method_family(self.setup.method)} / {regime.load}"


@dataclass(frozen=True)
class ReferenceTable:
    sources: dict[str, Source]
    figures: tuple[Figure, ...]
    not_used: tuple[dict[str, str], ...]

    @property
    def fitted(self) -> tuple[Figure, ...]:
        """The figures the fit sees (their source has not ``fitted: false``)."""
        return tuple(f for f in self.figures if f.fitted)

    @property
    def unfitted(self) -> tuple[Figure, ...]:
        """The figures of sources read after the fit: held out of it and of the 20 % bar."""
        return tuple(f for f in self.figures if not f.fitted)

    def by_source(self) -> dict[str, tuple[Figure, ...]]:
        grouped: dict[str, list[Figure]] = {}
        for figure in self.figures:
            grouped.setdefault(figure.source, []).append(figure)
        return {key: tuple(figures) for key, figures in grouped.items()}


_STEP_KINDS = frozenset(
    {FigureKind.STEP_MS, FigureKind.DRAFT_MS, FigureKind.PASS_RATIO, FigureKind.LOOKUP_SHARE}
)


def _model(name: str) -> ModelSpec:
    local = HERE / name
    return load_model(str(local) if (local / "config.json").is_file() else name)


def _setup(data: dict[str, Any]) -> Setup:
    fields = dict(data)
    version = fields.pop("version", None)
    fields["method"] = SpecMethod.parse(str(fields["method"]))
    return Setup(**fields, version=None if version is None else parse_version(str(version)))


def load_table(path: Path = TABLE) -> ReferenceTable:
    """Reads the reference table; raises ValueError on a figure naming an unknown source."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    sources = {key: Source(key, **value) for key, value in data["sources"].items()}
    figures = []
    for entry in data["figures"]:
        if entry["source"] not in sources:
            raise ValueError(f"figure {entry['id']} names unknown source {entry['source']!r}")
        setup = _setup(entry["setup"])
        baseline = entry.get("baseline")
        figures.append(
            Figure(
                id=entry["id"],
                source=entry["source"],
                what=" ".join(str(entry["what"]).split()),
                kind=FigureKind(entry["kind"]),
                measured=float(entry["measured"]),
                setup=setup,
                baseline=None if baseline is None else replace(setup, **_baseline(baseline)),
                position=int(entry.get("position", 0)),
                spread=float(entry.get("spread", 0.0)),
                assumed=" ".join(str(entry.get("assumed", "")).split()),
                fitted=sources[entry["source"]].fitted,
            )
        )
    not_used = tuple(
        {key: " ".join(str(value).split()) for key, value in item.items()}
        for item in data.get("not_used", [])
    )
    return ReferenceTable(sources, tuple(figures), not_used)


def _baseline(changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(changes)
    if out.get("version") is not None:
        out["version"] = parse_version(str(out["version"]))
    if out.get("method") is not None:
        out["method"] = SpecMethod.parse(str(out["method"]))
    if out.get("method") == SpecMethod.NONE:
        out.setdefault("draft", None)
        out.setdefault("k", 0)
    return out


def _run(setup: Setup, physics: Physics) -> TrialResult:
    return predict(
        setup.hardware_spec,
        setup.target(),
        setup.drafter() if setup.method == SpecMethod.DRAFT_MODEL else None,
        setup.server(),
        setup.temperature,
        setup.workload(),
        setup.concurrency,
        physics,
        setup.version,
    )


def _perf(setup: Setup, physics: Physics) -> PerfModel:
    draft = setup.drafter() if setup.method == SpecMethod.DRAFT_MODEL else None
    return physics.perf_model(
        setup.hardware_spec, setup.target(), draft, setup.server(), setup.version
    )


def _decode(batch: int, context: int, tokens_per_seq: int) -> ForwardPass:
    total = batch * context
    return ForwardPass(batch * tokens_per_seq, batch, total, tokens_per_seq * total, graphed=True)


def _step_figure(figure: Figure, physics: Physics) -> float:
    setup = figure.setup
    perf = _perf(setup, physics)
    batch, context = setup.batch, setup.context
    if figure.kind is FigureKind.STEP_MS:
        shape = StepShape(batch, batch * context, (), 0, graphed=True)
        return perf.step_s(shape) * 1e3
    if figure.kind is FigureKind.DRAFT_MS:
        return setup.k * perf.draft_pass_s(_decode(batch, context, 1)) * 1e3
    if figure.kind is FigureKind.PASS_RATIO:
        return perf.draft_pass_s(_decode(batch, context, 1)) / perf.target_pass_s(
            _decode(batch, context, 1)
        )
    # LOOKUP_SHARE: the lookup's CPU time over the pass that verifies its proposals.
    lookup = perf.step_overhead_s(batch, 0, True) - perf.step_overhead_s(batch, 0, False)
    return lookup / perf.target_pass_s(_decode(batch, context, 1 + setup.k))


def predict_figure(figure: Figure, physics: Physics) -> float:
    """The simulator's value for ``figure`` under ``physics``, in the figure's own unit.

    Raises:
        ValueError: the simulated run gave no value of that kind (no request completed).
    """
    kind = figure.kind
    if kind in _STEP_KINDS:
        return _step_figure(figure, physics)
    result = _run(figure.setup, physics)
    value: float | None
    if kind is FigureKind.TOK_S:
        value = result.output_tok_s
    elif kind is FigureKind.DECODE_TOK_S:
        tpot = result.tpot_ms(50)
        value = None if not tpot else 1000.0 / tpot
    elif kind is FigureKind.TPOT_MS:
        value = result.tpot_ms(50)
    elif kind is FigureKind.TTFT_MS:
        value = result.ttft_ms(50)
    elif kind is FigureKind.ACCEPTANCE_RATE:
        value = result.acceptance_rate
    elif kind is FigureKind.ACCEPTANCE_LENGTH:
        value = result.mean_acceptance_length
    elif kind is FigureKind.POSITION_RATE:
        stats = result.spec_decode
        value = None if stats is None else stats.per_position_rate[figure.position]
    else:  # SPEEDUP, SCALING, LENGTH_RATIO: against the baseline's run
        if figure.baseline is None:
            raise ValueError(f"figure {figure.id} ({kind}) has no baseline")
        base = _run(figure.baseline, physics)
        if kind is FigureKind.LENGTH_RATIO:
            mine, theirs = result.mean_acceptance_length, base.mean_acceptance_length
            value = None if mine is None or theirs is None else mine / theirs
        else:
            value = result.output_tok_s / base.output_tok_s
    if value is None:
        raise ValueError(f"figure {figure.id}: the simulated run gave no {kind}")
    return float(value)


def gpu_label(figure: Figure) -> str:
    return str(figure.setup.hardware_spec.gpu.memory)
