"""A separate, smaller model of the target's vocabulary drafts token by token.

Since 0.6. The V1 engine dropped draft models in 0.10 and took them back in 0.15 as
``"method": "draft_model"`` (older releases infer the method from the model); before 0.8.2 the
standalone ``--speculative-model MODEL`` flag names it. Model Runner V2 runs it from 0.31
(``_get_v2_model_runner_unsupported_features``, ``vllm/config/vllm.py``), except a draft whose
vocabulary size differs from the target's (0.32-0.33: ``use_heterogeneous_vocab`` keeps it on
V1).

Vocabulary sizes (embedding rows, ``config.json``'s ``vocab_size``): Qwen2.5-7B and larger have
152064, the 0.5B-3B drafts 151936 with the same tokenizer. The V0 engine (up to 0.9) asserts
equal sizes (``SpecDecodeWorker._vocab_size``); 0.15-0.24's ``SpeculativeConfig`` raises
"Target and draft model should have the same vocabulary size"; 0.25-0.33 take the pair with
``use_heterogeneous_vocab`` (spectune sets it); 0.34 removed that field and raises again
(``verify_equal_vocab_size_if_draft_model``, ``vllm/config/speculative.py:1725-1740`` in
0.34.0). The tokenizer and size rules are :func:`tuner.catalog.models.check_draft`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tuner.catalog.heads import is_head
from tuner.catalog.models import (
    CATALOG,
    ModelSpec,
    check_draft,
    load_model,
    needs_heterogeneous_vocab,
)
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, Method, MethodFamily, Range
from tuner.config.methods.fields import KChoice, Models, SpecTokensRange, Verified
from tuner.config.vllm_version import VllmVersion
from tuner.errors import IncompatibleDraftError

__all__ = ["DRAFT_MODEL", "DraftMethod", "check_pair", "mixed_vocab_flag", "same_vocabulary_draft"]

_DROPPED = VllmVersion(0, 10, 0)
_BACK = VllmVersion(0, 15, 0)
_MIXED_VOCAB_FLAG = VllmVersion(0, 25, 0)  # use_heterogeneous_vocab appears
_MIXED_VOCAB_REMOVED = VllmVersion(0, 34, 0)  # ... and is gone


def same_vocabulary_draft(target: ModelSpec) -> str | None:
    """A catalog draft of the target's vocabulary size (which every release takes), if any."""
    found = [
        m.hf_id
        for m in CATALOG
        if m.tokenizer_family == target.tokenizer_family
        and m.vocab == target.vocab
        and m.params < target.params
        and not m.quantized
        and not is_head(m.config, m.hf_id)
    ]
    return found[0] if found else None


def mixed_vocab_flag(version: VllmVersion) -> bool:
    """Whether ``version`` takes a draft of another vocabulary size (``use_heterogeneous_vocab``,
    which spectune then sets)."""
    return _MIXED_VOCAB_FLAG <= version < _MIXED_VOCAB_REMOVED


def check_pair(target: ModelSpec, draft: ModelSpec, release: VllmVersion | None) -> None:
    """Refuses a draft that cannot speculate for ``target`` on vLLM ``release`` (None: any
    release's rules but the vocabulary sizes'): :func:`~tuner.catalog.models.check_draft`, then
    a pair of different vocabulary sizes on a release that refuses it.

    Raises:
        IncompatibleDraftError: naming the pair, the release's rule and the fix.
    """
    check_draft(target, draft)
    if not needs_heterogeneous_vocab(target, draft) or release is None:
        return
    if mixed_vocab_flag(release):
        return
    same = same_vocabulary_draft(target)
    hint = f", or a draft with {target.vocab} rows ({same})" if same else ""
    if release >= _MIXED_VOCAB_REMOVED:
        raise IncompatibleDraftError(
            f"draft {draft.hf_id} has {draft.vocab} vocabulary rows but target {target.hf_id} "
            f'has {target.vocab}, and vLLM {release} refuses that pair ("Target and draft model '
            'should have the same vocabulary size": 0.34 removed use_heterogeneous_vocab): use '
            f"an EAGLE-3 head or a DFlash drafter for {target.hf_id}{hint}, or an image up to "
            "vLLM 0.33"
        )
    why = (
        "its V0 engine asserts equal sizes (SpecDecodeWorker._vocab_size)"
        if release < _DROPPED
        else '"Target and draft model should have the same vocabulary size"'
    )
    raise IncompatibleDraftError(
        f"draft {draft.hf_id} has {draft.vocab} vocabulary rows but target {target.hf_id} has "
        f"{target.vocab}, and vLLM {release} refuses that pair ({why}; use_heterogeneous_vocab "
        f"came in 0.25): use vLLM 0.25 or later{hint}"
    )


class DraftMethod(Verified):
    """A separate, smaller model of the target's vocabulary."""

    method: Literal[SpecMethod.DRAFT_MODEL]
    model: Models = Field(examples=["Qwen/Qwen2.5-0.5B-Instruct"])
    """One draft or a list (each is a choice of its own)."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)

    def models(self) -> list[str | None]:
        return list(self.model)


class _DraftModel(Method):
    def refusal(self, version: VllmVersion, model: str | None = None) -> str | None:
        if _DROPPED <= version < _BACK:
            return (
                f"vLLM {version} cannot speculate with a separate draft model"
                + (f" ({model})" if model else "")
                + ": its V1 engine dropped draft models from 0.10 until 0.15. Use vLLM 0.15 "
                "or later (or 0.9.2 or older), or the ngram method"
            )
        return super().refusal(version, model)

    def writes_name(self, version: VllmVersion) -> bool:
        return version >= _BACK

    def standalone_model(self, model: str | None) -> str | None:
        return model

    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        check_pair(target, load_model(str(model)), release)
        return k


DRAFT_MODEL = _DraftModel(
    SpecMethod.DRAFT_MODEL,
    MethodFamily.DRAFT,
    since=VllmVersion(0, 6, 0),
    since_source="vllm/config/speculative.py (0.32)",
    v2_since=VllmVersion(0, 31, 0),
    prior=AcceptancePrior(decay=0.95),
)
