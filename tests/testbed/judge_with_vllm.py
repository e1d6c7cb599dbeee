"""Asks the installed vLLM whether it would start each ``vllm serve`` argument list; prints JSON.

Run with the vLLM venv's interpreter. stdin: a JSON list of argument lists (what follows
``vllm``). Each list goes through vLLM's own ``vllm serve`` parser (``--config FILE`` included),
``AsyncEngineArgs.from_cli_args`` and ``create_engine_config()``: every config class's
validation (``ModelConfig``, ``SpeculativeConfig``, ``SchedulerConfig``, ``CacheConfig``,
``ParallelConfig``, ``VllmConfig``), on model folders that hold only ``config.json`` (the caller
points ``HF_HUB_CACHE`` at them and sets ``HF_HUB_OFFLINE``). No weights, no tokenizer
(``skip_tokenizer_init``), no device memory: about 20 ms a list once vLLM is imported (10-15 s).

stdout's last line: a JSON list with, per argument list, ``{"ok": true, "speculative": {...}}``
or ``{"ok": false, "stage": "argparse" | "engine", "error": "<last line of the refusal>"}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

# Only the vLLM venv has these; the project venv (and its mypy) does not.
from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # pydantic puts the reason on the line after "1 validation error for X".
    for index, line in enumerate(lines):
        if line.startswith("Value error,"):
            return f"{lines[index - 1]}: {line}" if index else line
    return lines[-1] if lines else ""


def judge(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return {
            "ok": False,
            "stage": "argparse",
            "exit": exc.code,
            "error": _last_line(stderr.getvalue()),
        }
    if getattr(args, "model_tag", None) is not None:  # what `vllm serve` does first
        args.model = args.model_tag
    try:
        engine = AsyncEngineArgs.from_cli_args(args)
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
            "use_heterogeneous_vocab": bool(getattr(spec, "use_heterogeneous_vocab", False)),
        },
        "quantization": config.model_config.quantization,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
    }


def main() -> None:
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    verdicts = [judge(parser, argv) for argv in json.load(sys.stdin)]
    print(json.dumps(verdicts, default=str))


if __name__ == "__main__":
    main()
