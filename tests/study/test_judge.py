"""The pre-flight's verdicts applied to a study: a choice vLLM refuses a config of is taken
out of the space the study stores, each refusal said in vLLM's words; an image newer than
spectune knows gets one warning."""

from __future__ import annotations

import pytest

from tuner.config.space import load_space
from tuner.errors import ConfigError
from tuner.launch.preflight import Candidate, Preflight, Verdict
from tuner.study.judge import judged_space

SPACE = "qwen3-coder-30b-fp8-4090x2-2026"
REFUSAL = "ValueError: suffix speculative decoding requires Triton."


def _verdicts(refused: dict[str, str], version: str = "0.34.0") -> Preflight:
    space = load_space(SPACE)
    verdicts = tuple(
        Verdict(
            Candidate(f"{c.label} K=4", ("model",), draft=c.label),
            ok=c.label not in refused,
            message=refused.get(c.label),
        )
        for c in space.choices
    )
    return Preflight(version, verdicts)


def test_a_refused_choice_is_taken_out_with_vllms_message() -> None:
    space = load_space(SPACE)
    said: list[str] = []
    kept = judged_space(space, _verdicts({"suffix": REFUSAL}), said.append)
    assert [c.label for c in kept.choices] == [
        c.label for c in space.choices if c.label != "suffix"
    ]
    assert f"vLLM 0.34.0 refuses suffix K=4: {REFUSAL}" in said
    assert said[-1].startswith("taken out of the search") and "suffix" in said[-1]
    assert "suffix" not in str(kept.source["search"]["methods"])  # what the study stores
    assert judged_space(space, _verdicts({}), said.append) is space


def test_a_model_is_taken_out_of_its_list_and_a_newer_image_is_said_once() -> None:
    space = load_space(SPACE)
    head = next(c.label for c in space.choices if c.label.startswith("eagle3:"))
    said: list[str] = []
    kept = judged_space(space, _verdicts({head: "no"}, "0.35.0"), said.append)
    assert head not in [c.label for c in kept.choices]
    assert len(kept.choices) == len(space.choices) - 1
    assert sum("newer than spectune's rules (0.34.0)" in line for line in said) == 1


def test_refusing_every_choice_stops_the_study_in_one_line() -> None:
    space = load_space(SPACE)
    every = {c.label: "nope" for c in space.choices}
    with pytest.raises(ConfigError, match="refuses a config of every choice") as info:
        judged_space(space, _verdicts(every), None)
    assert "\n" not in str(info.value)
