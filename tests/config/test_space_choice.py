"""The space as a user names it: nothing named is the default nobody chose; each override
applies to the loaded space; a bad name is refused with the input named."""

from __future__ import annotations

import pytest

from tuner.config.preference import Preference
from tuner.config.space import load_space
from tuner.config.space_choice import SpaceChoice
from tuner.errors import ConfigError


def test_nothing_named_is_the_default_space_and_not_explicit() -> None:
    choice = SpaceChoice()
    assert not choice.explicit and choice.resolve() == load_space()


def test_each_override_applies_to_the_loaded_space() -> None:
    choice = SpaceChoice("qwen2.5-14b-awq-4090x1", "4090x2", 750.0, "0.33.0", "energy")
    space = choice.resolve()
    assert choice.explicit and space.name == "qwen2.5-14b-awq-4090x1"
    assert space.hardware.spec == "4090x2" and space.ttft_limit_ms == 750.0
    assert str(space.version) == "0.33.0" and space.prefer == Preference("energy")


@pytest.mark.parametrize(
    ("choice", "says"),
    [
        (SpaceChoice(hardware="9999x2"), "9999"),
        (SpaceChoice(vllm_version="0.1.0"), "0.1.0"),
        (SpaceChoice("no-such-space"), "no-such-space"),
    ],
)
def test_a_bad_name_is_one_line_naming_it(choice: SpaceChoice, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        choice.resolve()
    assert "\n" not in str(raised.value)
