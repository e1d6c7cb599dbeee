"""The pre-flight's verdicts applied to a study before its first trial.

The vLLM inside the study's image judges every config the space can propose
(:meth:`tuner.trial.backends.docker.DockerBackend.judge`); a choice with a config it refuses is
taken out of the space the study stores, each refusal said with vLLM's own message, so no
trial launches what vLLM would not start. An image newer than spectune knows is run with one
warning: its configs are spelled in the newest dialect spectune speaks, and the image's vLLM is
the judge.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.config.space import SearchSpace
from tuner.config.vllm_version import NEWEST_KNOWN, parse_version
from tuner.errors import ConfigError
from tuner.launch.preflight import Preflight

__all__ = ["judged_space"]


def judged_space(
    space: SearchSpace, verdict: Preflight, on_notice: Callable[[str], None] | None
) -> SearchSpace:
    """``space`` without the choices the image's vLLM refuses a config of.

    Raises:
        ConfigError: vLLM refuses a config of every choice.
    """
    say = on_notice or (lambda _: None)
    release = parse_version(verdict.version)
    if release > NEWEST_KNOWN >= space.version:  # a space pinned to it was told (newer_note)
        say(
            f"WARNING: the image runs vLLM {verdict.version}, newer than spectune's rules "
            f"({NEWEST_KNOWN}): configs are written as for {NEWEST_KNOWN}, and the image's vLLM "
            "judged each one before the first trial"
        )
    refused = [v for v in verdict.refused if v.candidate.draft is not None]
    if not refused:
        return space
    for found in refused:
        say(f"vLLM {verdict.version} refuses {found.label}: {found.message}")
    labels = {str(v.candidate.draft) for v in refused}
    try:
        kept = space.without_choices(labels)
    except ConfigError:
        first = refused[0]
        raise ConfigError(
            f"vLLM {verdict.version} in the image refuses a config of every choice of "
            f"{space.name} ({first.label}: {first.message}): fix the space, or use another "
            "image"
        ) from None
    say(f"taken out of the search (vLLM refuses a config of each): {', '.join(sorted(labels))}")
    return kept
