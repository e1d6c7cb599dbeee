"""What every speculation method declares: the :class:`Method` record its module fills in.

A method's module (``ngram.py``, ``eagle.py``, ...) holds its whole story: the space's section
for it, the releases that run it and the ``--speculative-config`` keys it writes, the model
runner it lands on per release, what its checkpoint must satisfy and how its K is bounded, and
the simulator's acceptance prior for it. Everything else asks the method's record
(:func:`tuner.config.methods.method_of`) and never compares the method's name, as vLLM 0.34's
``SpeculatorConfig`` registry does (``vllm/v1/worker/gpu/spec_decode/speculator_config.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.catalog.models import ModelSpec
from tuner.catalog.spec_method import SpecMethod
from tuner.config.vllm_version import VllmVersion

__all__ = [
    "UNRESOLVED_K",
    "V1_REMOVED",
    "V2_EXISTS",
    "AcceptancePrior",
    "Method",
    "MethodFamily",
    "Range",
]

# The oldest release spectune speaks.
_OLDEST = VllmVersion(0, 6, 0)
# 0.30 moved adaptive verification into V2's DraftModelSpeculator: every model drafter runs it.
_ADAPTIVE_EVERY_DRAFTER = VllmVersion(0, 30, 0)
# vllm/v1/worker/gpu/ (Model Runner V2) and VLLM_USE_V2_MODEL_RUNNER appear in 0.12.
V2_EXISTS = VllmVersion(0, 12, 0)
# 0.34 removed the V1 model runner (vllm/v1/worker/gpu_model_runner.py is gone): every config
# runs on V2, and whatever still needed V1 either runs natively there (suffix) or is refused.
V1_REMOVED = VllmVersion(0, 34, 0)


class MethodFamily(enum.StrEnum):
    """Speculation methods that share a cost structure and an acceptance model."""

    NONE = "no speculation"
    DRAFT = "a draft model"
    HEAD = "an EAGLE head"
    MTP = "MTP layers"
    BLOCK = "a block drafter"
    LOOKUP = "prompt lookup"


@dataclass(frozen=True)
class Range:
    """A numeric interval; ``step`` discretises it (ints always step by 1)."""

    low: float
    high: float
    step: float | None = None


# A block drafter's K when the space leaves it unset: resolved from the drafter's block size.
UNRESOLVED_K = Range(0, 0)


@dataclass(frozen=True)
class AcceptancePrior:
    """The simulator's shipped acceptance for one method (fitted on public figures by
    ``benchmarks/simulator_reference.py``; the twin refits them from a study's trials).

    Attributes:
        decay: conditional acceptance's factor per later position (None: a draft model's).
        logit: the first position's logit per prompt set, for a method with its own (heads,
            MTP layers); the others take their family's (draft pair, block, lookup).
        sampled_penalty: logit lost per squared unit of temperature with sampled drafts
            (``draft_sample_method: probabilistic``), for a method whose drafter loses
            otherwise than a head's (None: the shared one).
    """

    decay: float | None = None
    logit: Mapping[str, float] = field(default_factory=dict)
    sampled_penalty: float | None = None


_NO_PRIOR = AcceptancePrior()


@dataclass(frozen=True)
class Method:
    """One speculation method, as vLLM's ``speculative_config`` names it, and its rules.

    Attributes:
        name: the method.
        family: its cost structure and acceptance model.
        since: the oldest release that runs it, and ``since_source`` where that is read.
        keys: its own ``--speculative-config`` keys (besides ``method``, ``model`` and
            ``num_speculative_tokens``), written where set.
        v2_since: the first release whose Model Runner V2 runs it (before: V1).
        adaptive_since: the first release that runs adaptive verification with it.
        prior: the simulator's acceptance prior.
        matches_earlier_outputs: whether it also drafts from earlier requests' outputs, not
            only from this request's text (suffix trees).
        counters_carry: whether its first K' tokens drafted at K are the tokens it drafts at
            K' (a block drafter's about: each position sees the whole block), so vLLM's
            per-position counters at K give its acceptance at every K' <= K.
    """

    name: SpecMethod
    family: MethodFamily
    since: VllmVersion = _OLDEST
    since_source: str = ""
    keys: tuple[str, ...] = ()
    v2_since: VllmVersion = V2_EXISTS
    adaptive_since: VllmVersion = _ADAPTIVE_EVERY_DRAFTER
    prior: AcceptancePrior = _NO_PRIOR
    matches_earlier_outputs: bool = False
    counters_carry: bool = True

    def __repr__(self) -> str:
        return f"<method {self.name}>"

    @property
    def speculates(self) -> bool:
        """False for ``none`` only."""
        return self.family is not MethodFamily.NONE

    @property
    def takes_model(self) -> bool:
        """Whether it loads a model named in ``SpeculativeConfig.model``."""
        return self.family in (MethodFamily.DRAFT, MethodFamily.HEAD, MethodFamily.BLOCK)

    @property
    def needs_model(self) -> bool:
        """Whether a config of it is incomplete without ``model``."""
        return self.takes_model

    @property
    def one_pass(self) -> bool:
        """Whether it drafts all K tokens in one pass whatever the config (vLLM sets
        ``parallel_drafting`` for it itself)."""
        return self.family is MethodFamily.BLOCK

    def refusal(self, version: VllmVersion, model: str | None = None) -> str | None:
        """Why ``version`` cannot run the method (with ``model``, where it takes one) at all,
        as one line with the fix; None: it can."""
        if version < self.since:
            return (
                f"vLLM {version} cannot speculate with method {self.name} (it came in "
                f"{self.since}, {self.since_source}): use vLLM {self.since} or later, or "
                "another method"
            )
        return None

    def v1_reason(self, version: VllmVersion) -> str | None:
        """What keeps the method on the V1 runner in ``version``, in vLLM's words (None: V2
        runs it), from 0.22 on, where V2 is tried by default."""
        if version < self.v2_since:
            return f"speculative method '{self.name}'"
        return None

    def option_refusal(self, name: str, value: object, version: VllmVersion) -> str | None:
        """Why ``version`` cannot start the method with option or setting ``name`` at
        ``value`` (None: it can), as one phrase with the fix."""
        return None

    def keys_for(self, version: VllmVersion) -> tuple[str, ...]:
        """Its own ``--speculative-config`` keys that have an effect in ``version``."""
        return self.keys

    def running_cap(self, k: int, max_num_batched_tokens: int, version: VllmVersion) -> int | None:
        """The most requests ``version`` runs at once with this method at K = ``k`` (None: no
        cap of its own)."""
        return None

    def forces_v2(self, version: VllmVersion, drafter: Mapping[str, Any]) -> bool:
        """Whether ``version`` runs it on V2 whatever the target (``drafter``: the drafter's
        ``config.json``, empty when unknown)."""
        return False

    def writes_name(self, version: VllmVersion) -> bool:
        """Whether ``--speculative-config`` names the method in ``version`` (older releases
        infer some methods from the model)."""
        return True

    def standalone_model(self, model: str | None) -> str | None:
        """Its ``--speculative-model`` value in the flag dialect before 0.8.2 (None: that
        dialect has no flag for it)."""
        return None

    def settled(self, own: Mapping[str, Any]) -> dict[str, Any]:
        """``own`` (this method's own values) as vLLM accepts them together: unchanged here;
        a method whose values constrain each other says how."""
        return dict(own)

    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        """Refuses a choice whose checkpoint does not fit the target; returns its K range
        (resolved where the space left it to the drafter).

        Raises:
            ConfigError: naming the rule and the fix.
        """
        return k
