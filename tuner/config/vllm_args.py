"""A :class:`~tuner.config.trial.ServerConfig` spelled in the flag dialect of one vLLM version.

vLLM renamed its speculative-decoding flags, dropped others, and changed how ``--config`` files
are read. Each difference below was checked in ``vllm/engine/arg_utils.py``, ``config.py`` and the
config-file loader of the released wheels 0.6.6, 0.8.1, 0.8.2, 0.8.4, 0.8.5, 0.9.2, 0.10.0,
0.14.0, 0.15.0, 0.16.0 and 0.32.0 (and against BRIEF.md's notes, which reach 0.33.0):

=============  ================================================================================
0.6.x          ``--speculative-model M --num-speculative-tokens K`` (ngram: ``"[ngram]"`` plus
               ``--ngram-prompt-lookup-max``/``-min``); ``--use-v2-block-manager`` with speculation
               (early 0.6 releases need it for speculation; by 0.6.6 it is a deprecated no-op).
0.7 - 0.8.1    the same standalone flags; ``--use-v2-block-manager`` is a no-op, left out.
0.8.2          ``--speculative-config JSON`` added (the standalone flags still work; we use JSON).
0.8.3 - 0.9.x  JSON only. A draft model runs on the V0 engine (vLLM falls back by itself).
0.10 - 0.14    V1 only: a separate draft model raises NotImplementedError; we refuse it first.
               ``--use-v2-block-manager`` is gone (argparse would exit on it).
0.15 -         draft models are back on V1 as ``"method": "draft_model"``; the draft's tensor
               parallelism defaults to the target's, which V1 requires.
0.25 -         ``"use_heterogeneous_vocab": true`` when the draft's ``vocab_size`` differs from
               the target's (Qwen2.5-0.5B's 151936 rows against 32B's 152064); without it
               ``SpeculativeConfig`` refuses the pair (``vllm/config/speculative.py``). Older
               releases cannot run such a pair: ``tuner.catalog.models.check_draft`` refuses it
               when the space loads.
=============  ================================================================================

Which releases run EAGLE, EAGLE-3, MTP and suffix decoding, and with which keys, is the table of
:mod:`tuner.config.vllm_methods`; those methods are spelled in the JSON dialect only.

``--quantization`` only when the server config asks for a method other than the one the
checkpoint's ``quantization_config`` declares: vLLM detects that one by itself and picks its
fastest kernel (``vllm/config/model.py`` ``_verify_quantization`` asks each method's
``override_quantization_method``). On 0.9.2-0.16 an explicit ``--quantization awq`` forces the
slow AWQ kernel instead of Marlin (BRIEF.md; only 0.32's source was read here, where
``vllm/model_executor/layers/quantization/auto_awq.py`` upgrades ``awq`` requests as well).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tuner.catalog.gpus import GpuSpec
from tuner.catalog.models import ModelSpec, load_model, needs_heterogeneous_vocab
from tuner.config.methods import MethodFamily, Range, method_of
from tuner.config.methods.draft_model import mixed_vocab_flag
from tuner.config.trial import FlagValue, ServerConfig
from tuner.config.vllm_methods import check_speculative, option_keys
from tuner.config.vllm_version import (
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    VllmVersion,
    detect_version,
    parse_version,
    version_from_image,
)
from tuner.errors import ConfigError

__all__ = [
    "EXTENSIBLE_KV_CACHE_SINCE",
    "NEWEST_KNOWN",
    "PER_BATCH_SIZE_SINCE",
    "PER_REQUEST_METRICS_SINCE",
    "UNSET_MEMORY_SHARE",
    "Dialect",
    "VllmVersion",
    "check_supported",
    "config_file_argv",
    "detect_version",
    "dialect",
    "has_per_batch_size",
    "heterogeneous_vocab",
    "measured_kv_cache",
    "measurement_flags",
    "memory_range",
    "parse_version",
    "sampled_value_refusal",
    "server_argv",
    "server_yaml",
    "version_from_image",
    "writes_memory_share",
]


EXTENSIBLE_KV_CACHE_SINCE = VllmVersion(0, 34, 0)
# --enable-per-request-metrics: each response's own TTFT and queue time (vllm/entrypoints/
# common/cli_args.py:158 in 0.34.0, :150 in 0.32's CPU build); refused with --disable-log-stats.
PER_REQUEST_METRICS_SINCE = VllmVersion(0, 32, 0)
# gpu_memory_utilization left unset, as the extensible KV cache resolves it.
UNSET_MEMORY_SHARE = 1.0
_V0_7 = VllmVersion(0, 7, 0)
_V0_8_2 = VllmVersion(0, 8, 2)
_V0_8_4 = VllmVersion(0, 8, 4)
_V0_8_5 = VllmVersion(0, 8, 5)
_V0_10 = VllmVersion(0, 10, 0)
_V0_16 = VllmVersion(0, 16, 0)
# The first release whose speculative config has num_speculative_tokens_per_batch_size (vLLM's
# config/speculative.py and v1/spec_decode/dynamic/utils.py, PR #32374).
PER_BATCH_SIZE_SINCE = VllmVersion(0, 24, 0)


@dataclass(frozen=True)
class Dialect:
    """How one vLLM version spells a server config (see the module docstring for the table)."""

    speculative_flags: Literal["standalone", "json"]
    v2_block_manager: bool  # add --use-v2-block-manager when speculating (0.6.x)
    negative_booleans: bool  # --no-FLAG exists (0.8.5+); before, --enable-chunked-prefill False
    yaml_nested: bool  # --config turns a nested mapping into JSON (0.16+)
    yaml_model: bool  # --config may carry the model (0.8.4+)


def has_per_batch_size(version: VllmVersion) -> bool:
    """Whether ``version`` can switch K (or speculation) by batch size."""
    return version >= PER_BATCH_SIZE_SINCE


def dialect(version: VllmVersion) -> Dialect:
    """The flag dialect of ``version`` (the newest known one for any later release)."""
    return Dialect(
        speculative_flags="json" if version >= _V0_8_2 else "standalone",
        v2_block_manager=version < _V0_7,
        negative_booleans=version >= _V0_8_5,
        yaml_nested=version >= _V0_16,
        yaml_model=version >= _V0_8_4,
    )


# Flags spectune derives from ServerConfig fields; an extra flag may not set them a second time.
_MODELED_FLAGS = frozenset(
    {
        "model",
        "host",
        "port",
        "config",
        "tensor-parallel-size",
        "max-model-len",
        "gpu-memory-utilization",
        "max-num-batched-tokens",
        "quantization",
        "enable-chunked-prefill",
        "no-enable-chunked-prefill",
        "served-model-name",
        "speculative-config",
        "speculative-model",
        "num-speculative-tokens",
        "ngram-prompt-lookup-max",
        "ngram-prompt-lookup-min",
    }
)
_FLAG_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _flag_name(name: str) -> str:
    """``--enforce_eager`` and ``enforce-eager`` both mean ``enforce-eager``."""
    return name.lstrip("-").replace("_", "-").lower()


def measured_kv_cache(version: VllmVersion) -> bool:
    """Whether ``version`` sizes the KV cache from memory measured free after warm-up (the
    extensible KV cache, on by default on CUDA from 0.34: ``enable_extensible_kv_cache`` in
    ``vllm/config/cache.py``), so that ``gpu_memory_utilization`` unset means all of it."""
    return version >= EXTENSIBLE_KV_CACHE_SINCE


def writes_memory_share(server: ServerConfig, version: VllmVersion) -> bool:
    """Whether ``--gpu-memory-utilization`` is written: not where the config leaves it at the
    release's own default (1.0 with the extensible KV cache, ``resolved_gpu_memory_utilization``
    in ``vllm/config/cache.py``), which vLLM asks users to leave unset."""
    return not (measured_kv_cache(version) and server.gpu_memory_utilization >= UNSET_MEMORY_SHARE)


def memory_range(
    written: Range, version: VllmVersion | None, headroom_gib: float | None, total_gib: float
) -> Range:
    """The ``gpu_memory_utilization`` values a study searches on ``version``.

    Up to 0.33 the space's range as written. From 0.34 the flag stays unset (1.0: the KV cache
    is sized from measured memory) unless memory must be left for processes that allocate
    after vLLM starts (``server.memory_headroom_gib``); then the space's range, capped to
    leave that headroom.
    """
    if version is None or not measured_kv_cache(version):
        return written
    if not headroom_gib:
        return Range(UNSET_MEMORY_SHARE, UNSET_MEMORY_SHARE)
    cap = round(1.0 - headroom_gib / total_gib, 4)
    high = min(written.high, cap)
    return Range(min(written.low, high), high, written.step)


def measurement_flags(server: ServerConfig, version: VllmVersion) -> list[str]:
    """The flags a measured server adds to its config: the server's own per-request TTFT and
    queue time in every response (never exported: they serve the measurement, not the
    deployment)."""
    names = {_flag_name(name) for name, value in server.extra_flags if value is not False}
    if version < PER_REQUEST_METRICS_SINCE or "disable-log-stats" in names:
        return []
    return ["--enable-per-request-metrics"]


def check_supported(server: ServerConfig, version: VllmVersion) -> None:
    """Refuses configs that ``version`` cannot start, before anything is launched.

    Raises:
        ConfigError: naming the setting at fault and the fix.
    """
    if version < OLDEST_SUPPORTED:
        raise ConfigError(
            f"vLLM {version} is older than {OLDEST_SUPPORTED}, the oldest flag dialect spectune "
            "knows: upgrade vLLM"
        )
    spec = server.speculative
    if spec is not None:
        check_speculative(spec, version)
        if spec.num_speculative_tokens < 1:
            raise ConfigError(
                f"num_speculative_tokens must be at least 1, got {spec.num_speculative_tokens}"
            )
        if spec.k_by_batch_size and version < PER_BATCH_SIZE_SINCE:
            raise ConfigError(
                f"vLLM {version} cannot switch K by batch size "
                f"(num_speculative_tokens_per_batch_size needs {PER_BATCH_SIZE_SINCE}+)"
            )
        method = method_of(spec.method)
        if method.needs_model and not spec.model:
            raise ConfigError(f"speculative method {spec.method} needs a model (draft or head)")
        standalone = dialect(version).speculative_flags == "standalone"
        if (
            standalone
            and method.standalone_model(spec.model) is not None
            and "prompt_lookup_max" in method.keys
            and spec.prompt_lookup_max is None
        ):
            raise ConfigError(
                f"ngram speculation on vLLM {version} needs prompt_lookup_max "
                "(--ngram-prompt-lookup-max has no default before 0.8.2)"
            )
    check_extra_flags(server.extra_flags, version)


def check_extra_flags(
    flags: Sequence[tuple[str, object]], version: VllmVersion | None = None
) -> None:
    """Refuses extra flags vLLM would not take, or that fight a setting spectune derives; a
    space's flags are checked as it loads (``version`` None where the image tag names none).

    Raises:
        ConfigError: naming the flag and the fix.
    """
    for name, _ in flags:
        flag = _flag_name(name)
        if not _FLAG_NAME_RE.match(flag):
            raise ConfigError(f"extra flag {name!r} is not a vLLM flag name")
        if flag in _MODELED_FLAGS:
            raise ConfigError(
                f"extra flag --{flag} duplicates a setting spectune derives from the server "
                "config: set that field instead"
            )
        if flag == "use-v2-block-manager" and version is not None and version >= _V0_10:
            raise ConfigError(
                f"--use-v2-block-manager was removed in vLLM 0.10 and {version} would exit on "
                "it: drop the extra flag"
            )


def _extra_int(server: ServerConfig, flag: str) -> int | None:
    for name, value in server.extra_flags:
        if _flag_name(name) == flag and value is not True and value is not False:
            return int(value)
    return None


def _default_max_num_seqs(gpu: GpuSpec | None) -> int:
    """``vllm serve``'s default ``max_num_seqs`` (``EngineArgs.get_batch_defaults``, 0.32)."""
    if gpu is not None and (
        gpu.vram_gib >= 160 or (gpu.vram_gib >= 70 and "a100" not in gpu.name.lower())
    ):
        return 1024
    return 256


