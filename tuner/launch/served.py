"""What vLLM says it runs, read from a server's start-up log: the paths behind its speed.

The same config can run very differently: an old driver makes vLLM drop FlashAttention for a
slower backend, ``--enforce-eager`` or a platform limit turns CUDA graphs off, and the KV cache
it allocated bounds the batch. vLLM logs each choice once at start-up; the lines below are
vLLM 0.32's (files under ``vllm/``). A fact a log does not state stays None: vLLM's CPU
build, for one, names no attention backend (``platforms/cpu.py`` returns CPU_ATTN silently).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

__all__ = ["ServedFacts", "read_runner", "read_served"]

# v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config: %s", the config being
# VllmConfig.__str__ (config/vllm.py): "..., enforce_eager=False, ..., device_config=cuda, ...,
# enable_prefix_caching=True, enable_chunked_prefill=True, ..., compilation_config={...}".
_CONFIG_LINE = "Initializing a V1 LLM engine"
_FLAG = r"{}=(True|False)\b"
# config/compilation.py, CompilationConfig.__repr__: a dict dump keeping the enum,
# "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>".
_GRAPHS = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_DEVICE = re.compile(r"device_config=(\w+)")
# platforms/cuda.py, get_attn_backend_cls: "Using %s attention backend out of potential
# backends: %s." (ROCm's and XPU's lines differ and are not read).
_ATTENTION = re.compile(r"Using (\w+) attention backend out of potential backends")
# config/vllm.py: "Cudagraph is disabled under eager mode".
_EAGER = "Cudagraph is disabled under eager mode"
# platforms/cuda.py: "--block-size %d precluded higher-priority backend(s) %s. Using %s
# instead, which may result in reduced performance. ..."
_PRECLUDED = re.compile(r"(--block-size \d+ precluded higher-priority backend\(s\) [^.]+\.)")
# v1/core/kv_cache_utils.py, update_kv_cache_capacity: "%s KV cache size: %s tokens, Maximum
# concurrency for %s tokens per request: %.2fx" (GPU, CPU, ...).
_KV = re.compile(
    r"KV cache size: ([\d,]+) tokens, Maximum concurrency for [\d,]+ tokens per "
    r"request: ([\d.]+)x"
)
# config/vllm.py, VllmConfig.use_v2_model_runner: "Model Runner V2 does not yet support %s;
# using the V1 model runner instead." or "Model Runner V2 requires Triton; using the V1 model
# runner instead." (0.24+; 0.22-0.23 write "Model runner v2 ... v1 model runner"), and 0.29+'s
# ROCm default "Defaulting to V1 model runner on ROCm". v1/worker/cpu_worker.py: "Using V2
# Model Runner"; a CUDA worker on V2 logs nothing of its own, so there the runner stays None.
_V1_FALLBACK = re.compile(
    r"Model Runner V2 (?:does not yet support (.+?)|(requires Triton)); using the V1 model "
    r"runner instead",
    re.IGNORECASE,
)
_ROCM_V1 = "Defaulting to V1 model runner on ROCm"
_V2_USED = "Using V2 Model Runner"
# Backends vLLM picks on NVIDIA GPUs only when the fast ones (FlashAttention, FlashInfer, the
# MLA kernels) are not valid there: the fallback the field notes warn about.
_SLOW_ATTENTION = frozenset({"TRITON_ATTN", "FLEX_ATTENTION", "TORCH_SDPA"})


@dataclass(frozen=True)
class ServedFacts:
    """The execution paths one vLLM server chose, as its log states them.

    Attributes:
        device: ``cuda``, ``cpu``, ...
        attention_backend: e.g. ``FLASH_ATTN``.
        cuda_graphs: vLLM's ``cudagraph_mode`` (``FULL_AND_PIECEWISE``, ``PIECEWISE``, ``NONE``).
        chunked_prefill: whether prefill is chunked.
        prefix_caching: whether prompts' shared prefixes are cached.
        kv_cache_tokens: tokens the KV cache it allocated holds.
        max_concurrency: how many ``max-model-len`` requests that cache holds at once.
        warnings: the slower paths it took, each a sentence.
        model_runner: ``V1`` or ``V2`` where the log says which (None: it does not).
        runner_reason: why vLLM fell back to V1, in its words.
    """

    device: str | None = None
    attention_backend: str | None = None
    cuda_graphs: str | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    warnings: tuple[str, ...] = ()
    model_runner: str | None = None
    runner_reason: str | None = None

    def describe(self) -> str:
        """One line, e.g. ``attention FLASH_ATTN, CUDA graphs FULL_AND_PIECEWISE, ...``."""

        def on(flag: bool | None) -> str:
            return "not logged" if flag is None else ("on" if flag else "off")

        kv = (
            "not logged"
            if self.kv_cache_tokens is None
            else f"{self.kv_cache_tokens:,} tokens ({self.max_concurrency:g}x max-model-len)"
        )
        runner = "" if self.model_runner is None else f", model runner {self.model_runner}"
        if self.runner_reason:
            runner += f" ({self.runner_reason})"
        return (
            f"attention {self.attention_backend or 'not logged'}, CUDA graphs "
            f"{self.cuda_graphs or 'not logged'}, chunked prefill {on(self.chunked_prefill)}, "
            f"prefix caching {on(self.prefix_caching)}, KV cache {kv}{runner}"
        )


def read_served(log_text: str) -> ServedFacts | None:
    """The facts a start-up log states; None when it states none (not a vLLM log)."""
    config = next((line for line in log_text.splitlines() if _CONFIG_LINE in line), "")

    def flag(name: str) -> bool | None:
        found = re.search(_FLAG.format(name), config)
        return None if found is None else found.group(1) == "True"

    device = _DEVICE.search(config)
    graphs = _GRAPHS.search(config)
    attention = _ATTENTION.search(log_text)
    kv = _KV.search(log_text)
    facts = ServedFacts(
        device=device.group(1) if device else None,
        attention_backend=attention.group(1) if attention else None,
        cuda_graphs=graphs.group(1) if graphs else None,
        chunked_prefill=flag("enable_chunked_prefill"),
        prefix_caching=flag("enable_prefix_caching"),
        kv_cache_tokens=int(kv.group(1).replace(",", "")) if kv else None,
        max_concurrency=float(kv.group(2)) if kv else None,
    )
    runner, reason = read_runner(log_text)
    facts = ServedFacts(**{**asdict(facts), "model_runner": runner, "runner_reason": reason})
    if facts == ServedFacts():
        return None
    warnings = [m.group(1) for m in _PRECLUDED.finditer(log_text)]
    if facts.device == "cuda" and facts.attention_backend in _SLOW_ATTENTION:
        warnings.append(
            f"vLLM fell back to the {facts.attention_backend} attention backend, slower than "
            "FlashAttention or FlashInfer: check the NVIDIA driver and the GPU's support"
        )
    if facts.device == "cuda" and facts.cuda_graphs == "NONE" and _EAGER not in log_text:
        warnings.append("vLLM runs without CUDA graphs (cudagraph_mode NONE): decode is slower")
    return ServedFacts(**{**asdict(facts), "warnings": tuple(warnings)})


def read_runner(log_text: str) -> tuple[str | None, str | None]:
    """The model runner a start-up log names, and why vLLM fell back to V1: ``("V1",
    "heterogeneous-vocabulary draft models")``, ``("V2", None)``, or ``(None, None)``."""
    fallback = _V1_FALLBACK.search(log_text)
    if fallback is not None:
        return "V1", fallback.group(1) or "Triton is not installed"
    if _ROCM_V1 in log_text:
        return "V1", "vLLM's ROCm default for this architecture"
    if _V2_USED in log_text:
        return "V2", None
    return None, None
