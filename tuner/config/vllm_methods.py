"""Whether a vLLM release runs a config's method and options, before anything is launched.

Each method's own releases and keys are its module's (:mod:`tuner.config.methods`); the
options every model-based method shares (``parallel_drafting``, ``rejection_sample_method``,
``draft_sample_method``, ``enable_adaptive_verification``, ``dspark_draft_topk``) are dated in
:data:`OPTION_SUPPORT` and written by :func:`option_keys` only where they differ from vLLM's
defaults; :mod:`tuner.config.vllm_features` has the table of what changed per release.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods import method_of
from tuner.config.trial import SpeculativeConfig
from tuner.config.verification import DraftHead, DraftSampling, Verification
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = [
    "OPTION_SUPPORT",
    "OptionSupport",
    "check_method",
    "check_speculative",
    "option_keys",
]


@dataclass(frozen=True)
class OptionSupport:
    """The first release that has an option's non-default value (the dates and what changed
    are :mod:`tuner.config.vllm_features`'s table)."""

    name: str
    value: object
    since: VllmVersion
    source: str


OPTION_SUPPORT = (
    OptionSupport("parallel_drafting", True, VllmVersion(0, 16, 0), "SpeculativeConfig field"),
    OptionSupport(
        "rejection_sample_method", "block", VllmVersion(0, 25, 0), "RejectionSampleMethod"
    ),
    OptionSupport("rejection_sample_method", "fly", VllmVersion(0, 33, 0), "RejectionSampleMethod"),
    OptionSupport("draft_sample_method", "probabilistic", VllmVersion(0, 22, 0), "0.21: gumbel"),
    OptionSupport(
        "enable_adaptive_verification", True, VllmVersion(0, 28, 0), "SpeculativeConfig field"
    ),
    OptionSupport("dspark_draft_topk", None, VllmVersion(0, 28, 0), "SpeculativeConfig field"),
    *(
        OptionSupport(
            "draft_lm_head_quantization", str(value), VllmVersion(0, 33, 0), ":538-543 (0.34.0)"
        )
        for value in (DraftHead.FP8, DraftHead.NVFP4)
    ),
    OptionSupport("xpress_topc", None, VllmVersion(0, 33, 0), ":694-698 (0.34.0)"),
)


def check_speculative(spec: SpeculativeConfig, version: VllmVersion) -> None:
    """Refuses a config's method or option that the release does not have, before a launch.

    Raises:
        ConfigError: naming the method or option, the release it came in and the fix.
    """
    check_method(spec.method, version, spec.model)
    method = method_of(spec.method)
    for name in (*method.keys, *(option.name for option in OPTION_SUPPORT)):
        value = getattr(spec, name)
        refusal = None if value is None else method.option_refusal(name, value, version)
        if refusal is not None:
            raise ConfigError(refusal)
    for option in OPTION_SUPPORT:
        value = getattr(spec, option.name)
        value = str(value) if isinstance(value, str) else value  # an enum's value, as written
        present = value is not None if option.value is None else value == option.value
        if present and version < option.since:
            raise ConfigError(
                f"vLLM {version} has no {option.name} {value!r} (it came in {option.since}: "
                f"vllm/config/speculative.py, {option.source}): use vLLM {option.since} or "
                "later, or drop it"
            )


def option_keys(spec: SpeculativeConfig) -> dict[str, object]:
    """The verification and drafting keys that differ from vLLM's defaults (written only then,
    so a config that leaves them alone speaks every release)."""
    keys: dict[str, object] = {}
    if spec.parallel_drafting and not method_of(spec.method).one_pass:  # vLLM sets it for those
        keys["parallel_drafting"] = True
    if spec.rejection_sample_method is not Verification.STANDARD:
        keys["rejection_sample_method"] = str(spec.rejection_sample_method)
    if spec.draft_sample_method is not DraftSampling.GREEDY:
        keys["draft_sample_method"] = str(spec.draft_sample_method)
    if spec.enable_adaptive_verification:
        keys["enable_adaptive_verification"] = True
    if spec.draft_lm_head_quantization is not DraftHead.NONE:
        keys["draft_lm_head_quantization"] = str(spec.draft_lm_head_quantization)
    return keys


def check_method(spec_method: SpecMethod, version: VllmVersion, model: str | None = None) -> None:
    """Refuses a method spectune does not speak, or one that ``version`` cannot run.

    Raises:
        ConfigError: naming the method, the release it needs and the fix.
    """
    method = method_of(spec_method)
    if not method.speculates:  # an unknown name never became a SpecMethod
        known = ", ".join(str(m) for m in SpecMethod if method_of(m).speculates)
        raise ConfigError(
            f"speculative method {str(spec_method)!r} drafts nothing: use one of {known}"
        )
    refusal = method.refusal(version, model)
    if refusal is not None:
        raise ConfigError(refusal)
