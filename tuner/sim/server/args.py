"""The fake server's command line: vLLM's own ``serve`` flags, ``--config`` files, ``--sim-*``.

The parser speaks the newest flag dialect spectune knows (what
:func:`tuner.config.vllm_args.server_argv` writes for :data:`~tuner.config.vllm_args.NEWEST_KNOWN`)
plus the old standalone speculative flags, and it fails the way vLLM's does: an unknown flag is
an argparse error with exit status 2 and "unrecognized arguments". A handful of vLLM flags that
change nothing the simulator models (``--dtype``, ``--seed``, ...) are accepted and ignored, so
a real deployment's command line still starts it.

``--config FILE`` works like vLLM's loader (:mod:`tuner.sim.server.config_file`); flags given
on the command line win over the file's.

Simulator settings never collide with vLLM's: they are ``--sim-*`` flags, each with an
environment variable as default (so a launcher that only controls the environment can set them):

======================  ===============================  =====================================
flag                    variable                         meaning
======================  ===============================  =====================================
``--sim-hardware``      ``SPECTUNE_SIM_HARDWARE``        GPUs simulated, e.g. ``4090x2`` (default
                                                         4090x1)
``--sim-fault``         ``SPECTUNE_SIM_FAULT``           a fault to inject (repeatable; the
                                                         variable takes a comma-separated list),
                                                         see :mod:`tuner.sim.server.faults`
``--sim-speed``         ``SPECTUNE_SIM_SPEED``           simulated seconds per real second
                                                         (default 1; ``inf``: no pauses at all, as
                                                         fast as possible)
``--sim-seed``          ``SPECTUNE_SIM_SEED``            seeds acceptance and timing noise
                                                         (default 0)
``--sim-vllm-version``  ``SPECTUNE_SIM_VLLM_VERSION``  the release imitated (default the newest
                                                         known): ``/version`` and ``--version``
                                                         answer it; from 0.32 it takes
                                                         ``--enable-per-request-metrics``
======================  ===============================  =====================================
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.catalog.gpus import Hardware, parse_hardware
from tuner.config.methods import method_of
from tuner.config.trial import FlagValue, ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import Verification
from tuner.config.vllm_args import NEWEST_KNOWN, PER_REQUEST_METRICS_SINCE
from tuner.config.vllm_methods import OPTION_SUPPORT
from tuner.config.vllm_version import VllmVersion, parse_version
from tuner.errors import ConfigError
from tuner.sim.server.config_file import config_file_argv
from tuner.sim.server.faults import FAULT_NAMES, Faults, parse_faults

# The release whose RejectionSampleMethod gained "fly", as spectune's own check dates it.
_FLY_SINCE = next(o.since for o in OPTION_SUPPORT if o.value == Verification.FLY)

__all__ = [
    "DEFAULT_HARDWARE",
    "ConfigValidationError",
    "ServeArgs",
    "SimOptions",
    "parse_serve_args",
]

DEFAULT_HARDWARE = "4090x1"
# vLLM reads the context length from the model; every catalog model (Qwen2.5) has 32768.
DEFAULT_MAX_MODEL_LEN = 32768
# vLLM V1's token budget for an online server when --max-num-batched-tokens is not given.
DEFAULT_BATCHED_TOKENS = 2048

# vLLM flags that change nothing the simulator models: accepted, reported, ignored.
_IGNORED_VALUE_FLAGS = (
    "--dtype",
    "--seed",
    "--tokenizer",
    "--revision",
    "--download-dir",
    "--load-format",
    "--block-size",
    "--kv-cache-dtype",
    "--swap-space",
    "--generation-config",
    "--uvicorn-log-level",
    "--distributed-executor-backend",
    "--max-logprobs",
    "--tokenizer-mode",
    "--chat-template",
    "--tool-call-parser",
    "--reasoning-parser",
    "--hf-overrides",
    "--max-seq-len-to-capture",
    "--compilation-config",
)
_IGNORED_BOOL_FLAGS = (
    "--trust-remote-code",
    "--disable-log-requests",
    "--enable-log-requests",
    "--disable-log-stats",
    "--enable-prefix-caching",
    "--disable-frontend-multiprocessing",
    "--enable-auto-tool-choice",
    "--async-scheduling",
)
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class ConfigValidationError(Exception):
    """A flag value vLLM's config classes would reject (vLLM prints a pydantic error, exit 1).

    Attributes:
        config_class: the vLLM config class that would complain (``SpeculativeConfig``, ...).
    """

    def __init__(self, config_class: str, message: str) -> None:
        super().__init__(message)
        self.config_class = config_class


@dataclass(frozen=True)
class SimOptions:
    """The ``--sim-*`` settings.

    Attributes:
        hardware: the simulated GPUs (``--sim-hardware 4090x2``).
        faults: what to break.
        speed: simulated seconds per real second; ``math.inf`` never pauses.
        seed: seeds the scheduler's acceptance sampling and timing noise.
        vllm_version: the release it imitates (``--sim-vllm-version``): what ``/version``
            answers, and whether it takes ``--enable-per-request-metrics`` (0.32 and later).
    """

    hardware: Hardware = field(default_factory=lambda: parse_hardware(DEFAULT_HARDWARE))
    faults: Faults = field(default_factory=Faults)
    speed: float = 1.0
    seed: int = 0
    vllm_version: VllmVersion = NEWEST_KNOWN


@dataclass(frozen=True)
class ServeArgs:
    """A parsed command line.

    Attributes:
        server: the server config, as spectune models it.
        served_names: the names ``/v1/models`` lists (``--served-model-name``, else the model).
        host: the address to listen on; None means every interface, like vLLM.
        port: the port to listen on.
        kv_cache_memory_bytes: an explicit KV-cache size per GPU (skips the memory profile).
        api_key: the bearer token ``/v1`` requests must carry, if any.
        ignored: accepted vLLM flags the simulator ignores, for the start-up log.
        sim: the simulator's own settings.
        per_request_metrics: ``--enable-per-request-metrics`` (vLLM 0.32 and later): answers
            carry the request's ``metrics``.
    """

    server: ServerConfig
    served_names: tuple[str, ...]
    host: str | None
    port: int
    kv_cache_memory_bytes: int | None
    api_key: str | None
    ignored: tuple[str, ...]
    sim: SimOptions
    per_request_metrics: bool = False


def _human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``64M`` is 64 MiB, ``25.6k`` is 25,600."""
    text = text.strip()
    match = _HUMAN_INT.fullmatch(text)
    if match is None:
        return int(text)
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    return int(number) * _BINARY[suffix]


