"""The public power figures the power model is fitted to, the fit, and how wrong it is.

Each :class:`PowerFigure` is a reading someone published: a GPU's draw while it decoded one
stream of a model, with or without speculation, under a stated power limit. The simulator
reproduces its setup on the step-time model (a catalog stand-in where the model is not in the
catalog, named in ``assumed``), reads the step's work and predicts the draw with
:class:`tuner.sim.power.PowerModel`. A figure that reads the power limit itself (the board drew
all it was allowed) only says the demand reached the limit: it counts against the fit only
where the prediction falls short of it.

:func:`fit` finds the weights of memory and compute work that fit the figures best (least
squares on relative error); :func:`held_out` predicts each figure with the weights fitted to
all the others (leave-one-out), and :func:`power_band` is the largest of those held-out errors:
what ``spectune estimate`` prints beside J/token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from pydantic import computed_field, field_serializer

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import ModelSpec, load_model, spec_from_config
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.sim.perfmodel import PerfModel, StepShape
from tuner.sim.power import SHIPPED_POWER, PowerConstants, PowerModel, power_model

__all__ = [
    "FIGURES",
    "PowerBand",
    "PowerFigure",
    "fit",
    "held_out",
    "power_band",
    "predicted_w",
]

SWEEP_5090 = "https://github.com/sudoingX/qwen38-mtp/blob/main/sweeps/rtx-5090.md"
TABLE_4090 = "https://github.com/sudoingX/qwen38-mtp/blob/main/README.md"
CLUB_4090 = "https://github.com/noonghunna/club-3090/issues/697"
_STAND_IN_27B = "Qwen/Qwen2.5-32B-Instruct-AWQ"
_STAND_IN_MTP = "Qwen/Qwen2.5-0.5B-Instruct"
_STAND_IN_METHOD = "draft_model"  # the MTP head's stand-in drafts as a separate model
_QWEN3_4B_FP8 = "Qwen/Qwen3-4B-Instruct-2507-FP8"


@dataclass(frozen=True)
class PowerFigure:
    """One published power reading and the setup the simulator reproduces.

    Attributes:
        id: a short name.
        source: where it was published.
        what: what the source says, in a line.
        hardware: the GPU (``--hardware`` notation; one GPU).
        limit_w: the power limit in force when it was read.
        model: the catalog model decoded (a stand-in where ``assumed`` says so).
        k: speculative tokens (0: none); speculation runs a small draft as a stand-in for the
            source's drafter.
        measured_w: the reading.
        board_w: the board's own default limit where it is not the catalog's (a factory
            overclock); None: the catalog's.
        at_limit: the reading is the power limit: the demand was at least that.
        context: tokens of context each decode step attends to.
        assumed: what the setup takes that the source does not say, and why.
    """

    id: str
    source: str
    what: str
    hardware: str
    limit_w: float
    model: str
    k: int
    measured_w: float
    board_w: float | None = None
    at_limit: bool = False
    context: int = 300
    assumed: str = ""


_27B = (
    "Qwen3.8-27B UD-Q4_K_XL on llama.cpp is not in the catalog: Qwen2.5-32B-Instruct-AWQ, a "
    "dense 4-bit model of its weight, stands in; the MTP head is a 0.5B draft"
)
FIGURES: tuple[PowerFigure, ...] = (
    PowerFigure(
        "5090-off",
        SWEEP_5090,
        "RTX 5090 at its stock 600 W, spec off, p95 draw during decode 537 W",
        "5090",
        600,
        _STAND_IN_27B,
        0,
        537,
        board_w=600,
        assumed=_27B + "; the ASUS TUF board's default limit is 600 W",
    ),
    PowerFigure(
        "5090-k1",
        SWEEP_5090,
        "RTX 5090 at 600 W, MTP n-max 1, 554 W",
        "5090",
        600,
        _STAND_IN_27B,
        1,
        554,
        board_w=600,
        assumed=_27B,
    ),
    PowerFigure(
        "5090-k2",
        SWEEP_5090,
        "RTX 5090 at 600 W, MTP n-max 2, 602 W: the limit",
        "5090",
        600,
        _STAND_IN_27B,
        2,
        602,
        board_w=600,
        at_limit=True,
        assumed=_27B,
    ),
    PowerFigure(
        "5090-k4",
        SWEEP_5090,
        "RTX 5090 at 600 W, MTP n-max 4, 602 W: the limit",
        "5090",
        600,
        _STAND_IN_27B,
        4,
        602,
        board_w=600,
        at_limit=True,
        assumed=_27B,
    ),
    PowerFigure(
        "4090-off",
        TABLE_4090,
        "RTX 4090 at a 500 W limit, baseline (spec off) 353 W",
        "4090",
        500,
        _STAND_IN_27B,
        0,
        353,
        assumed=_27B.replace("UD-Q4_K_XL", "Q4_K_M"),
    ),
    PowerFigure(
        "4090-k2",
        TABLE_4090,
        "RTX 4090 at a 500 W limit, MTP n-max 2, 403 W",
        "4090",
        500,
        _STAND_IN_27B,
        2,
        403,
        assumed=_27B.replace("UD-Q4_K_XL", "Q4_K_M"),
    ),
    PowerFigure(
        "4090-4b",
        CLUB_4090,
        "RTX 4090, vLLM, Qwen3-4B-Instruct-2507 FP8, one stream, 246.6 W at a 500 W cap",
        "4090",
        500,
        _QWEN3_4B_FP8,
        0,
        246.6,
        assumed="Qwen3-4B's config with FP8 weights (the checkpoint is not in the catalog); "
        "no speculation (the report names none); its draw is flat from a 390 W cap up",
    ),
)


@cache
def _model(hf_id: str) -> ModelSpec:
    if hf_id == _QWEN3_4B_FP8:
        base = load_model("Qwen/Qwen3-4B")
        fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
        config = {**base.config, "quantization_config": fp8}
        return spec_from_config(hf_id, config, family=base.tokenizer_family, source=CLUB_4090)
    return load_model(hf_id)


@cache
def _shares(figure: PowerFigure) -> tuple[float, float]:
    """The bandwidth share and tensor share of one decode step of the figure's setup."""
    hardware = parse_hardware(figure.hardware)
    target = _model(figure.model)
    draft = load_model(_STAND_IN_MTP) if figure.k else None
    speculative = (
        SpeculativeConfig(SpecMethod.parse(_STAND_IN_METHOD), figure.k, model=_STAND_IN_MTP)
        if figure.k
        else None
    )
    server = ServerConfig(
        model=target.hf_id,
        tensor_parallel_size=1,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        speculative=speculative,
    )
    perf = PerfModel(hardware, target, draft, server)
    shape = StepShape(1, figure.context, (), 0, graphed=True)
    seconds = perf.step_s(shape)
    work = perf.step_work(shape)
    gpu = hardware.gpu
    memory = work.bytes / (seconds * gpu.bandwidth_gbs * 1e9)
    compute = work.flops / (seconds * gpu.fp16_tflops * 1e12)
    return memory, compute


