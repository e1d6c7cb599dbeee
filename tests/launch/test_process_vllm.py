"""Real ``vllm serve`` (CPU build) through the process launcher: what a study asks of it first.

Every method a study runs (none, ngram, a draft model) starts and is measured through the
process backend in the real-vLLM study (tests/e2e/); vLLM's own KV-cache OOM text is classified
on real vLLM in a container (tests/launch/docker/test_vllm.py).
"""

from __future__ import annotations

import pytest

from tuner.config.vllm_args import VllmVersion, parse_version

pytestmark = pytest.mark.vllm


def test_detects_the_installed_version(real_vllm_version: VllmVersion) -> None:
    assert real_vllm_version == parse_version("0.32.0")
    assert "cpu" in str(real_vllm_version)