def _hardware(text: str) -> Hardware:
    try:
        return parse_hardware(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bool(text: str) -> bool:
    """vLLM's old ``StoreBoolean`` values (``--enable-chunked-prefill False``)."""
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(text)


def _add_boolean(parser: argparse.ArgumentParser, flag: str, default: bool | None) -> None:
    """``--FLAG``, ``--no-FLAG`` and the pre-0.8.5 ``--FLAG False`` spellings."""
    dest = flag.lstrip("-").replace("-", "_")
    parser.add_argument(flag, dest=dest, nargs="?", const=True, type=_bool, default=default)
    parser.add_argument(f"--no-{flag[2:]}", dest=dest, action="store_false")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm serve",
        description="spectune's simulated vLLM server: vLLM's flags, timings from tuner.sim.",
    )
    env = os.environ
    imitated = env.get("SPECTUNE_SIM_VLLM_VERSION") or str(NEWEST_KNOWN)
    parser.add_argument("--version", action="version", version=imitated)
    parser.add_argument("model", nargs="?", help="catalog Hugging Face id or local model dir")
    parser.add_argument("--config", help="YAML file whose keys are flag names")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--max-model-len", type=_human_int)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-num-batched-tokens", type=_human_int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--kv-cache-memory-bytes", type=_human_int)
    parser.add_argument("--quantization", "-q")
    parser.add_argument("--speculative-config", type=json.loads)
    parser.add_argument("--speculative-model")
    parser.add_argument("--num-speculative-tokens", type=int)
    parser.add_argument("--ngram-prompt-lookup-max", type=int)
    parser.add_argument("--ngram-prompt-lookup-min", type=int)
    parser.add_argument("--api-key")
    parser.add_argument("--enable-per-request-metrics", action="store_true")
    _add_boolean(parser, "--enable-chunked-prefill", True)
    _add_boolean(parser, "--enforce-eager", False)
    for flag in _IGNORED_VALUE_FLAGS:
        parser.add_argument(
            flag,
            dest=f"ignored_{flag[2:]}",
            metavar="VALUE",
            help="accepted and ignored by the simulator",
        )
    for flag in _IGNORED_BOOL_FLAGS:
        _add_boolean(parser, flag, None)
    sim = parser.add_argument_group("simulator (spectune only)")
    sim.add_argument(
        "--sim-hardware",
        type=_hardware,
        default=env.get("SPECTUNE_SIM_HARDWARE", DEFAULT_HARDWARE),
        help=f"simulated GPUs, e.g. 4090x2 (default {DEFAULT_HARDWARE}; SPECTUNE_SIM_HARDWARE)",
    )
    sim.add_argument(
        "--sim-fault",
        action="append",
        default=None,
        metavar="FAULT",
        help=f"inject a fault, repeatable: {', '.join(FAULT_NAMES)} "
        "(SPECTUNE_SIM_FAULT, comma-separated)",
    )
    sim.add_argument(
        "--sim-speed",
        type=float,
        default=env.get("SPECTUNE_SIM_SPEED", "1"),
        help="simulated seconds per real second; inf: no pauses (SPECTUNE_SIM_SPEED)",
    )
    sim.add_argument(
        "--sim-seed",
        type=int,
        default=env.get("SPECTUNE_SIM_SEED", "0"),
        help="seeds acceptance and timing noise (SPECTUNE_SIM_SEED)",
    )
    sim.add_argument(
        "--sim-vllm-version",
        default=imitated,
        metavar="VERSION",
        help=f"the vLLM release to imitate (default {NEWEST_KNOWN}; SPECTUNE_SIM_VLLM_VERSION)",
    )
    return parser


