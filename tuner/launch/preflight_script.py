"""The pre-flight's judge, run by the study image's own Python: vLLM validates each config.

Not imported by spectune: :mod:`tuner.launch.preflight` reads this file and runs it with
``python -c`` in a short-lived container of the study's image, so it imports only vLLM and the
standard library (the image has no spectune). ``sys.argv[1]`` is the request, JSON:
``{"gpus": N, "candidates": [{"label": ..., "argv": [...]}, ...]}``, each argv what follows
``vllm serve``. Each candidate goes through vLLM's own ``vllm serve`` parser,
``AsyncEngineArgs.from_cli_args`` and ``create_engine_config()`` (every config class's
validation: model, speculative, scheduler, cache, parallel, the whole ``VllmConfig``) on the
models' ``config.json`` from the mounted Hugging Face cache, offline: no weights, no tokenizer,
no device memory.

stdout, among vLLM's own log lines, one line per answer, each on a line of its own:
``SPECTUNE-PREFLIGHT {"version": "0.32.0"}`` first, then ``SPECTUNE-PREFLIGHT {"verdict":
{"label": ..., "ok": true, "runner": "V2"}}`` or ``{... "ok": false, "stage": "argparse" |
"engine", "error": "<vLLM's last line>"}`` per candidate, in order.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

MARK = "SPECTUNE-PREFLIGHT "


def _say(payload: dict[str, Any]) -> None:
    # On a line of its own even if vLLM's logging left one unfinished.
    print("\n" + MARK + json.dumps(payload, default=str), flush=True)


def _stand_in_for_gpus(gpus: int) -> None:
    """Where vLLM sees no device (a CUDA image started without GPUs, as the pre-flight starts
    it), its CUDA platform with ``gpus`` devices of unknown capability stands in, so that
    vLLM's own rules judge the configs as on the study's GPUs: the world-size check counts
    ``gpus``, and checks that need a capability are skipped, as vLLM skips them itself when
    it cannot read one. Must run before vLLM's config modules import ``current_platform``."""
    from vllm import platforms  # type: ignore[import-not-found]

    if platforms.current_platform.device_type:  # a device vLLM knows: it judges on that
        return
    from vllm.platforms.cuda import CudaPlatform  # type: ignore[import-not-found]

    class NoDeviceCuda(CudaPlatform):  # type: ignore[misc]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> None:
            return None

        @classmethod
        def device_count(cls) -> int:
            return gpus

    platforms._current_platform = NoDeviceCuda()


def _last_line(text: str) -> str:
    """vLLM's reason: the last line, or pydantic's ``Value error, ...`` with the class above it."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith("Value error,"):
            reason = line.split(" [type=")[0]  # pydantic's echo of every input follows
            return f"{lines[index - 1]}: {reason}" if index else reason
    return lines[-1] if lines else ""


def _judge(parser: Any, argv: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
    from vllm.platforms import current_platform  # type: ignore[import-not-found]

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(["serve", *argv])
    except SystemExit:
        return {"ok": False, "stage": "argparse", "error": _last_line(stderr.getvalue())}
    if getattr(args, "model_tag", None) is not None:  # what `vllm serve` does first
        args.model = args.model_tag
    try:
        engine = AsyncEngineArgs.from_cli_args(args)
        engine.skip_tokenizer_init = True  # config.json only: no tokenizer files
        config = engine.create_engine_config()
    except Exception as exc:  # every refusal is a verdict, not a crash
        return {"ok": False, "stage": "engine", "error": _last_line(f"{type(exc).__name__}: {exc}")}
    # V1 and V2 are GPU model runners: another platform's answer would mislead.
    gpu = current_platform.is_cuda_alike()
    return {"ok": True, "runner": ("V2" if config.use_v2_model_runner else "V1") if gpu else None}


def main() -> None:
    request = json.loads(sys.argv[1])
    _stand_in_for_gpus(int(request["gpus"]))
    import vllm

    _say({"version": vllm.__version__})  # first: the caller learns it even if the rest fails
    from vllm.entrypoints.cli.serve import ServeSubcommand  # type: ignore[import-not-found]
    from vllm.model_executor.models import registry  # type: ignore[import-not-found]
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

    # vLLM inspects each model class in a fresh subprocess that imports vLLM again (10-15 s a
    # class), to keep CUDA uninitialised in its own process; this container never touches a
    # device, so the same inspection runs here, in well under a second.
    registry._run_in_subprocess = lambda inspect: inspect()
    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    for candidate in request["candidates"]:
        _say({"verdict": {"label": candidate["label"], **_judge(parser, candidate["argv"])}})


if __name__ == "__main__":
    main()
