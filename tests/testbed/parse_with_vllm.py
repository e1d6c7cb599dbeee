"""Parses ``vllm serve`` argument lists with the installed vLLM's own parser; prints JSON.

Run with the vLLM venv's interpreter: stdin is a JSON list of argument lists (what follows
``vllm``), stdout a JSON list with, per list, the engine arguments vLLM derived or the argparse
error it exited with. Nothing is started, so this checks many dialect spellings in one import
(about 10 s) instead of one 30-s server start each.
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


def parse(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        return {"exit": exc.code, "error": stderr.getvalue().strip().splitlines()[-1:]}
    if args.model_tag is not None:  # what `vllm serve` does before building the engine
        args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    parsed = {name: getattr(engine, name) for name in FIELDS}
    parsed.update(host=args.host, port=args.port)
    return parsed


def main() -> None:
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subparsers)
    print(json.dumps([parse(parser, argv) for argv in json.load(sys.stdin)], default=str))


if __name__ == "__main__":
    main()