def sampled_value_refusal(server: ServerConfig, gpu: GpuSpec | None = None) -> str | None:
    """vLLM's refusal of a config's tuned values, or None when it accepts them.

    These depend on what a trial sampled (batched tokens against the sequence limit or the
    context), so a refused point is an infeasible trial the sampler learns from, not a reason to
    stop the study. Rules read in vLLM 0.32's ``vllm/config/scheduler.py``
    (``SchedulerConfig.verify_max_model_len``) and ``vllm/engine/arg_utils.py`` (defaults).

    Args:
        server: the config a trial would start.
        gpu: the GPU model; the default ``max_num_seqs`` is 1024 on 70 GiB+ cards (A100 aside).
    """
    batched = server.max_num_batched_tokens
    if not server.enable_chunked_prefill and batched < server.max_model_len:
        return (
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len "
            f"({server.max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences."
        )
    seqs = _extra_int(server, "max-num-seqs") or _default_max_num_seqs(gpu)
    if batched < seqs:
        return (
            f"max_num_batched_tokens ({batched}) must be greater than or equal to "
            f"max_num_seqs ({seqs})."
        )
    return None


def _speculative_json(server: ServerConfig, version: VllmVersion) -> dict[str, Any]:
    spec = server.speculative
    assert spec is not None
    config: dict[str, Any] = {}
    method = method_of(spec.method)
    if method.writes_name(version):
        config["method"] = str(spec.method)
    if method.takes_model and spec.model:
        config["model"] = spec.model
    config["num_speculative_tokens"] = spec.num_speculative_tokens
    if spec.k_by_batch_size:
        config["num_speculative_tokens_per_batch_size"] = [list(e) for e in spec.k_by_batch_size]
    if heterogeneous_vocab(server, version):
        config["use_heterogeneous_vocab"] = True
    for key in method.keys_for(version):  # the method's own settings, where set
        value = getattr(spec, key, None)
        if value is not None and key not in config:
            config[key] = value
    config.update(option_keys(spec))
    return config


