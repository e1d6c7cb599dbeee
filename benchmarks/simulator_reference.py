"""Prints the simulator's predictions next to the field notes' reference run A (BRIEF.md).

    python benchmarks/simulator_reference.py

Rows: 2x RTX 4090, TP 2, Qwen2.5-32B-Instruct-AWQ, 0.5B draft, gpu-memory-utilization 0.92,
one streaming request, temperature 0.2. Then the best K for code completion, the speed-up by
temperature and by concurrency, and the memory verdicts. Every figure printed is predicted.
"""

from __future__ import annotations

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
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


if __name__ == "__main__":
    main()
