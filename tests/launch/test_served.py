"""What vLLM ran, read from its start-up log: the lines as vLLM 0.32 formats them."""

from __future__ import annotations

from pathlib import Path

from pydantic import TypeAdapter

from tuner.errors import FailureKind
from tuner.launch.failures import classify_failure
from tuner.launch.served import ServedFacts, read_runner, read_served

# The lines vLLM 0.32 logs on an NVIDIA GPU (format strings in tuner/launch/served.py).
CONFIG = (
    "(EngineCore pid=311) INFO 12-01 10:00:01 [core.py:134] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='Qwen/Qwen2.5-7B-Instruct', speculative_config=None, "
    "enforce_eager={eager}, kv_cache_dtype=auto, device_config=cuda, seed=0, "
    "enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, "
    "compilation_config={{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'cudagraph_mode': "
    "<CUDAGraphMode.{graphs}>, 'cudagraph_capture_sizes': [1, 2, 4]}}, kernel_config=None"
)
ATTENTION = (
    "INFO 12-01 10:00:03 [cuda.py:506] Using {backend} attention backend out of potential "
    "backends: ['{backend}', 'FLEX_ATTENTION']."
)
KV = (
    "INFO 12-01 10:00:20 [kv_cache_utils.py:2327] GPU KV cache size: 412,560 tokens, Maximum "
    "concurrency for 8,192 tokens per request: 50.36x"
)


def _log(*, backend: str = "FLASH_ATTN", graphs: str = "FULL_AND_PIECEWISE: (2, 1)") -> str:
    eager = "True" if graphs.startswith("NONE") else "False"
    config = CONFIG.format(eager=eager, graphs=graphs)
    return "\n".join([config, ATTENTION.format(backend=backend), KV])


def test_a_gpu_log_states_every_path_and_no_warning() -> None:
    facts = read_served(_log())
    assert facts == ServedFacts(
        device="cuda",
        attention_backend="FLASH_ATTN",
        cuda_graphs="FULL_AND_PIECEWISE",
        chunked_prefill=True,
        prefix_caching=True,
        kv_cache_tokens=412_560,
        max_concurrency=50.36,
    )
    assert facts.describe() == (
        "attention FLASH_ATTN, CUDA graphs FULL_AND_PIECEWISE, chunked prefill on, prefix "
        "caching on, KV cache 412,560 tokens (50.36x max-model-len)"
    )
    stored = TypeAdapter(ServedFacts)  # how the trial record writes and reads it
    assert stored.validate_json(stored.dump_json(facts)) == facts


def test_a_fallback_attention_backend_is_a_warning() -> None:
    facts = read_served(_log(backend="TRITON_ATTN"))
    assert facts is not None
    (warning,) = facts.warnings
    assert warning.startswith("vLLM fell back to the TRITON_ATTN attention backend")


def test_graphs_off_warn_unless_the_user_asked_for_eager() -> None:
    off = read_served(_log(graphs="NONE: 0").replace("enforce_eager=True", "enforce_eager=False"))
    assert off is not None and off.warnings == (
        "vLLM runs without CUDA graphs (cudagraph_mode NONE): decode is slower",
    )
    eager = read_served(_log(graphs="NONE: 0") + "\nINFO Cudagraph is disabled under eager mode")
    assert eager is not None and eager.cuda_graphs == "NONE" and eager.warnings == ()


def test_a_block_size_that_precluded_a_backend_is_said_as_vllm_says_it() -> None:
    line = (
        "WARNING 12-01 10:00:03 [cuda.py:496] --block-size 64 precluded higher-priority "
        "backend(s) FLASH_ATTN. Using FLASHINFER instead, which may result in reduced "
        "performance. Consider removing --block-size to auto-select the optimal block size."
    )
    facts = read_served(_log(backend="FLASHINFER") + "\n" + line)
    assert facts is not None
    assert facts.warnings == ("--block-size 64 precluded higher-priority backend(s) FLASH_ATTN.",)


def test_a_log_that_states_nothing_gives_nothing() -> None:
    assert read_served("Starting vLLM server on http://0.0.0.0:8000\n") is None


def test_the_model_runner_is_read_as_vllm_logs_its_choice() -> None:
    # config/vllm.py, VllmConfig.use_v2_model_runner (0.32): the fallback and its reason.
    fallback = (
        "(APIServer pid=9) WARNING 12-01 10:00:02 [vllm.py:733] Model Runner V2 does not yet "
        "support heterogeneous-vocabulary draft models; using the V1 model runner instead."
    )
    facts = read_served("\n".join([_log(), fallback]))
    assert facts is not None and facts.model_runner == "V1"
    assert facts.runner_reason == "heterogeneous-vocabulary draft models"
    assert facts.describe().endswith("model runner V1 (heterogeneous-vocabulary draft models)")
    # A CUDA worker on V2 logs no line of its own: the log leaves it open.
    assert read_runner(_log()) == (None, None)
    # 0.22-0.23 wrote it in lower case.
    old = "Model runner v2 does not yet support parallel drafting; using the v1 model runner"
    assert read_runner(old + " instead.") == ("V1", "parallel drafting")


def test_the_cpu_builds_real_log_says_v1_for_want_of_triton() -> None:
    log = (Path(__file__).parent / "logs" / "kv-cache-too-small-0.32.log").read_text()
    assert read_runner(log) == ("V1", "Triton is not installed")


def test_ngram_gpu_on_the_cpu_build_fails_at_start_up_as_a_crash() -> None:
    """A real start (vLLM 0.32 CPU build, ngram_gpu with block verification): its config passes
    vLLM's checks, but the GPU n-gram proposer pins host memory, which a CPU build cannot."""
    log = (Path(__file__).parent / "logs" / "ngram-gpu-pin-memory-0.32.log").read_text()
    assert "pin_memory=True requires a CUDA or other accelerator backend" in log
    assert classify_failure(1, log) is FailureKind.CRASH
    assert read_runner(log) == ("V1", "Triton is not installed")
