"""The speculation methods, named as vLLM names them.

They live with the catalog, the lowest layer that names one: a head or a drafter is published
for one method (``heads.yaml``, ``drafters.yaml``), and its ``config.json`` says which. The
search space, the trial's config and everything above compare these members, never the names
as strings; :mod:`tuner.config.trial` hands them on with the config that carries one.
"""

from __future__ import annotations

import enum

from tuner.errors import ConfigError

__all__ = ["SpecMethod"]


class SpecMethod(enum.StrEnum):
    """A speculation method, named as vLLM's ``speculative_config`` names it."""

    NONE = "none"  # no speculation: a ServerConfig without a SpeculativeConfig
    NGRAM = "ngram"  # prompt lookup: copies what followed the last n-gram in the prompt
    NGRAM_GPU = "ngram_gpu"  # the same lookup, run on the GPU inside the step
    SUFFIX = "suffix"  # suffix trees over the prompt and earlier outputs (arctic-inference)
    DRAFT_MODEL = "draft_model"  # a separate, smaller model of the target's vocabulary
    EAGLE = "eagle"  # an EAGLE head fed the target's hidden states
    EAGLE3 = "eagle3"  # an EAGLE-3 head (three target layers' hidden states, own vocabulary)
    MTP = "mtp"  # the target's own multi-token-prediction layers
    DFLASH = "dflash"  # a block-diffusion drafter: all K tokens in one non-causal pass
    DSPARK = "dspark"  # a block drafter with a Markov head (and optionally a confidence head)

    def __repr__(self) -> str:
        # As the user writes it: pydantic lists a field's allowed members by repr when it
        # refuses a value ("Input should be 'eagle' or 'eagle3'").
        return repr(self.value)

    @classmethod
    def parse(cls, name: str) -> SpecMethod:
        """The member named ``name``, as a space, a flag or a stored config spells it.

        Raises:
            ConfigError: naming the unknown method and the known ones.
        """
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(m for m in cls if m is not cls.NONE)
            raise ConfigError(f"unknown speculative method {name!r}: use one of {known}") from None
