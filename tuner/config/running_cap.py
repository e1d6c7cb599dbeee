"""Configs whose drafter caps the requests vLLM runs at once below the traffic's concurrency.

A block drafter's draft pass takes K + 1 query slots a request inside
``max_num_batched_tokens`` (K for DSpark's anchor sampling on 0.34), and from 0.33 vLLM lowers
``max_num_active_seqs`` to what fits with only a warning (the method's
:meth:`~tuner.config.methods.base.Method.running_cap`). Such a config is not refused: vLLM
serves it, the extra requests wait, and the trial measures that (the simulator applies the same
cap). :func:`cap_warning` says so once, before anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.config.methods import method_of

if TYPE_CHECKING:  # the space imports this layer's rules; only types come back
    from tuner.config.space import SearchSpace

__all__ = ["cap_warning"]


def cap_warning(space: SearchSpace) -> str | None:
    """One warning naming each choice and batch size whose K caps the running requests below
    the traffic's highest concurrency, from which K; None when none does."""
    top = max(space.workload.concurrency)
    found = []
    for choice in space.choices:
        method = method_of(choice.method)
        for batch in space.max_num_batched_tokens:
            capped = [
                k
                for k in range(int(choice.k.low), int(choice.k.high) + 1)
                if (cap := method.running_cap(k, batch, space.version)) is not None and cap < top
            ]
            if capped:
                found.append(f"{choice.label} at max_num_batched_tokens {batch} from K={capped[0]}")
    if not found:
        return None
    return (
        f"WARNING: vLLM {space.version} runs a block drafter's config with at most "
        "max_num_batched_tokens // (K + 1) requests at once (it lowers max_num_active_seqs with "
        f"only a warning), below the traffic's {top} for: {'; '.join(found)}. Those trials are "
        "measured with the cap, as vLLM serves them; raise max_num_batched_tokens to lift it."
    )
