"""Prints the simulator's predictions next to the field notes' reference run A (BRIEF.md).

    python benchmarks/simulator_reference.py

Rows: 2x RTX 4090, TP 2, Qwen2.5-32B-Instruct-AWQ, 0.5B draft, gpu-memory-utilization 0.92,
one streaming request, temperature 0.2. Then the best K for code completion, the speed-up by
temperature and by concurrency, and the memory verdicts. Every figure printed is predicted.

Then :data:`METHOD_FIGURES`: the public measured figure of each speculation method, its source,
the prediction for the same setting and the error (``tests/sim/test_sim_methods.py`` holds each
prediction to its tolerance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import MODEL_METHODS, ServerConfig, SpeculativeConfig
from tuner.config.workload import WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.engine import predict
from tuner.sim.memory import estimate_memory
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_ROWS,
    REFERENCE_TARGET,
    REFERENCE_TEMPERATURE,
    REFERENCE_WORKLOADS,
    reference_server,
)

HW = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)


def _tok_s(
    k: int, workload: str = "code", temperature: float = REFERENCE_TEMPERATURE, concurrency: int = 1
) -> float:
    spec = REFERENCE_WORKLOADS[workload]
    if concurrency > 1:
        from dataclasses import replace

        spec = replace(spec, concurrency=(concurrency,), requests=4 * concurrency)
    result = predict(
        HW, TARGET, DRAFT if k else None, reference_server(k), temperature, spec, concurrency
    )
    return result.output_tok_s


@dataclass(frozen=True)
class Setting:
    """One speculation setting on one machine: what a public figure was measured on."""

    hardware: str
    target: str
    method: str  # "none" for the baseline
    k: int = 0
    model: str | None = None
    prompt_set: str = "chat"
    concurrency: int = 1
    tp: int = 1

    def run(self, method: str | None = None, k: int | None = None) -> TrialResult:
        """The noise-free prediction of this setting (or of another method/K on it)."""
        method, k = method or self.method, self.k if k is None else k
        spec = None
        if method != "none":
            model = self.model if method in MODEL_METHODS else None
            spec = SpeculativeConfig(
                method, k, model=model, prompt_lookup_max=4, prompt_lookup_min=1
            )
        server = ServerConfig(self.target, self.tp, 4096, 0.9, 2048, spec)
        draft = load_model(spec.model) if spec is not None and spec.model else None
        workload = WorkloadSpec(self.prompt_set, 512, 256, concurrency=(self.concurrency,),
                                requests=max(4, 2 * self.concurrency), warmup=0)  # fmt: skip
        hardware = parse_hardware(self.hardware)
        return predict(hardware, load_model(self.target), draft, server, 0.0, workload,
                       self.concurrency)  # fmt: skip


def _speedup(setting: Setting) -> float:
    return setting.run().output_tok_s / setting.run("none", 0).output_tok_s


def _acceptance(setting: Setting) -> float:
    return setting.run().acceptance_rate or 0.0


def _eagle_vs_eagle3(setting: Setting) -> float:
    """EAGLE-1's best speed-up over K 1-6 relative to EAGLE-3's best."""
    heads = {"eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "eagle3": _EAGLE3_8B}
    best = {
        m: max(replace(setting, method=m, model=head).run(k=k).output_tok_s for k in range(1, 7))
        for m, head in heads.items()
    }
    return best["eagle"] / best["eagle3"]


_LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
_EAGLE3_8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


@dataclass(frozen=True)
class MethodFigure:
    """A public measured figure, where it was published, and what the simulator says."""

    what: str
    measured: float
    tolerance: float  # relative error the test allows
    source: str
    setting: Setting
    predict: Callable[[Setting], float]


METHOD_FIGURES: tuple[MethodFigure, ...] = (
    MethodFigure(
        "EAGLE-3 speed-up, Llama-3.1-8B on one H100, K=2, one request",
        1.65,
        0.15,
        "vLLM PR #16937 (EAGLE-3 in V1)",
        Setting("h100", _LLAMA8, "eagle3", 2, _EAGLE3_8B),
        _speedup,
    ),
    MethodFigure(
        "MTP acceptance, DeepSeek-R1 K=1 (81-82.3 %)",
        0.82,
        0.08,
        "vLLM PR #12755",
        Setting("h200x8", "deepseek-ai/DeepSeek-R1", "mtp", 1, tp=8),
        _acceptance,
    ),
    MethodFigure(
        "MTP speed-up, DeepSeek-R1 K=1 at QPS 1",
        1.63,
        0.2,
        "vLLM PR #12755",
        Setting("h200x8", "deepseek-ai/DeepSeek-R1", "mtp", 1, tp=8),
        _speedup,
    ),
    MethodFigure(
        "MTP 2nd-token acceptance, DeepSeek-V3 (85-90 %)",
        0.875,
        0.1,
        "DeepSeek-V3 technical report, arXiv 2412.19437, sec. 5.4.3",
        Setting("h200x8", "deepseek-ai/DeepSeek-V3", "mtp", 1, tp=8),
        _acceptance,
    ),
    MethodFigure(
        "EAGLE-1 best / EAGLE-3 best speed-up (within 5 %)",
        0.97,
        0.05,
        "vllm issue #20780",
        Setting("h100", _LLAMA8, "eagle3", 2, _EAGLE3_8B),
        _eagle_vs_eagle3,
    ),
    MethodFigure(
        "ngram loses at 32 concurrent users (1: slower than no speculation)",
        1.0,
        0.0,
        "ArcticInference issue #185 (ngram and suffix lose above ~20 users)",
        Setting("h100", _LLAMA8, "ngram", 4, prompt_set="code", concurrency=32),
        lambda s: float(_speedup(s) < 1.0),
    ),
)


def method_rows() -> list[tuple[MethodFigure, float, float]]:
    """Each figure with its prediction and the relative error."""
    rows = []
    for figure in METHOD_FIGURES:
        predicted = figure.predict(figure.setting)
        rows.append((figure, predicted, predicted / figure.measured - 1))
    return rows


def main() -> None:
    print(
        "| mode | workload | tok/s ref | tok/s predicted | acceptance ref | acceptance "
        "predicted | TTFT ref ms | TTFT predicted ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in REFERENCE_ROWS:
        r = predict(
            HW,
            TARGET,
            DRAFT if row.k else None,
            reference_server(row.k),
            REFERENCE_TEMPERATURE,
            REFERENCE_WORKLOADS[row.workload],
            1,
        )
        mode = f"speculative K={row.k}" if row.k else "target only"
        ref_acc = "n/a" if row.acceptance_rate is None else f"{row.acceptance_rate:.1%}"
        acc = "n/a" if r.acceptance_rate is None else f"{r.acceptance_rate:.1%}"
        print(
            f"| {mode} | {row.workload} | {row.output_tok_s} | {r.output_tok_s:.1f} | {ref_acc} "
            f"| {acc} | {row.ttft_ms:.0f} | {r.ttft_ms(50):.0f} |"
        )
    print()
    print(
        "Best K (code, T=0.2, predicted tok/s): "
        + ", ".join(f"K{k} {_tok_s(k):.1f}" for k in range(1, 9))
    )
    print(
        "Speed-up over target only by temperature (code, K=4): "
        + ", ".join(
            f"T{t} x{_tok_s(4, temperature=t) / _tok_s(0, temperature=t):.2f}"
            for t in (0.0, 0.3, 0.5, 0.8, 1.0)
        )
    )
    print(
        "Speculative / target-only throughput by concurrency (code, K=4): "
        + ", ".join(
            f"{c}: {_tok_s(4, concurrency=c) / _tok_s(0, concurrency=c):.2f}"
            for c in (1, 16, 32, 64)
        )
    )
    for util in (0.92, 0.98):
        m = estimate_memory(HW, TARGET, DRAFT, reference_server(4, gpu_memory_utilization=util))
        verdict = "fits" if m.fits else f"does not fit: {m.reason[:80]}"
        print(f"gpu-memory-utilization {util}: {verdict}")
    print()
    print("| method figure | measured | predicted | error | source |")
    print("|---|---|---|---|---|")
    for figure, predicted, error in method_rows():
        print(f"| {figure.what} | {figure.measured:.3f} | {predicted:.3f} | {error:+.1%} | "
              f"{figure.source} |")  # fmt: skip


if __name__ == "__main__":
    main()