def _known_model(name: str | None) -> ModelSpec | None:
    """The model's spec when spectune can read it; otherwise vLLM alone judges the flag."""
    if not name:
        return None
    try:
        return load_model(name)
    except ConfigError:
        return None


def heterogeneous_vocab(server: ServerConfig, version: VllmVersion) -> bool:
    """Whether the draft's vocabulary size differs from the target's, on a version with the flag."""
    if not mixed_vocab_flag(version) or server.speculative is None:
        return False
    if method_of(server.speculative.method).family is not MethodFamily.DRAFT:
        return False
    target, draft = _known_model(server.model), _known_model(server.speculative.model)
    return target is not None and draft is not None and needs_heterogeneous_vocab(target, draft)


def _explicit_quantization(server: ServerConfig) -> str | None:
    """The ``--quantization`` to pass: None when it is the checkpoint's own (vLLM detects it)."""
    if not server.quantization:
        return None
    target = _known_model(server.model)
    declared = (target.config.get("quantization_config") or {}) if target else {}
    own = str(declared.get("quant_method", "")).lower() if isinstance(declared, dict) else ""
    return None if server.quantization.lower() == own else server.quantization


_FlagItems = list[tuple[str, FlagValue | dict[str, Any]]]


def _flag_items(server: ServerConfig, version: VllmVersion) -> _FlagItems:
    """(flag, value) pairs in a stable order; ``True`` means a bare flag, a dict is JSON."""
    check_supported(server, version)
    rules = dialect(version)
    items: _FlagItems = [
        ("tensor-parallel-size", server.tensor_parallel_size),
        ("max-model-len", server.max_model_len),
        ("max-num-batched-tokens", server.max_num_batched_tokens),
    ]
    if writes_memory_share(server, version):
        items.insert(2, ("gpu-memory-utilization", server.gpu_memory_utilization))
    quantization = _explicit_quantization(server)
    if quantization:
        items.append(("quantization", quantization))
    if server.served_model_name:
        items.append(("served-model-name", server.served_model_name))
    # Always explicit: the default differs between versions and engines.
    if server.enable_chunked_prefill:
        items.append(("enable-chunked-prefill", True))
    elif rules.negative_booleans:
        items.append(("no-enable-chunked-prefill", True))
    else:
        items.append(("enable-chunked-prefill", "False"))
    items += _speculative_items(server, version)
    for name, value in server.extra_flags:
        # False means "leave the flag off": a store_true flag has no --no- form to ask for.
        if value is not False:
            items.append((_flag_name(name), value))
    return items


