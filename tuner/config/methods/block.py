"""What DFlash and DSpark share: a block drafter fills K tokens in one non-causal pass.

A block drafter is trained for one target and one block width, so its K follows that width
(:func:`tuner.catalog.drafters.k_limit`) and its shapes must be the target's
(:func:`tuner.catalog.drafters.check_block_drafter`). vLLM sets ``parallel_drafting`` for it.

Its draft pass fills ``K + 1`` query slots per request inside ``max_num_batched_tokens``, so
from 0.33 vLLM runs at most ``max_num_batched_tokens // (K + 1)`` requests at once and lowers
``max_num_active_seqs`` to that with only a warning ("The dflash draft pass fits at most N
requests within max_num_batched_tokens=M. Overriding max_num_active_seqs ...":
``vllm/config/vllm.py:2300-2320`` in 0.34.0, ``:2384`` in 0.33.0; the slots are
``dflash/config.py:53-60``). A K and batch pair can so cap the traffic below its concurrency.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from tuner.catalog.drafters import check_block_drafter, k_limit
from tuner.catalog.models import ModelSpec, load_model
from tuner.catalog.seed_drafters import DRAFTERS, drafters_for
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import UNRESOLVED_K, Method, Range
from tuner.config.methods.fields import CountChoice, KChoice, Models, Verified
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError, IncompatibleDraftError

__all__ = ["BLOCK_SPREAD", "BlockDrafter", "BlockMethod"]

# How far a block drafter's first-position logit spreads over a workload's prompts, per unit of
# temperature (tuner/sim/acceptance.py): fitted on DSpark's counters at temperature 1, which
# rise along the block (vllm PR #52992), against the greedy ones that do not.
BLOCK_SPREAD = 1.45


class BlockMethod(Verified):
    """A block drafter (``dflash``, ``dspark``) trained for this target: K tokens in one pass."""

    method: Literal[SpecMethod.DFLASH, SpecMethod.DSPARK]
    model: Models | None = Field(default=None, examples=["z-lab/Qwen3-8B-DFlash-b16"])
    """One drafter or a list; dspark without one drafts with stages inside the target's own
    checkpoint (DeepSeek-V4)."""
    num_speculative_tokens: KChoice | None = None
    """K; unset: the drafter's trained width (dflash: block_size - 1, dspark: block_size)."""
    dspark_draft_topk: CountChoice | None = None
    """dspark with a Qwen3 drafter: the Markov projection on the top-k base logits only."""
    xpress_topc: CountChoice | None = None
    """dflash with an XPress drafter (vLLM 0.33+): candidates its head projects onto (vLLM's
    default 512, or the checkpoint's)."""

    @model_validator(mode="after")
    def _topk_is_dsparks(self) -> BlockMethod:
        if self.dspark_draft_topk is not None and self.method is not SpecMethod.DSPARK:
            raise PydanticCustomError(
                "topk", "dspark_draft_topk belongs to method dspark (vLLM refuses it otherwise)"
            )
        if self.xpress_topc is not None and self.method is not SpecMethod.DFLASH:
            raise PydanticCustomError(
                "topc", "xpress_topc belongs to method dflash (an XPress drafter's setting)"
            )
        return self

    def models(self) -> list[str | None]:
        return list(self.model) if self.model else [None]


_CAPPED_SINCE = VllmVersion(0, 33, 0)


class BlockDrafter(Method):
    """A block drafter's rules: trained for its target, K within its block, the running
    requests capped by its draft pass."""

    def lookahead(self, k: int, version: VllmVersion) -> int:
        """Query slots one request's draft pass takes in ``version``."""
        return k + 1

    def running_cap(self, k: int, max_num_batched_tokens: int, version: VllmVersion) -> int | None:
        if version < _CAPPED_SINCE:
            return None
        return max_num_batched_tokens // self.lookahead(k, version)

    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        if model is None:
            if k == UNRESOLVED_K:
                raise ConfigError(
                    f"{self.name} without a drafter model has no block_size to take K from: "
                    f"set num_speculative_tokens (or name a {self.name} drafter for "
                    f"{target.hf_id})"
                )
            return k
        drafter = load_model(model)
        known = next((d for d in DRAFTERS if d.hf_id.lower() == drafter.hf_id.lower()), None)
        if known is not None and target.hf_id.lower() not in (t.lower() for t in known.targets):
            offer = drafters_for(target.hf_id)
            raise IncompatibleDraftError(
                f"{self.name} drafter {drafter.hf_id} was trained for "
                f"{', '.join(known.targets)}, not {target.hf_id}: pick a drafter of "
                f"{target.hf_id}" + (f" (e.g. {offer[0].hf_id})" if offer else "")
            )
        limit = k_limit(self.name, drafter.config) or 0
        resolved = Range(limit, limit) if k == UNRESOLVED_K else k
        check_block_drafter(
            target.hf_id,
            target.config,
            drafter.hf_id,
            drafter.config,
            self.name,
            int(resolved.high),
        )
        return resolved
