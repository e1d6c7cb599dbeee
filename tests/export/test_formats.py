"""Exports in every format, loaded back and checked: vLLM YAML, compose, docker run, JSON."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
import yaml

from tests.testbed.results import SPACE, StudyCopy, build_study, judge_table
from tuner import serde
from tuner.analysis.levels import batch_size_table
from tuner.analysis.picks import feasible, pick_candidate, recommend
from tuner.analysis.provenance import provenance
from tuner.analysis.trials import Outcome, points
from tuner.config.space import SearchSpace
from tuner.config.vllm_args import server_argv, server_yaml
from tuner.errors import ConfigError
from tuner.export.vllm import FORMATS, export
from tuner.trial.record import RUN_ATTR, RunFacts, TrialRecord

TODAY = dt.date(2026, 1, 2)


def _header(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("# ")]


def _expected_spec(text: str) -> list[list[int]]:
    return cast(
        list[list[int]],
        yaml.safe_load(text)["speculative-config"]["num_speculative_tokens_per_batch_size"],
    )


def _recommended(study: optuna.Study) -> TrialRecord:
    chosen = recommend(study)
    assert chosen is not None
    return chosen.record


def _with_table(config: dict[str, Any], table: list[list[int]]) -> dict[str, Any]:
    spec = dict(config["speculative-config"])
    spec["num_speculative_tokens"] = max(spec["num_speculative_tokens"], *(k for *_, k in table))
    spec["num_speculative_tokens_per_batch_size"] = table
    return {**config, "speculative-config": spec}


def test_vllm_yaml_loads_back_with_provenance_and_the_per_level_table(levels: StudyCopy) -> None:
    study, space = levels.open()
    judge_table(study, space, wins=True)
    exported = export(study, space, "vllm", today=TODAY)
    view = _recommended(study)
    assert exported.provenance.trial == view.number
    header = _header(exported.text)
    assert header[0] == f"spectune export: study levels, trial {view.number} (pick max-throughput)"
    # A simulated study says so: no image ran, no GPU was detected.
    assert header[1] == "vLLM v0.32.0 flags, simulator (nothing ran); GPUs 2x RTX 4090 (simulated)"
    assert header[3].startswith("simulated: output ") and "one run, not confirmed" in header[3]
    # A single run's p95 carries its order-statistic bounds (the worst pair's), not only a value.
    assert re.search(r"ms \(95 % (bounds|lower bound) \d+\.\d.* ms from \d+ requests", header[3])
    assert "exported 2026-01-02" in header
    assert "use: vllm serve --config FILE" in header
    table = [list(entry) for entry in exported.batch_size_table]
    # Each level's K is the one measured best there, whatever K the trial itself ran.
    for choice in exported.levels:
        measured = [
            (tok_s, p.k)
            for p in points(study)
            if p.draft in (view.draft, "none")
            and p.outcome not in (Outcome.OOM, Outcome.LOST_REQUESTS)
            for level, tok_s in p.levels
            if level == choice.concurrency
        ]
        assert (choice.output_tok_s, choice.k) == max(measured, key=lambda m: (m[0], -m[1]))
    assert table == [list(t) for t in batch_size_table(exported.levels)]
    assert table[-1] == [33, 128, 0]  # speculation off where it loses
    loaded = yaml.safe_load(exported.text)
    assert loaded == _with_table(server_yaml(view.server, space.version), table)
    assert any(line.startswith("best speculation per concurrency level: 1: K=") for line in header)


def test_compose_is_the_file_people_write_by_hand(levels: StudyCopy) -> None:
    study, space = levels.open()
    judge_table(study, space, wins=True)
    exported = export(study, space, "compose", today=TODAY)
    view = _recommended(study)
    assert _header(exported.text)[0].startswith("spectune export: study levels")
    service = yaml.safe_load(exported.text)["services"]["vllm"]
    assert service["image"] == "vllm/vllm-openai:v0.32.0"
    assert service["entrypoint"] == ["vllm", "serve"]
    assert service["ipc"] == "host"
    assert service["ports"] == ["8000:8000"]
    assert service["volumes"] == ["${HOME}/.cache/huggingface:/root/.cache/huggingface"]
    assert service["environment"] == ["HF_TOKEN"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    command = service["command"]
    assert all(isinstance(part, str) for part in command)
    expected = server_argv(view.server, space.version, host="0.0.0.0", port=8000)
    at = command.index("--speculative-config") + 1
    spec = json.loads(command[at])
    assert spec["num_speculative_tokens_per_batch_size"] == [
        list(e) for e in exported.batch_size_table
    ]
    assert command[:at] == expected[:at] and command[at + 1 :] == expected[at + 1 :]
    assert '"8000:8000"' in exported.text  # quoted like the compose docs do


def test_docker_run_is_a_shell_script_that_runs_docker(levels: StudyCopy, tmp_path: Path) -> None:
    study, space = levels.open()
    judge_table(study, space, wins=True)
    exported = export(study, space, "docker-run", today=TODAY)
    script = tmp_path / "run.sh"
    script.write_text(exported.text)
    # A fake docker on PATH records the argv the user's shell would hand to the real one.
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\nexec python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    done = subprocess.run(
        ["sh", str(script)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "HOME": "/home/u"},
    )
    argv = json.loads(done.stdout)
    assert argv[:13] == [
        "run",
        "-d",
        "--name",
        "vllm",
        "--gpus",
        "2",
        "--ipc=host",
        "-p",
        "8000:8000",
        "-v",
        "/home/u/.cache/huggingface:/root/.cache/huggingface",
        "-e",
        "HF_TOKEN",
    ]
    image_at = argv.index("vllm/vllm-openai:v0.32.0")
    assert argv[image_at - 2 : image_at] == ["--entrypoint", "vllm"]
    assert argv[image_at + 1] == "serve"
    served = argv[image_at + 2 :]
    view = _recommended(study)
    expected = server_argv(view.server, space.version, host="0.0.0.0", port=8000)
    at = expected.index("--speculative-config") + 1
    assert served[:at] == expected[:at]
    assert json.loads(served[at])["num_speculative_tokens_per_batch_size"][-1] == [33, 128, 0]
    assert exported.text.startswith("#!/bin/sh\n# spectune export: study levels")


def test_json_holds_config_argv_and_provenance(levels: StudyCopy) -> None:
    study, space = levels.open()
    vllm_text = export(study, space, "vllm", today=TODAY).text
    data = json.loads(export(study, space, "json", today=TODAY).text)
    assert data["vllm_config"] == yaml.safe_load(vllm_text)
    assert data["argv"][:3] == ["vllm", "serve", "Qwen/Qwen2.5-32B-Instruct-AWQ"]
    facts = data["provenance"]
    assert facts["study"] == "levels" and facts["date"] == "2026-01-02"
    assert facts["hardware"] == "2x RTX 4090" and facts["gpu"] is None and facts["driver"] is None
    assert facts["vllm_version"] == "v0.32.0" and facts["source"] == "simulated"
    assert facts["backend"] == "sim" and facts["image"] is None
    assert facts["confirmed"] is False and facts["output_tok_s_ci95"] is None
    assert [lvl["concurrency"] for lvl in data["speculation_by_level"]] == [1, 8, 128]
    # The levels study tunes the temperature: the export names it as measured, never as advice.
    assert "request" not in data and facts["temperature_tuned"] is True
    assert facts["failed_share"] == 0.0 and facts["max_failed_share"] == 0.0
    assert facts["concurrency"] == [[1, 1 / 3], [8, 1 / 3], [128, 1 / 3]]
    header = vllm_text.splitlines()
    assert not any("send temperature" in line for line in header)
    assert any(line.startswith("# failed requests 0.0 %") for line in header)


def test_what_ran_is_what_the_export_says(levels: StudyCopy) -> None:
    study, space = levels.open()
    gpus = {"gpu": "NVIDIA GeForce RTX 4090", "gpu_count": 2, "driver": "550.54.15", "cuda": "12.4"}
    docker = RunFacts("docker", "0.32.0", "vllm/vllm-openai:v0.32.0", gpus)
    study.set_user_attr(RUN_ATTR, serde.dump(docker))
    assert _header(export(study, space, "vllm").text)[1] == (
        "vLLM 0.32.0, image vllm/vllm-openai:v0.32.0; GPUs 2x RTX 4090 declared; "
        "detected 2x NVIDIA GeForce RTX 4090 (driver 550.54.15, CUDA 12.4)"
    )
    # vLLM's CPU build under the process backend: no image, no GPU, the version it answered.
    study.set_user_attr(RUN_ATTR, serde.dump(RunFacts("process", "0.32.0+cpu")))
    exported = export(study, space, "json")
    assert _header(export(study, space, "vllm").text)[1] == (
        "vLLM 0.32.0+cpu, process backend (vllm serve on the host, no image); "
        "GPUs 2x RTX 4090 as declared; none detected (no NVML)"
    )
    facts = exported.provenance
    assert (facts.backend, facts.image, facts.vllm_version) == ("process", None, "0.32.0+cpu")


def test_a_study_without_run_facts_falls_back_to_its_space(levels: StudyCopy) -> None:
    study, space = levels.open()
    study.set_user_attr(RUN_ATTR, None)  # as studies written before RunFacts read
    study.set_user_attr(
        "environment",
        {"gpu": "NVIDIA GeForce RTX 4090", "gpu_count": 2, "driver": "550.54.15", "cuda": "12.4"},
    )
    header = _header(export(study, space, "vllm").text)
    assert header[1].startswith("vLLM v0.32.0, image vllm/vllm-openai:v0.32.0 (backend not")


def _versioned(space: SearchSpace, version: str) -> SearchSpace:
    return replace(space, vllm_version=version)


def test_older_vllm_dialects_get_their_flags_and_the_table_as_a_comment(
    levels: StudyCopy,
) -> None:
    study, space = levels.open()
    view = _recommended(study)
    old = _versioned(space, "0.7.2")
    exported = export(study, old, "vllm")
    loaded = yaml.safe_load(exported.text)
    assert "speculative-config" not in loaded and "model" not in loaded
    assert loaded["speculative-model"] == view.server.draft
    assert loaded["num-speculative-tokens"] == view.server.k
    assert exported.batch_size_table == ()
    header = _header(exported.text)
    assert any("cannot switch K by batch size (needs 0.24+)" in line for line in header)
    assert f"use: vllm serve {view.server.model} --config FILE" in header
    # 0.8.3-0.15 read nested mappings as strings: the speculative config is quoted JSON.
    mid = yaml.safe_load(export(study, _versioned(space, "0.9.2"), "vllm").text)
    assert json.loads(mid["speculative-config"])["num_speculative_tokens"] == view.server.k
    # 0.10-0.14 cannot run a draft model at all: the export says so instead of writing one.
    with pytest.raises(ConfigError, match="cannot speculate with a separate draft model"):
        export(study, _versioned(space, "0.12.0"), "compose")
    # 0.23 has nested YAML but no per-batch-size table yet.
    assert (
        "num_speculative_tokens_per_batch_size"
        not in export(study, _versioned(space, "0.23.0"), "vllm").text.split("use: ")[1]
    )


def test_picks(levels: StudyCopy) -> None:
    study, _ = levels.open()
    views = [r.objective for r in feasible(study)]
    top = max(feasible(study), key=lambda r: r.objective[0])
    fastest = min(feasible(study), key=lambda r: r.objective[1])
    assert pick_candidate(study, "max-throughput").number == top.number
    assert pick_candidate(study, "min-ttft").number == fastest.number
    balanced = pick_candidate(study, "balanced")
    assert fastest.objective[1] <= balanced.p95_ttft_ms <= top.objective[1]
    assert not any(  # balanced is on the Pareto front
        tok_s > balanced.throughput and ttft < balanced.p95_ttft_ms for tok_s, ttft in views
    )
    assert pick_candidate(study, "3").number == 3
    with pytest.raises(ConfigError, match="unknown pick 'fastest'"):
        pick_candidate(study, "fastest")
    with pytest.raises(ConfigError, match="has no trial 999"):
        pick_candidate(study, "999")


def test_an_infeasible_trial_asked_for_by_number_is_marked(levels: StudyCopy) -> None:
    study, space = levels.open()
    oom = next(p for p in points(study) if p.outcome is Outcome.OOM)
    text = export(study, space, "vllm", pick=str(oom.number)).text
    assert f"# WARNING: trial {oom.number} was not feasible: OOM" in text
    assert text.startswith(f"# spectune export: study levels, trial {oom.number} (pick trial)")


def test_unknown_format(levels: StudyCopy) -> None:
    study, space = levels.open()
    with pytest.raises(ConfigError, match="unknown export format 'helm'"):
        export(study, space, "helm")


SECRET = "sk-spectune-test-0123456789"


def test_no_secret_reaches_any_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_" + SECRET)
    monkeypatch.setenv("VLLM_API_KEY", SECRET)
    space = {
        **SPACE,
        "name": "secret",
        "server": {
            **SPACE["server"],
            # A secret flag is refused when the space loads (tests/config/test_space.py); the
            # environment's secrets must not leak into any export either.
            "extra_flags": {"enforce-eager": True, "tokenizer-mode": "auto"},
        },
        "workload": {**SPACE["workload"], "concurrency": [1], "requests": 4},
    }
    build_study(tmp_path, space, trials=6)
    copy = StudyCopy(tmp_path, "secret")
    study, stored = copy.open()
    texts = [export(study, stored, fmt).text for fmt in FORMATS]
    for text in texts:
        assert SECRET not in text
    vllm_yaml, compose, docker_run, *_ = texts
    loaded = yaml.safe_load(vllm_yaml)
    assert loaded["enforce-eager"] is True and loaded["tokenizer-mode"] == "auto"  # kept
    assert yaml.safe_load(compose)["services"]["vllm"]["environment"] == ["HF_TOKEN"]
    assert "-e HF_TOKEN " in docker_run


def test_the_export_states_what_the_gpus_drew_per_token_where_nvml_read_them(
    levels: StudyCopy,
) -> None:
    study, space = levels.open()
    facts = provenance(study, space, pick_candidate(study, "max-throughput"), "max-throughput")
    # Simulated: the power model's energy, said to be simulated.
    assert facts.gpu_state is not None and facts.gpu_state["energy_from"] == "model"
    (simulated,) = [line for line in facts.lines() if line.startswith("GPU energy")]
    assert "tok/J, simulated by the power model)" in simulated
    read = {
        "joules_per_token": 0.42,
        "tokens_per_joule": 1 / 0.42,
        "energy_from": "counter",
        "mean_power_w": 301.4,
        "sm_clock_mhz": 2505.0,
        "power_limit_w": [450.0, 450.0],
        "throttled_s": {"power_cap": 3.25, "thermal": 0.0},
    }
    line = next(x for x in replace(facts, gpu_state=read).lines() if x.startswith("GPU energy"))
    assert line == (
        "GPU energy 0.420 J per output token (2.38 tok/J, counter); "
        "mean power 301 W, all GPUs together; SM clock 2505 MHz; power limit 450, 450 W; "
        "throttled power_cap 3.2 s"
    )
    assert serde.dump(replace(facts, gpu_state=read))["gpu_state"]["tokens_per_joule"] > 2.3