def _speculative_items(server: ServerConfig, version: VllmVersion) -> _FlagItems:
    """The speculation flags in ``version``'s dialect (none without speculation)."""
    spec = server.speculative
    if spec is None:
        return []
    rules = dialect(version)
    items: _FlagItems = []
    draft = method_of(spec.method).standalone_model(spec.model)
    if rules.speculative_flags == "json" or draft is None:
        items.append(("speculative-config", _speculative_json(server, version)))
    else:
        items.append(("speculative-model", draft))
        items.append(("num-speculative-tokens", spec.num_speculative_tokens))
        if spec.prompt_lookup_max is not None:
            items.append(("ngram-prompt-lookup-max", spec.prompt_lookup_max))
        if spec.prompt_lookup_min is not None:
            items.append(("ngram-prompt-lookup-min", spec.prompt_lookup_min))
    if rules.v2_block_manager:
        items.append(("use-v2-block-manager", True))
    return items


def server_argv(server: ServerConfig, version: VllmVersion, *, host: str, port: int) -> list[str]:
    """The arguments after ``vllm serve``: the model first, then the flags of ``version``.

    Raises:
        ConfigError: ``version`` cannot run this config (see :func:`check_supported`).
    """
    argv = [server.model, "--host", host, "--port", str(port)]
    for flag, value in _flag_items(server, version):
        if value is True:
            argv.append(f"--{flag}")
        elif isinstance(value, dict):
            argv += [f"--{flag}", json.dumps(value)]
        else:
            argv += [f"--{flag}", str(value)]
    return argv


def server_yaml(server: ServerConfig, version: VllmVersion) -> dict[str, Any]:
    """The mapping to dump as ``vllm serve --config FILE`` (host and port stay on the CLI).

    ``model`` is a key only where the loader reads it (0.8.4+); otherwise the model goes on the
    command line as the positional argument, which :func:`config_file_argv` does.

    Raises:
        ConfigError: ``version`` cannot run this config (see :func:`check_supported`).
    """
    rules = dialect(version)
    config: dict[str, Any] = {"model": server.model} if rules.yaml_model else {}
    for flag, value in _flag_items(server, version):
        if isinstance(value, dict):
            config[flag] = value if rules.yaml_nested else json.dumps(value)
        else:
            config[flag] = value
    return config


def config_file_argv(config: Mapping[str, Any], config_path: str, *, model: str) -> list[str]:
    """The arguments after ``vllm serve`` that start a server from the written ``config``
    (what :func:`server_yaml` returned): the model positional where the file cannot carry it."""
    return [*([] if "model" in config else [model]), "--config", config_path]
