"""Answers questions about ``vllm`` argument lists with the installed vLLM's own code.

Run with the vLLM venv's interpreter, once per test session: vLLM takes 10-15 s to import, a
question 20-100 ms. stdin: one JSON request per line, ``{"ask": "parse" | "judge", "argvs":
[[...], ...]}`` (each list is what follows ``vllm``); stdout: per request, one line
``ANSWER <JSON list>`` with one answer per argument list (vLLM's own log lines go to stdout too).

- ``parse``: vLLM's ``vllm serve`` parser (``--config FILE`` included) and
  ``AsyncEngineArgs.from_cli_args``; the answer holds the derived engine arguments (``FIELDS``)
  plus ``host`` and ``port``, or ``exit`` and ``error`` when argparse refused the list.
- ``judge``: the same, then ``create_engine_config()``: every config class's validation
  (``ModelConfig``, ``SpeculativeConfig``, ``SchedulerConfig``, ``CacheConfig``,
  ``ParallelConfig``, ``VllmConfig``), on model folders that hold only ``config.json`` (the
  caller points ``HF_HUB_CACHE`` at them and sets ``HF_HUB_OFFLINE``). No weights, no tokenizer
  (``skip_tokenizer_init``), no device memory. The answer is ``{"ok": true, "speculative":
  {...}, "runner": "V1" | "V2", ...}`` or ``{"ok": false, "stage": "argparse" | "engine",
  "error": "<last line>"}``.
- ``judge_gpu``: ``judge`` as on a CUDA host. The CPU build lacks two things every CUDA build
  has: Triton (without it ``VllmConfig.use_v2_model_runner`` picks V1 whatever the config) and
  static CUDA graphs (``support_static_graph_mode``; adaptive verification requires full
  graphs). Both are switched on for the question, vLLM's own code judges the rest; the answer
  adds ``v2_unsupported``, vLLM's list of what keeps the config off V2.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator
from typing import Any

# Only the vLLM venv has these; the project venv (and its mypy) does not.
import vllm.config.vllm as vllm_config_module  # type: ignore[import-not-found]
from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
from vllm.model_executor.models import registry  # type: ignore[import-not-found]
from vllm.platforms import current_platform  # type: ignore[import-not-found]
from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

# vLLM inspects each model class it has not cached (``modelinfos`` under VLLM_CACHE_ROOT) in a
# fresh subprocess, so that CUDA stays uninitialised in its own process
# (vllm/model_executor/models/registry.py, ``_run_in_subprocess``). The CPU build has no CUDA to
# keep clean, and each subprocess imports vLLM again: 10-15 s a class, about 200 s for the
# shipped spaces' classes on a fresh machine. Inspected here, the same function, it takes well
# under a second, and the cache it writes serves the session's later `vllm serve` starts.
registry._run_in_subprocess = lambda inspect: inspect()

FIELDS = (
    "model",
    "served_model_name",
    "tensor_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "quantization",
    "enable_chunked_prefill",
    "speculative_config",
    "enforce_eager",
    "kv_cache_memory_bytes",
)
# SpeculativeConfig fields the answers report (as vLLM resolved them).
SPEC_FIELDS = (
    "use_heterogeneous_vocab",
    "parallel_drafting",
    "rejection_sample_method",
    "draft_sample_method",
    "enable_adaptive_verification",
    "dspark_draft_topk",
)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # pydantic puts the reason on the line after "1 validation error for X".
    for index, line in enumerate(lines):
        if line.startswith("Value error,"):
            return f"{lines[index - 1]}: {line}" if index else line
    return lines[-1] if lines else ""


def _engine_args(parser: FlexibleArgumentParser, argv: list[str]) -> Any:
    """The engine arguments vLLM derives, or the ``SystemExit`` argparse raised with its text."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        exc.args = (_last_line(stderr.getvalue()),)
        return exc
    if getattr(args, "model_tag", None) is not None:  # what `vllm serve` does first
        args.model = args.model_tag
    return args, AsyncEngineArgs.from_cli_args(args)


def parse(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    derived = _engine_args(parser, argv)
    if isinstance(derived, SystemExit):
        return {"exit": derived.code, "error": [derived.args[0]] if derived.args[0] else []}
    args, engine = derived
    parsed = {name: getattr(engine, name) for name in FIELDS}
    parsed.update(host=args.host, port=args.port)
    return parsed


def judge(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    derived = _engine_args(parser, argv)
    if isinstance(derived, SystemExit):
        return {"ok": False, "stage": "argparse", "exit": derived.code, "error": derived.args[0]}
    _, engine = derived
    try:
        engine.skip_tokenizer_init = True
        config = engine.create_engine_config()
    except Exception as exc:  # every refusal is a verdict, not a crash
        return {"ok": False, "stage": "engine", "error": _last_line(f"{type(exc).__name__}: {exc}")}
    spec = config.speculative_config
    return {
        "ok": True,
        "speculative": None
        if spec is None
        else {
            "method": spec.method,
            "num_speculative_tokens": spec.num_speculative_tokens,
            **{key: getattr(spec, key, None) for key in SPEC_FIELDS},
        },
        "quantization": config.model_config.quantization,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
        "runner": "V2" if config.use_v2_model_runner else "V1",
        "v2_unsupported": config._get_v2_model_runner_unsupported_features(),
    }


@contextlib.contextmanager
def _cuda_host() -> Iterator[None]:
    """Triton and static CUDA graphs, as every CUDA build of vLLM has them."""
    platform = type(current_platform)
    own = platform.__dict__.get("support_static_graph_mode")  # else the base class's
    triton = vllm_config_module.HAS_TRITON
    vllm_config_module.HAS_TRITON = True
    platform.support_static_graph_mode = classmethod(lambda cls: True)
    try:
        yield
    finally:
        vllm_config_module.HAS_TRITON = triton
        if own is None:
            del platform.support_static_graph_mode
        else:
            platform.support_static_graph_mode = own


def judge_gpu(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    with _cuda_host():
        return judge(parser, argv)


def main() -> None:
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    answer = {"parse": parse, "judge": judge, "judge_gpu": judge_gpu}
    for line in sys.stdin:
        request = json.loads(line)
        answers = [answer[request["ask"]](parser, argv) for argv in request["argvs"]]
        # On a line of its own even if a model module printed without a newline.
        print("\nANSWER " + json.dumps(answers, default=str), flush=True)


if __name__ == "__main__":
    main()