def _speculative(ns: argparse.Namespace) -> SpeculativeConfig | None:
    config: Any = ns.speculative_config
    if config is None and ns.speculative_model is not None:
        # The pre-0.8.3 dialect: "[ngram]" or a draft model, plus the token count.
        config = {
            "model": ns.speculative_model,
            "num_speculative_tokens": ns.num_speculative_tokens,
            "prompt_lookup_max": ns.ngram_prompt_lookup_max,
            "prompt_lookup_min": ns.ngram_prompt_lookup_min,
        }
    if config is None:
        return None
    if not isinstance(config, dict):
        raise ConfigValidationError("SpeculativeConfig", "speculative config must be a mapping")
    model = config.get("model")
    method = config.get("method")
    if method is None:
        if model in ("[ngram]", "ngram"):
            method = SpecMethod.NGRAM
        elif model:
            method = SpecMethod.DRAFT_MODEL
        else:
            raise ConfigValidationError(
                "SpeculativeConfig", "Either a speculative method or a draft model is required"
            )
    k = config.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigValidationError(
            "SpeculativeConfig", f"num_speculative_tokens must be a positive integer, got {k!r}"
        )
    try:
        parsed = SpecMethod.parse(method)
    except ConfigError as exc:  # as vLLM's SpeculativeConfig refuses a method it lacks
        raise ConfigValidationError("SpeculativeConfig", str(exc)) from None
    return SpeculativeConfig(
        method=parsed,
        num_speculative_tokens=k,
        model=str(model) if method_of(parsed).takes_model and model else None,
        prompt_lookup_max=config.get("prompt_lookup_max"),
        prompt_lookup_min=config.get("prompt_lookup_min"),
        k_by_batch_size=_k_table(config.get("num_speculative_tokens_per_batch_size")),
        rejection_sample_method=_verification(
            config.get("rejection_sample_method", "standard"), parse_version(ns.sim_vllm_version)
        ),
    )


def _verification(value: Any, version: VllmVersion) -> Verification:
    """The ``rejection_sample_method`` values of ``version`` the simulator imitates (``fly``
    from 0.33; ``synthetic``, which forces acceptance, is not imitated)."""
    known = [str(v) for v in Verification if version >= _FLY_SINCE or v is not Verification.FLY]
    if value not in known:
        raise ConfigValidationError(
            "SpeculativeConfig",
            f"rejection_sample_method: Input should be {' or '.join(map(repr, known))} "
            f"(vLLM {version}, as simulated), got {value!r}",
        )
    return Verification(value)


