"""Start-up and death of the fake server, in vLLM's words.

:func:`start_scheduler` does what vLLM's start-up does before it listens: resolve the model and the
draft (an unknown one is a config validation error), check the parallel size, and size memory with
:func:`~tuner.sim.memory.estimate_memory`. A config that does not fit raises
:class:`StartFailure` carrying vLLM's root-cause line; :func:`print_startup_failure` prints it
with the engine core's and the API server's tracebacks, which ``tuner.launch.failures`` classifies
as ``oom`` like real vLLM logs. Log lines use vLLM's ``LEVEL MM-DD HH:MM:SS [file] message`` form.
"""

from __future__ import annotations

import os
import sys
import time

from tuner.catalog.models import ModelSpec, load_model
from tuner.config.methods import MethodFamily, method_of
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError
from tuner.sim.acceptance import SPEC_METHODS
from tuner.sim.memory import BLOCK_TOKENS, GIB, estimate_memory
from tuner.sim.perfmodel import PerfModel, draft_tensor_parallel, kv_bytes_per_gpu
from tuner.sim.scheduler import Scheduler
from tuner.sim.server.args import ConfigValidationError, ServeArgs

__all__ = [
    "SIMULATED_BANNER",
    "StartFailure",
    "crash",
    "log",
    "print_startup_failure",
    "print_validation_failure",
    "start_scheduler",
]

SIMULATED_BANNER = "SIMULATED vLLM server (spectune tuner.sim.server): no GPU, no model weights"
_WEIGHTS_OOM = "while loading the model weights"


def log(level: str, message: str) -> None:
    """One log line in vLLM's format; INFO/WARNING to stdout, errors to stderr, unbuffered."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    stream = sys.stdout if level in ("INFO", "WARNING") else sys.stderr
    print(f"{level} {stamp} [sim-server] {message}", file=stream, flush=True)


class StartFailure(Exception):
    """The simulated engine core cannot start; ``str()`` is the root-cause line vLLM prints."""


def print_startup_failure(root_cause: str) -> None:
    """vLLM's start-up failure: the engine core's traceback, then the API server's."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    prefix = f"(EngineCore pid={os.getpid()}) ERROR {stamp} [core.py:1510] "
    for line in (
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "tuner/sim/server.py", in start_scheduler (simulated vLLM start-up)',
        root_cause,
    ):
        print(prefix + line, file=sys.stderr)
    print(
        "Traceback (most recent call last):\n"
        '  File "tuner/sim/server.py", in main (simulated vLLM API server)\n'
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        file=sys.stderr,
        flush=True,
    )


def print_validation_failure(config_class: str, message: str) -> None:
    """A config value vLLM rejects: pydantic's error, as vLLM 0.10+ prints it (exit 1)."""
    print(
        "Traceback (most recent call last):\n"
        '  File "tuner/sim/server.py", in main (simulated vLLM argument check)\n'
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {config_class}\n"
        f"  Value error, {message} [type=value_error]",
        file=sys.stderr,
        flush=True,
    )


def _load(name: str, config_class: str) -> ModelSpec:
    try:
        return load_model(name)
    except ConfigError as exc:
        raise ConfigValidationError(
            config_class,
            f"Invalid repository ID or local directory specified: {name!r} ({exc})",
        ) from None


