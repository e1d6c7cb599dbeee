"""The pre-flight in a container of real vLLM (the CPU build, 0.32): it accepts what vLLM
accepts and refuses what vLLM refuses, with vLLM's own message.

One container, about 20 s on 2 cores (importing vLLM is most of it): the empty test image runs
the CPU build's Python through bind mounts, and the Hugging Face cache holds only the catalog's
``config.json`` of a 7B target and a 0.5B draft whose vocabularies differ (152064 and 151936
rows), which vLLM 0.32 runs only with ``use_heterogeneous_vocab``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.testbed import require_vllm, vllm_venv, write_hf_cache
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import parse_version, server_argv
from tuner.launch.docker import LABEL_STUDY
from tuner.launch.preflight import Candidate, preflight

pytestmark = [pytest.mark.docker, pytest.mark.vllm]

TARGET = "Qwen/Qwen2.5-7B-Instruct"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
K = {"num_speculative_tokens": 3}
WINDOW = {"prompt_lookup_min": 5, "prompt_lookup_max": 2}


def _spectune(label: str, speculative: SpeculativeConfig) -> Candidate:
    """The argv spectune starts for 0.32 (which adds use_heterogeneous_vocab for this pair)."""
    server = ServerConfig(TARGET, 1, 4096, 0.9, 4096, speculative)
    argv = server_argv(server, parse_version("0.32.0"), host="0.0.0.0", port=8000)
    return Candidate(label, tuple(argv))


def _by_hand(label: str, speculative: dict[str, Any]) -> Candidate:
    return Candidate(label, (TARGET, "--speculative-config", json.dumps(speculative)))


def test_vllm_in_the_image_judges_each_config_in_its_own_words(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    host_volumes: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> None:
    require_vllm()
    hf_cache = tmp_path / "hf-cache"
    write_hf_cache(hf_cache / "hub", {m: load_model(m).config for m in (TARGET, DRAFT)})
    ngram = SpeculativeConfig(SpecMethod.NGRAM, 3, prompt_lookup_max=4, prompt_lookup_min=1)
    candidates = [
        _spectune("ngram", ngram),
        _spectune("draft", SpeculativeConfig(SpecMethod.DRAFT_MODEL, 3, model=DRAFT)),
        _by_hand("draft without the flag", {"method": "draft_model", "model": DRAFT, **K}),
        _by_hand("ngram window upside down", {"method": "ngram", **WINDOW, **K}),
        Candidate("unknown flag", (TARGET, "--speculative-konfig", "{}")),
    ]
    venv = vllm_venv()

    result = preflight(
        docker_client,
        test_image,
        candidates,
        hf_cache=hf_cache,
        python=(str(venv / "bin" / "python"),),
        volumes=host_volumes(tmp_path / "container-tmp", venv.resolve()),
        environment={"HOME": "/tmp/home", "VLLM_CACHE_ROOT": "/tmp/vllm-cache", "TMPDIR": "/tmp"},
        labels={LABEL_STUDY: study},
        timeout_s=240,
    )

    assert parse_version(result.version) == parse_version("0.32.0")
    assert [(v.label, v.ok) for v in result.verdicts] == [
        ("ngram", True),
        ("draft", True),
        ("draft without the flag", False),
        ("ngram window upside down", False),
        ("unknown flag", False),
    ]
    flagless, window, unknown = result.refused
    assert flagless.stage == window.stage == "engine"
    assert flagless.message is not None and window.message is not None
    assert "Target and draft model should have the same vocabulary size" in flagless.message
    assert "vocab_size=152064" in flagless.message
    assert "prompt_lookup_min=5 must be <= prompt_lookup_max" in window.message
    assert "[type=" not in window.message  # pydantic's echo of the inputs is cut off
    assert unknown.stage == "argparse"
    assert "--speculative-konfig" in (unknown.message or "")
    assert all(v.runner is None for v in result.verdicts)  # a CPU platform: no GPU runner
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL_STUDY}={study}"})
    assert left == []
