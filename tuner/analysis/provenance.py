"""Where an exported config came from: study, trial, vLLM, GPUs, driver, numbers and date.

Every export and the report carry this, so a config found in a repository months later still
says what it was measured on and how sure the numbers are. The GPU driver is known only where
the study ran on real GPUs: :func:`record_environment` stores what NVML reports as the study's
``environment`` attribute (confirmation calls it; nothing is recorded for the simulator).
Nothing secret is part of it: no storage URL, token or key.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from tuner.analysis.picks import Candidate
from tuner.analysis.recommend import TrialView
from tuner.config.space import SearchSpace

__all__ = [
    "ENVIRONMENT_ATTR",
    "Provenance",
    "detect_environment",
    "provenance",
    "record_environment",
]

ENVIRONMENT_ATTR = "environment"
_log = logging.getLogger(__name__)


def detect_environment() -> dict[str, Any] | None:
    """GPU model, count, driver and CUDA driver version through NVML; None without NVML."""
    try:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU, no library: nothing to record
        return None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        names = [
            _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(count)
        ]
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        return {
            "gpu": names[0] if names else None,
            "gpu_count": count,
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
    except Exception as exc:  # an NVML error mid-way: say so, record nothing
        _log.warning("could not read the GPU environment through NVML: %s", exc)
        return None
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def record_environment(study: optuna.Study) -> dict[str, Any] | None:
    """Stores :func:`detect_environment` with the study (where NVML answers); returns it."""
    environment = detect_environment()
    if environment is not None:
        study.set_user_attr(ENVIRONMENT_ATTR, environment)
    return environment


@dataclass(frozen=True)
class Provenance:
    """The facts an export's header states."""

    study: str
    trial: int
    pick: str
    vllm_version: str
    image: str
    gpu: str
    gpu_count: int
    driver: str | None
    cuda: str | None
    source: str  # measured | simulated
    output_tok_s: float
    output_tok_s_ci95: tuple[float, float] | None
    p95_ttft_ms: float
    p95_ttft_ms_ci95: tuple[float, float] | None
    runs: int  # measurements behind the numbers (1: the trial itself, not confirmed)
    acceptance_rate: float | None
    target: str
    draft: str
    k: int
    temperature: float
    workload: str
    concurrency: tuple[int, ...]
    ttft_limit_ms: float
    date: str

    @property
    def confirmed(self) -> bool:
        """Whether the numbers are means of several confirmation runs."""
        return self.runs > 1

    def to_dict(self) -> dict[str, Any]:
        """Every fact as plain JSON data (the JSON export's ``provenance``)."""
        data = asdict(self)
        data["confirmed"] = self.confirmed
        return data

    def lines(self) -> list[str]:
        """The header as text lines (callers add their comment marker)."""
        gpus = f"{self.gpu_count}x {self.gpu}"
        driver = (
            f"driver {self.driver}" + (f", CUDA {self.cuda}" if self.cuda else "")
            if self.driver
            else "driver not recorded"
        )
        spec = "no speculation" if self.k == 0 else f"draft {self.draft}, K={self.k}"
        return [
            f"spectune export: study {self.study}, trial {self.trial} (pick {self.pick})",
            f"vLLM {self.vllm_version}, image {self.image}; GPUs {gpus} ({driver})",
            f"target {self.target}, {spec}",
            f"{self.source}: {self._numbers()}",
            f"workload {self.workload}, concurrency {', '.join(map(str, self.concurrency))}; "
            f"p95 TTFT limit {self.ttft_limit_ms:.0f} ms",
            f"send temperature {self.temperature} with each request (request-side, not a flag)",
            f"exported {self.date}",
        ]

    def _numbers(self) -> str:
        accept = (
            ""
            if self.acceptance_rate is None
            else f", draft acceptance {self.acceptance_rate * 100:.1f} %"
        )
        if self.output_tok_s_ci95 is None or self.p95_ttft_ms_ci95 is None:
            how = "one run, not confirmed" if self.runs <= 1 else f"{self.runs} runs"
            return (
                f"output {self.output_tok_s:.1f} tok/s, p95 TTFT {self.p95_ttft_ms:.1f} ms "
                f"({how}){accept}"
            )
        tok_lo, tok_hi = self.output_tok_s_ci95
        ttft_lo, ttft_hi = self.p95_ttft_ms_ci95
        return (
            f"output {self.output_tok_s:.1f} tok/s (95 % CI {tok_lo:.1f}-{tok_hi:.1f}), "
            f"p95 TTFT {self.p95_ttft_ms:.1f} ms (95 % CI {ttft_lo:.1f}-{ttft_hi:.1f}), "
            f"mean of {self.runs} runs on fresh servers{accept}"
        )


def _ci(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def provenance(
    study: optuna.Study,
    space: SearchSpace,
    candidate: Candidate,
    pick: str,
    today: dt.date | None = None,
) -> Provenance:
    """The provenance of exporting ``candidate`` from ``study``."""
    view: TrialView = candidate.view
    environment = study.user_attrs.get(ENVIRONMENT_ATTR) or {}
    tok_s, ttft = candidate.tok_s_interval, candidate.ttft_interval
    confirmed = candidate.confirmed
    runs = len(confirmed.measured) if confirmed is not None else 1
    accept = None
    if confirmed is not None:
        rates = [r.acceptance_rate for r in confirmed.measured if r.acceptance_rate is not None]
        accept = sum(rates) / len(rates) if rates else None
    else:
        accept = view.acceptance_rate
    return Provenance(
        study=study.study_name,
        trial=view.number,
        pick=pick,
        vllm_version=str(space.version),
        image=space.vllm_image,
        gpu=str(environment.get("gpu") or space.hardware.gpu.name),
        gpu_count=int(environment.get("gpu_count") or space.hardware.count),
        driver=environment.get("driver"),
        cuda=environment.get("cuda"),
        source=confirmed.source if confirmed is not None else view.source,
        output_tok_s=candidate.output_tok_s,
        output_tok_s_ci95=None if tok_s is None else _ci(tok_s.low, tok_s.high),
        p95_ttft_ms=candidate.p95_ttft_ms,
        p95_ttft_ms_ci95=None if ttft is None else _ci(ttft.low, ttft.high),
        runs=runs,
        acceptance_rate=accept,
        target=view.server.model,
        draft=view.draft,
        k=view.server.k,
        temperature=view.temperature,
        workload=space.workload.prompt_set,
        concurrency=space.workload.concurrency,
        ttft_limit_ms=space.ttft_limit_ms,
        date=(today or dt.date.today()).isoformat(),
    )