def _kv_cache(
    args: ServeArgs,
    target: ModelSpec,
    draft: ModelSpec | None,
    version: VllmVersion | None,
    free_gib: float | None,
) -> tuple[int, float]:
    """KV-cache tokens and GiB per GPU, or the start-up failure vLLM ``version`` would meet.

    The same :func:`~tuner.sim.memory.estimate_memory` as the pre-screen, under the same
    version's rules, so the two never disagree on whether a config starts.
    """
    server, hardware = args.server, args.sim.hardware
    try:
        memory = estimate_memory(
            hardware, target, draft, server, version=version, free_gib=free_gib
        )
    except ConfigError as exc:
        raise ConfigValidationError("ParallelConfig", str(exc)) from None
    if args.sim.faults.oom_at_start:
        wanted = memory.overhead_gib * 1024
        raise StartFailure(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {wanted:.0f} MiB. "
            f"GPU 0 has a total capacity of {memory.gpu_total_gib:.2f} GiB of which 0 bytes is "
            "free. (simulated fault --sim-fault oom-at-start)"
        )
    explicit = args.kv_cache_memory_bytes
    if explicit is None:
        if not memory.fits:
            raise StartFailure(memory.reason)
        return memory.kv_tokens, memory.kv_cache_gib
    # An explicit KV-cache size skips vLLM's memory profile; the weights must still load.
    if _WEIGHTS_OOM in memory.reason:
        raise StartFailure(memory.reason)
    tp = server.tensor_parallel_size
    per_token = kv_bytes_per_gpu(target, tp)
    if draft is not None:
        per_token += kv_bytes_per_gpu(draft, draft_tensor_parallel(server))
    tokens = explicit // per_token // BLOCK_TOKENS * BLOCK_TOKENS
    if tokens < server.max_model_len:
        raise StartFailure(
            "ValueError: To serve at least one request with the model's max seq len "
            f"({server.max_model_len}), ({server.max_model_len * per_token / GIB:.2f} GiB KV "
            "cache is needed, which is larger than the available KV cache memory "
            f"({explicit / GIB:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {tokens}. Try increasing `kv_cache_memory_bytes` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    return tokens, explicit / GIB


def start_scheduler(
    args: ServeArgs, *, version: VllmVersion | None = None, free_gib: float | None = None
) -> Scheduler:
    """Loads the model specs, checks memory like vLLM ``version``'s start-up, builds the scheduler.

    Args:
        args: the parsed command line.
        version: whose memory rules to follow (None: the release the fake server imitates,
            ``--sim-vllm-version``).
        free_gib: the free memory of the simulated GPU before start-up (None: all but nothing).

    Raises:
        ConfigValidationError: an unknown model, draft or method, or a bad parallel size.
        StartFailure: the config does not fit in memory (or ``oom-at-start`` is injected).
    """
    version = version or args.sim.vllm_version
    server = args.server
    target = _load(server.model, "ModelConfig")
    spec = server.speculative
    if spec is not None and spec.method not in SPEC_METHODS:
        raise ConfigValidationError(
            "SpeculativeConfig",
            f"speculative method {spec.method!r} is not simulated; use one of "
            f"{', '.join(SPEC_METHODS)}",
        )
    draft = None
    if spec is not None and method_of(spec.method).family is MethodFamily.DRAFT:
        if not spec.model:
            raise ConfigValidationError("SpeculativeConfig", "method draft_model needs a model")
        draft = _load(spec.model, "SpeculativeConfig")
    _log_served_config(args)
    kv_tokens, kv_gib = _kv_cache(args, target, draft, version, free_gib)
    log("INFO", f"Available KV cache memory: {kv_gib:.2f} GiB (simulated)")
    log(
        "INFO",
        f"GPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for "
        f"{server.max_model_len:,} tokens per request: {kv_tokens / server.max_model_len:.2f}x",
    )
    return Scheduler(
        args.sim.hardware,
        target,
        draft,
        server,
        kv_tokens=kv_tokens,
        seed=args.sim.seed,
        perf=PerfModel(args.sim.hardware, target, draft, server, version=version),
    )


def _log_served_config(args: ServeArgs) -> None:
    """The lines vLLM 0.32 logs about the paths it chose (read by :mod:`tuner.launch.served`)."""
    server = args.server
    eager = dict(server.extra_flags).get("enforce-eager") is True
    graphs = "NONE: 0" if eager else "FULL_AND_PIECEWISE: (2, 1)"
    log(
        "INFO",
        f"Initializing a V1 LLM engine (v{args.sim.vllm_version}) with config: "
        f"model={server.model!r}, tensor_parallel_size={server.tensor_parallel_size}, "
        f"enforce_eager={eager}, device_config=cuda, enable_prefix_caching=True, "
        f"enable_chunked_prefill={server.enable_chunked_prefill}, compilation_config="
        f"{{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': <CUDAGraphMode.{graphs}>}}"
        " (simulated)",
    )
    if eager:
        log("INFO", "Cudagraph is disabled under eager mode")
    backend = "TRITON_ATTN" if args.sim.faults.attention_fallback else "FLASH_ATTN"
    log(
        "INFO",
        f"Using {backend} attention backend out of potential backends: ['{backend}', "
        "'FLEX_ATTENTION'].",
    )


def crash(root_cause: str) -> None:
    """Dies like a vLLM whose engine core failed mid-run: log, drop every connection, exit 1.

    Args:
        root_cause: the exception line the engine core logs, e.g. ``RuntimeError: ...``.
    """
    stamp = time.strftime("%m-%d %H:%M:%S")
    prefix = f"(EngineCore pid={os.getpid()}) ERROR {stamp} [core.py:1300] "
    for line in (
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "tuner/sim/server.py", in _step_loop (simulated engine core)',
        root_cause,
    ):
        print(prefix + line, file=sys.stderr)
    print(
        f"ERROR {stamp} [async_llm.py:480] AsyncLLM output_handler failed.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(1)  # no clean-up: the kernel drops the connections mid-stream
