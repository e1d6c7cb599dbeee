"""Reference run A from BRIEF.md, as data: the setup and table the simulator is calibrated on.

The field notes give the server setup but not the prompts; the workloads below fix them. A Python
code-completion prompt of 384 tokens and a creative-writing prompt a little shorter (368) make
the target-only TTFTs of 180 and 175 ms; 256 output tokens per request, one request in flight.
The notes were taken on vLLM 0.7.2 (:data:`REFERENCE_VERSION`), whose V0 engine the simulator
costs apart from today's. ``tests/sim`` asserts that :func:`tuner.sim.virtual_time.predict`
reproduces every row within 10 %; ``benchmarks/reference_figures.yaml`` holds the same rows
among the other public figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_version import parse_version
from tuner.config.workload import WorkloadSpec

__all__ = [
    "REFERENCE_DRAFT",
    "REFERENCE_HARDWARE",
    "REFERENCE_ROWS",
    "REFERENCE_TARGET",
    "REFERENCE_TEMPERATURE",
    "REFERENCE_VERSION",
    "REFERENCE_WORKLOADS",
    "ReferenceRow",
    "reference_server",
]

REFERENCE_HARDWARE = "4090x2"
REFERENCE_TARGET = "Qwen/Qwen2.5-32B-Instruct-AWQ"
REFERENCE_DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
REFERENCE_TEMPERATURE = 0.2
REFERENCE_VERSION = parse_version("0.7.2")
REFERENCE_CODE_INPUT_TOKENS = 384
REFERENCE_CREATIVE_INPUT_TOKENS = 368
REFERENCE_OUTPUT_TOKENS = 256

REFERENCE_REQUESTS = 8  # the field notes' runs: a few single streaming requests

REFERENCE_WORKLOADS: dict[str, WorkloadSpec] = {
    "code": WorkloadSpec(
        "code", REFERENCE_CODE_INPUT_TOKENS, REFERENCE_OUTPUT_TOKENS, requests=REFERENCE_REQUESTS
    ),
    "creative": WorkloadSpec(
        "creative",
        REFERENCE_CREATIVE_INPUT_TOKENS,
        REFERENCE_OUTPUT_TOKENS,
        requests=REFERENCE_REQUESTS,
    ),
}


@dataclass(frozen=True)
class ReferenceRow:
    """One row of the reference table.

    Attributes:
        workload: key into :data:`REFERENCE_WORKLOADS`.
        k: speculative tokens; 0 for the target alone.
        output_tok_s: measured output tokens per second (one streaming request).
        acceptance_rate: the draft acceptance rate, None without a draft.
        ttft_ms: measured time to first token.
    """

    workload: str
    k: int
    output_tok_s: float
    acceptance_rate: float | None
    ttft_ms: float


REFERENCE_ROWS: tuple[ReferenceRow, ...] = (
    ReferenceRow("code", 0, 28.4, None, 180.0),
    ReferenceRow("code", 4, 61.7, 0.782, 210.0),
    ReferenceRow("creative", 0, 27.9, None, 175.0),
    ReferenceRow("creative", 4, 43.1, 0.514, 225.0),
)


def reference_server(
    k: int = 4,
    gpu_memory_utilization: float = 0.92,
    max_num_batched_tokens: int = 2048,
    method: SpecMethod = SpecMethod.DRAFT_MODEL,
) -> ServerConfig:
    """The reference server (TP 2, max-model-len 8192), with the settings a search varies.

    Args:
        k: speculative tokens; 0 turns speculation off.
        gpu_memory_utilization: vLLM's memory fraction.
        max_num_batched_tokens: the step's token budget (chunked prefill stays on).
        method: ``draft_model`` (the 0.5B draft) or ``ngram``.
    """
    speculative = None
    if k > 0:
        draft = REFERENCE_DRAFT if method_of(method).family is MethodFamily.DRAFT else None
        speculative = SpeculativeConfig(method, k, draft)
    return ServerConfig(
        model=REFERENCE_TARGET,
        tensor_parallel_size=2,
        max_model_len=8192,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        speculative=speculative,
    )
