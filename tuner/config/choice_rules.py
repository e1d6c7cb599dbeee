"""Which speculation choices a target, its drafters and a vLLM release can run.

:func:`check_choices` is the load-time judge of a space's choices: a head must belong to the
target, MTP needs the target's MTP layers, a draft must pass vLLM's vocabulary rules, a block
drafter its checkpoint rules (:mod:`tuner.catalog.drafters`), and each method, key and value
must exist in the release and run on the model runner the config lands on
(:mod:`tuner.config.vllm_features`); adaptive verification needs CUDA graphs, no LoRA and
no pipeline stages (:func:`check_adaptive`); a lossy verifier needs the space's opt-in
(:func:`check_lossy`). It returns the choices with a block drafter's unset K
resolved to the width the drafter was trained for. Every refusal is one line.
"""

from __future__ import annotations

from dataclasses import replace

from tuner.catalog.drafters import check_parallel_head, check_topc, check_topk
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.choices import SpecChoice
from tuner.config.methods import method_of
from tuner.config.trial import FlagValue
from tuner.config.vllm_features import check_options
from tuner.config.vllm_methods import check_method
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = ["check_adaptive", "check_choices", "check_lossy"]


def _check_settings(choice: SpecChoice, tensor_parallel: int) -> None:
    topk = dict(choice.settings).get("dspark_draft_topk")
    if topk is not None and choice.model is not None:
        check_topk(choice.model, load_model(choice.model).config, int(topk.high), tensor_parallel)
    topc = dict(choice.settings).get("xpress_topc")
    if topc is not None and choice.model is not None:
        check_topc(choice.model, load_model(choice.model).config, int(topc.high))
    if True in choice.allowed("parallel_drafting") and choice.model is not None:
        check_parallel_head(choice.model, load_model(choice.model).config)


def check_choices(
    choices: tuple[SpecChoice, ...],
    target: ModelSpec,
    version: VllmVersion | None,
    tensor_parallel: int = 1,
) -> tuple[SpecChoice, ...]:
    """The choices the target and the vLLM release can run, block drafters' K resolved.

    Args:
        choices: a space's choices, as written.
        target: the served model.
        version: the vLLM release; None (unknown) skips the release's rules.
        tensor_parallel: the target's tensor-parallel size.

    Raises:
        ConfigError: the first choice at fault (an :class:`IncompatibleDraftError` for pairs).
    """
    fitted: list[SpecChoice] = []
    for choice in choices:
        if not method_of(choice.method).speculates:
            fitted.append(choice)
            continue
        if version is not None:
            check_method(choice.method, version, choice.model)
        k = method_of(choice.method).check(target, choice.model, choice.k, version)
        choice = replace(choice, k=k)
        if version is not None:
            check_options(choice, target, version)
        _check_settings(choice, tensor_parallel)
        fitted.append(choice)
    return tuple(fitted)


# What adaptive verification cannot run with, flag by flag: vLLM's refusal and what turns it on
# (VllmConfig._validate_adaptive_verification, vllm/config/vllm.py:3271-3314 in 0.34.0).
_ADAPTIVE_REFUSALS = (
    ("enforce-eager", "requires full CUDA graphs, which enforce-eager turns off"),
    ("enable-lora", "is not currently compatible with LoRA"),
    ("pipeline-parallel-size", "is not currently compatible with pipeline parallelism"),
)


def _set(value: object, flag: str) -> bool:
    """Whether an extra flag's value turns the feature on (a pipeline of more than one stage)."""
    if flag == "pipeline-parallel-size":
        return str(value).isdigit() and int(str(value)) > 1
    return value is not False


def check_adaptive(
    choices: tuple[SpecChoice, ...], extra_flags: tuple[tuple[str, FlagValue], ...]
) -> None:
    """Refuses adaptive verification beside a flag vLLM refuses it with: ``--enforce-eager``
    (no full CUDA graphs), ``--enable-lora``, a pipeline of more than one stage.

    Raises:
        ConfigError: naming the choice, vLLM's rule and the fix.
    """
    adaptive = next((c for c in choices if True in c.allowed("enable_adaptive_verification")), None)
    if adaptive is None:
        return
    flags = {name.lstrip("-").replace("_", "-"): value for name, value in extra_flags}
    for flag, why in _ADAPTIVE_REFUSALS:
        if flag in flags and _set(flags[flag], flag):
            raise ConfigError(
                f"{adaptive.label}: adaptive verification {why} and server.extra_flags sets "
                f"{flag} (vLLM refuses the pair): drop one of them"
            )


def check_lossy(choices: tuple[SpecChoice, ...], allow_lossy: bool) -> None:
    """Refuses a lossy verifier (``fly``) in a space that has not opted in to it: it may answer
    what the target alone would not have, so no study searches it unasked.

    Raises:
        ConfigError: naming the choice and the opt-in.
    """
    if allow_lossy:
        return
    lossy = next((c for c in choices if "fly" in c.allowed("rejection_sample_method")), None)
    if lossy is not None:
        raise ConfigError(
            f"{lossy.label}: rejection_sample_method fly is lossy (vLLM 0.33's FLy accepts some "
            "tokens the target would not have produced, vllm/config/speculative.py:610-617): "
            "add `quality: {allow_lossy: true}` to search it, each fly trial checked against "
            "standard verification, or drop fly"
        )
