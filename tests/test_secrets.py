"""Credentials in extra vLLM flags are recognised however a space spells them."""

from __future__ import annotations

import pytest

from tuner.config.trial import is_secret_flag


@pytest.mark.parametrize(
    "flag",
    [
        "api-key",
        "--api-key",
        "api_key",
        "API-KEY",
        "hf-token",
        "api-key=sk-123",  # the value glued to the name
        "--hf-token=hf_abc",
        "api",  # vLLM's parser takes unambiguous prefixes: --api reaches --api-key
        "api-k",
        "hf-tok",
        "s3-secret",
        "ssl-keyfile-password",
    ],
)
def test_credential_flags_are_secret(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize(
    "flag",
    [
        "tokenizer",
        "max-num-batched-tokens",
        "enforce-eager",
        "kv-cache-memory-bytes",
        "api-server-count",
        "max-model-len",
        "a",
    ],
)
def test_ordinary_flags_are_not(flag: str) -> None:
    assert not is_secret_flag(flag)
