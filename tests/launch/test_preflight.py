"""The pre-flight without a Docker Engine: the configs a space is judged on, the judge's answers
read from its output, and each way the container can fail as one line (a stand-in engine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest

from tuner.config.space import load_space
from tuner.errors import ConfigError, LaunchError
from tuner.launch import preflight as module
from tuner.launch.preflight import Candidate, parse_answers, preflight, space_candidates

SPACE = "qwen3-coder-30b-fp8-4090x2-2026-vllm032"  # the P-EAGLE arm: 0.32 only
IMAGE = "vllm/vllm-openai:v0.35.0"
TWO = [Candidate("a", ("m",)), Candidate("b", ("m", "--x"))]


def _line(payload: dict[str, Any]) -> str:
    return "SPECTUNE-PREFLIGHT " + json.dumps(payload)


def _speculative(candidate: Candidate) -> dict[str, Any]:
    argv = list(candidate.argv)
    if "--speculative-config" not in argv:
        return {}
    found: dict[str, Any] = json.loads(argv[argv.index("--speculative-config") + 1])
    return found


def test_a_space_is_judged_at_each_choices_k_ends_under_every_option_it_searches() -> None:
    candidates = space_candidates(load_space(SPACE))
    by_draft: dict[str | None, list[Candidate]] = {}
    for candidate in candidates:
        by_draft.setdefault(candidate.draft, []).append(candidate)
    # none; dflash 2 K x 4; eagle3 2 K x (4 step by step + 1 parallel); draft 2 K x 8; ngram 2 x 2
    assert {d: len(c) for d, c in by_draft.items()} == {
        "none": 1,
        "dflash:z-lab/Qwen3-Coder-30B-A3B-DFlash": 8,
        "eagle3:amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE": 10,
        "Qwen/Qwen3-0.6B": 16,
        "ngram_gpu": 4,
    }
    assert len({c.argv for c in candidates}) == len(candidates)
    assert {c.k for c in by_draft["Qwen/Qwen3-0.6B"]} == {1, 6}
    # One memory and batch value: the argv differ in speculation only.
    assert len({c.argv[: c.argv.index("--enable-chunked-prefill")] for c in candidates}) == 1


def test_a_parallel_drafting_candidate_keeps_the_values_v1_runs() -> None:
    eagle = [c for c in space_candidates(load_space(SPACE)) if c.draft and "P-EAGLE" in c.draft]
    parallel = [_speculative(c) for c in eagle if dict(c.options)["parallel_drafting"]]
    assert [(s["num_speculative_tokens"], s["parallel_drafting"]) for s in parallel] == [
        (2, True),
        (10, True),
    ]
    assert all(s.get("rejection_sample_method", "standard") == "standard" for s in parallel)
    assert not any(s.get("enable_adaptive_verification") for s in parallel)
    assert eagle[-1].label == (
        "eagle3:amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE K=10 parallel_drafting=True "
        "rejection_sample_method=standard enable_adaptive_verification=False"
    )


def test_prompt_lookup_is_judged_at_its_windows_ends_never_upside_down() -> None:
    ngram = [c for c in space_candidates(load_space(SPACE)) if c.draft == "ngram_gpu"]
    windows = {
        (s["num_speculative_tokens"], s["prompt_lookup_min"], s["prompt_lookup_max"])
        for s in map(_speculative, ngram)
    }
    assert windows == {(1, 1, 2), (8, 3, 5)}
    assert ngram[0].label == "ngram_gpu K=1 prompt_lookup_min=1 prompt_lookup_max=2 " + (
        "rejection_sample_method=standard"
    )


def test_the_answers_are_read_from_among_vllms_own_log_lines() -> None:
    log = "\n".join(
        [
            "INFO 05-01 [__init__.py] Automatically detected platform cuda.",
            _line({"version": "0.35.1"}),
            "WARNING something vLLM says",
            _line({"verdict": {"label": "a", "ok": True, "runner": "V2"}}),
            _line({"verdict": {"label": "b", "ok": False, "stage": "argparse", "error": "no --x"}}),
        ]
    )
    result = parse_answers(log, TWO, image=IMAGE)
    assert result.version == "0.35.1"
    first, second = result.verdicts
    assert (first.label, first.ok, first.runner, first.message) == ("a", True, "V2", None)
    assert (second.ok, second.stage, second.message) == (False, "argparse", "no --x")
    assert result.refused == (second,)


def test_an_image_without_vllm_is_one_line_naming_it() -> None:
    log = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'vllm'\n"
    with pytest.raises(ConfigError, match=rf"image {IMAGE} has no vLLM for python3"):
        parse_answers(log, TWO, image=IMAGE)


def test_a_judge_that_crashed_is_named_with_its_last_line() -> None:
    with pytest.raises(LaunchError, match=r"crashed: Segmentation fault$"):
        parse_answers("loading\nSegmentation fault\n", TWO, image=IMAGE)
    partial = "\n".join([_line({"version": "0.35.0"}), _line({"verdict": {"ok": True}}), "Killed"])
    with pytest.raises(LaunchError, match=r"\(vLLM 0\.35\.0\) ended after 1 of 2 configs: Killed"):
        parse_answers(partial, TWO, image=IMAGE)


class _Container:
    """A container that exits at once (``status``) or runs until removed."""

    def __init__(self, status: str, log: str) -> None:
        self.name = "spectune-preflight-test"
        self.status = "created"
        self._final = status
        self._log = log.encode()
        self.removed = False
        self.created: dict[str, Any] = {}

    def start(self) -> None:
        self.status = self._final

    def reload(self) -> None:
        pass

    def logs(self, **_: Any) -> bytes:
        return self._log

    def remove(self, **_: Any) -> None:
        self.removed = True


class _Containers:
    def __init__(self, made: _Container | Exception) -> None:
        self._made = made

    def create(self, image: str, command: list[str], **kwargs: Any) -> _Container:
        if isinstance(self._made, Exception):
            raise self._made
        self._made.created = {"image": image, "command": command, **kwargs}
        return self._made


class _Client:
    def __init__(self, made: _Container | Exception) -> None:
        self.containers = _Containers(made)


def _run(made: _Container | Exception, **kwargs: Any) -> module.Preflight:
    client = cast(docker.DockerClient, _Client(made))
    return preflight(client, IMAGE, TWO, hf_cache=Path("/hf"), **kwargs)


def test_the_container_is_offline_without_gpus_and_reads_the_cache_only() -> None:
    answers: list[dict[str, Any]] = [
        {"version": "0.35.0"},
        *({"verdict": {"ok": True}} for _ in TWO),
    ]
    container = _Container("exited", "\n".join(map(_line, answers)))
    result = _run(container, python=("/venv/bin/python",), gpus=2)
    assert [v.ok for v in result.verdicts] == [True, True]
    created = container.created
    assert created["entrypoint"] == ["/venv/bin/python"]
    assert created["network_disabled"] is True
    assert "device_requests" not in created
    assert created["volumes"] == ["/hf:/root/.cache/huggingface:ro"]
    assert created["environment"]["HF_HUB_OFFLINE"] == "1"
    flag, script, request = created["command"]
    assert flag == "-c" and "import tuner" not in script and "from tuner" not in script
    assert json.loads(request) == {
        "gpus": 2,
        "candidates": [{"label": "a", "argv": ["m"]}, {"label": "b", "argv": ["m", "--x"]}],
    }
    assert container.removed


def test_a_judge_past_its_time_is_removed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "_POLL_S", 0.01)
    container = _Container("running", "")
    with pytest.raises(LaunchError, match=rf"pre-flight in image {IMAGE} gave no answer within"):
        _run(container, timeout_s=0.05)
    assert container.removed


def test_ctrl_c_while_it_runs_removes_the_container(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: Any) -> Iterator[None]:
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "_wait", interrupted)
    container = _Container("running", "")
    with pytest.raises(KeyboardInterrupt):
        _run(container)
    assert container.removed


def test_a_missing_image_or_python_is_one_line_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=rf"image {IMAGE} is not on this host.*docker pull"):
        _run(docker.errors.ImageNotFound("No such image"))
    missing = docker.errors.APIError(
        "400 Client Error",
        explanation='failed to create task: exec: "python3": executable file not found in $PATH',
    )
    with pytest.raises(ConfigError, match=rf"image {IMAGE} has no python3 to run the pre-flight"):
        _run(missing)
    with pytest.raises(LaunchError, match=r"docker could not run the pre-flight .*: no space"):
        _run(docker.errors.APIError("500", explanation="no space left on device"))
