"""Which speculation choices a target, its drafters and a vLLM release can run.

:func:`check_choices` is the load-time judge of a space's choices: a head must belong to the
target, MTP needs the target's MTP layers, a draft must pass vLLM's vocabulary rules, a block
drafter its checkpoint rules (:mod:`tuner.catalog.drafters`), and each method, key and value
must exist in the release and run on the model runner the config lands on
(:mod:`tuner.config.vllm_features`); adaptive verification needs CUDA graphs
(:func:`check_graphs`). It returns the choices with a block drafter's unset K
resolved to the width the drafter was trained for. Every refusal is one line.
"""

from __future__ import annotations

from dataclasses import replace

from tuner.catalog.drafters import check_block_drafter, check_parallel_head, check_topk, k_limit
from tuner.catalog.heads import check_head
from tuner.catalog.models import ModelSpec, Release, check_draft, load_model
from tuner.catalog.mtp import check_mtp
from tuner.catalog.seed_drafters import DRAFTERS, drafters_for
from tuner.config.choices import UNRESOLVED_K, Range, SpecChoice
from tuner.config.trial import BLOCK_METHODS, HEAD_METHODS, FlagValue, SpecMethod
from tuner.config.vllm_features import check_options
from tuner.config.vllm_methods import check_method
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError, IncompatibleDraftError

__all__ = ["check_choices", "check_graphs"]


def _resolved(choice: SpecChoice, target: ModelSpec) -> SpecChoice:
    """A block drafter's choice, its rules checked and its K resolved when the space left it
    unset."""
    if choice.model is None:  # dspark on stages inside the target's checkpoint
        if choice.k == UNRESOLVED_K:
            raise ConfigError(
                f"dspark without a drafter model has no block_size to take K from: set "
                f"num_speculative_tokens (or name a DSpark drafter for {target.hf_id})"
            )
        return choice
    drafter = load_model(choice.model)
    known = next((d for d in DRAFTERS if d.hf_id.lower() == drafter.hf_id.lower()), None)
    if known is not None and target.hf_id.lower() not in (t.lower() for t in known.targets):
        offer = drafters_for(target.hf_id)
        raise IncompatibleDraftError(
            f"{choice.method} drafter {drafter.hf_id} was trained for {', '.join(known.targets)}, "
            f"not {target.hf_id}: pick a drafter of {target.hf_id}"
            + (f" (e.g. {offer[0].hf_id})" if offer else "")
        )
    limit = k_limit(choice.method, drafter.config) or 0
    k = Range(limit, limit) if choice.k == UNRESOLVED_K else choice.k
    check_block_drafter(
        target.hf_id, target.config, drafter.hf_id, drafter.config, choice.method, int(k.high)
    )
    return replace(choice, k=k)


def _check_settings(choice: SpecChoice, tensor_parallel: int) -> None:
    topk = dict(choice.settings).get("dspark_draft_topk")
    if topk is not None and choice.model is not None:
        check_topk(choice.model, load_model(choice.model).config, int(topk.high), tensor_parallel)
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
    release: Release | None = version
    fitted: list[SpecChoice] = []
    for choice in choices:
        if choice.method == SpecMethod.NONE:
            fitted.append(choice)
            continue
        if version is not None:
            check_method(choice.method, version)
        if choice.method == SpecMethod.DRAFT_MODEL:
            check_draft(target, load_model(str(choice.model)), release)
        elif choice.method in HEAD_METHODS:
            head = load_model(str(choice.model))
            check_head(target.hf_id, target.config, head.hf_id, head.config, choice.method)
        elif choice.method == SpecMethod.MTP:
            check_mtp(target.hf_id, target.config)
        elif choice.method in BLOCK_METHODS:
            choice = _resolved(choice, target)
        _check_settings(choice, tensor_parallel)
        if version is not None:
            check_options(choice, target, version)
        fitted.append(choice)
    return tuple(fitted)


def check_graphs(
    choices: tuple[SpecChoice, ...], extra_flags: tuple[tuple[str, FlagValue], ...]
) -> None:
    """Adaptive verification replays full CUDA graphs, which ``--enforce-eager`` turns off:
    vLLM refuses the pair ("Adaptive verification requires full CUDA graphs",
    ``VllmConfig._validate_adaptive_verification``).

    Raises:
        ConfigError: naming the choice and the fix.
    """
    eager = any(
        name.lstrip("-").replace("_", "-") == "enforce-eager" and value is not False
        for name, value in extra_flags
    )
    adaptive = next((c for c in choices if True in c.allowed("enable_adaptive_verification")), None)
    if eager and adaptive is not None:
        raise ConfigError(
            f"{adaptive.label}: adaptive verification requires full CUDA graphs and "
            "server.extra_flags sets enforce-eager (vLLM refuses the pair): drop one of them"
        )