def _power(figure: PowerFigure, constants: PowerConstants) -> PowerModel:
    """The power model of the figure's GPU, its board's own default limit where it says one."""
    gpu = parse_hardware(figure.hardware).gpu
    if figure.board_w is not None:
        gpu = gpu.model_copy(update={"board_w": figure.board_w})
    model = power_model(gpu, limit_w=figure.limit_w, constants=constants)
    if model is None:
        raise ValueError(f"{gpu.name} has no board power in the catalog")
    return model


def predicted_w(figure: PowerFigure, constants: PowerConstants = SHIPPED_POWER) -> float:
    """The draw the power model predicts for the figure's setup, capped at its limit."""
    memory, compute = _shares(figure)
    model = _power(figure, constants)
    activity = constants.memory * memory + constants.compute * compute
    demand = model.idle_w + (model.board_w - model.idle_w) * activity
    return min(demand, model.limit_w)


def error(figure: PowerFigure, constants: PowerConstants = SHIPPED_POWER) -> float:
    """Relative error of the prediction (0 for a figure at the limit the demand reaches)."""
    predicted = predicted_w(figure, constants)
    if figure.at_limit and predicted >= figure.limit_w:
        return 0.0
    return predicted / figure.measured_w - 1


def fit(figures: Sequence[PowerFigure] = FIGURES) -> PowerConstants:
    """The weights of memory and compute work that fit ``figures`` best.

    Least squares on the relative error, which is linear in the two weights; a figure at the
    limit joins only while the fit predicts less than the limit (it is then held to it).
    """
    active = [f for f in figures if not f.at_limit]
    constants = _least_squares(active)
    for _ in range(len(figures)):
        short = [f for f in figures if f.at_limit and predicted_w(f, constants) < f.limit_w]
        refit = _least_squares([*active, *short])
        if refit == constants:
            break
        constants = refit
    return constants


def _least_squares(figures: Sequence[PowerFigure]) -> PowerConstants:
    rows = []
    for f in figures:
        memory, compute = _shares(f)
        model = _power(f, SHIPPED_POWER)
        span = (model.board_w - model.idle_w) / f.measured_w
        target = min(f.measured_w, f.limit_w)
        rows.append((span * memory, span * compute, (target - model.idle_w) / f.measured_w))
    a11 = sum(r[0] * r[0] for r in rows)
    a12 = sum(r[0] * r[1] for r in rows)
    a22 = sum(r[1] * r[1] for r in rows)
    b1 = sum(r[0] * r[2] for r in rows)
    b2 = sum(r[1] * r[2] for r in rows)
    det = a11 * a22 - a12 * a12
    if abs(det) < 1e-12:
        raise ValueError("the power figures do not pin both weights")
    return PowerConstants(
        memory=round((b1 * a22 - b2 * a12) / det, 3), compute=round((a11 * b2 - a12 * b1) / det, 3)
    )


def held_out(figures: Sequence[PowerFigure] = FIGURES) -> dict[str, float]:
    """Each figure's relative error predicted by the weights fitted to all the others."""
    return {f.id: error(f, fit([other for other in figures if other is not f])) for f in figures}


@dataclass(frozen=True)
class PowerBand:
    """How wrong a simulated power figure may be.

    Attributes:
        figures: the public power figures the model was fitted to.
        sources: how many sources they come from.
        error: the largest of their leave-one-out errors (relative).
    """

    figures: int
    sources: int
    error: float

    def describe(self) -> str:
        """``+/- 26 % (leave-one-out over 7 public power figures, 3 sources)``."""
        return (
            f"+/- {self.error * 100:.0f} % (leave-one-out over {self.figures} public power "
            f"figures, {self.sources} sources)"
        )

    @field_serializer("error")
    def _rounded(self, error: float) -> float:
        return round(error, 4)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def method(self) -> str:
        return "leave-one-out over the public power figures (tuner/sim/power_fit.py)"


@cache
def power_band() -> PowerBand:
    """The band of the shipped power model: the largest held-out error over :data:`FIGURES`."""
    errors = held_out(FIGURES)
    return PowerBand(
        len(FIGURES), len({f.source for f in FIGURES}), max(abs(e) for e in errors.values())
    )