def _k_table(table: Any) -> tuple[tuple[int, int, int], ...]:
    """vLLM's check: contiguous ``[first, last, K]`` ranges from batch size 1, K ≥ 0; None."""
    entries: list[tuple[int, int, int]] = []
    for entry in [] if table is None else table if isinstance(table, list) else [None]:
        values = entry if isinstance(entry, list) and len(entry) == 3 else [None] * 3
        first, last, k = (v if type(v) is int else -1 for v in values)
        if not (first == (entries[-1][1] + 1 if entries else 1) <= last and k >= 0):
            raise ConfigValidationError(
                "SpeculativeConfig",
                "num_speculative_tokens_per_batch_size must be contiguous [start, end, K] "
                f"ranges from batch size 1 with K >= 0, got {table!r}",
            )
        entries.append((first, last, k))
    return tuple(entries)


def _model_max_len(model: str) -> int:
    """The context length vLLM would read from the model (``max_position_embeddings``)."""
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text())
        return int(config["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_MAX_MODEL_LEN


def _sim_options(ns: argparse.Namespace, env: Mapping[str, str]) -> SimOptions:
    fault_specs: list[str] = ns.sim_fault or env.get("SPECTUNE_SIM_FAULT", "").split(",")
    faults = parse_faults(fault_specs)
    if not ns.sim_speed > 0:
        raise ValueError(f"--sim-speed must be positive (or inf), got {ns.sim_speed}")
    return SimOptions(
        hardware=ns.sim_hardware,
        faults=faults,
        speed=ns.sim_speed,
        seed=ns.sim_seed,
        vllm_version=parse_version(ns.sim_vllm_version),
    )


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeArgs:
    """Parses ``[serve] [MODEL] [flags]`` like ``vllm serve``.

    Args:
        argv: the arguments after the program name.
        env: where ``SPECTUNE_SIM_FAULT`` is read (the other variables are argparse defaults
            read from ``os.environ``); defaults to ``os.environ``.

    Returns:
        The parsed arguments.

    Raises:
        SystemExit: status 2 with an argparse message for unknown flags, bad values or a
            missing model, as vLLM's parser exits; status 0 after ``--version``/``--help``.
        ConfigValidationError: a value vLLM's config classes would reject.
    """
    env = os.environ if env is None else env
    args = list(argv)
    if args[:1] == ["serve"]:
        args = args[1:]
    parser = _parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(args)
    file_model = None
    if known.config:
        file_argv, file_model = config_file_argv(known.config, parser)
        # As vLLM does: the model first, then the file's flags, then the command line's, so
        # the command line wins and a bare boolean from the file cannot swallow the model.
        head = args[:1] if args and not args[0].startswith("-") else []
        args = head + file_argv + args[len(head) :]
    ns = parser.parse_args(args)
    model: str | None = ns.model or file_model
    if not model:
        parser.error("the following arguments are required: model_tag")
    try:
        sim = _sim_options(ns, env)
    except ValueError as exc:
        parser.error(f"argument --sim-fault/--sim-speed: {exc}")
    except ConfigError as exc:
        parser.error(f"argument --sim-vllm-version: {exc}")
    if ns.enable_per_request_metrics and sim.vllm_version < PER_REQUEST_METRICS_SINCE:
        parser.error("unrecognized arguments: --enable-per-request-metrics")  # as vLLM's parser
    extra: list[tuple[str, FlagValue]] = []
    if ns.max_num_seqs is not None:
        extra.append(("max-num-seqs", ns.max_num_seqs))
    if ns.enforce_eager:
        extra.append(("enforce-eager", True))
    names = tuple(ns.served_model_name or ())
    server = ServerConfig(
        model=model,
        tensor_parallel_size=ns.tensor_parallel_size,
        max_model_len=ns.max_model_len or _model_max_len(model),
        gpu_memory_utilization=ns.gpu_memory_utilization,
        max_num_batched_tokens=ns.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS,
        speculative=_speculative(ns),
        quantization=ns.quantization,
        enable_chunked_prefill=ns.enable_chunked_prefill is not False,
        served_model_name=names[0] if names else None,
        extra_flags=tuple(extra),
    )
    ignored = tuple(
        f"--{key.removeprefix('ignored_').replace('_', '-')}"
        for key, value in sorted(vars(ns).items())
        if value is not None
        and (key.startswith("ignored_") or f"--{key.replace('_', '-')}" in _IGNORED_BOOL_FLAGS)
    )
    return ServeArgs(
        server=server,
        served_names=names or (model,),
        host=ns.host,
        port=ns.port,
        kv_cache_memory_bytes=ns.kv_cache_memory_bytes,
        api_key=ns.api_key,
        ignored=ignored,
        sim=sim,
        per_request_metrics=ns.enable_per_request_metrics,
    )
