"""The shipped 2026 spaces and the model runner a user sees: `spectune space check` prints each
config's runner, `spectune optimize` warns once about configs on V1, and a simulated study on
the 2026 space proposes every method and both verification modes. The 2026 space runs vLLM
0.34 (every config on V2, the memory flag left unset); its 0.32 copy keeps the P-EAGLE arm on
V1 and the 0.32 memory range."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import builtin_spaces
from tuner.trial.model_runner import model_runner
from tuner.trial.record import TrialRecord, records

runner = CliRunner()
SPACE = "qwen3-coder-30b-fp8-4090x2-2026"
SPACE_032 = "qwen3-coder-30b-fp8-4090x2-2026-vllm032"


def test_space_check_prints_each_configs_runner() -> None:
    result = runner.invoke(app, ["space", "check", SPACE_032])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    title = lines.index("model runner on vLLM v0.32.0 (predicted from vLLM's rules):")
    rows = {line.split()[0]: line.split(maxsplit=1)[1] for line in lines[title + 1 : title + 7]}
    assert rows["none"] == rows["ngram_gpu"] == rows["Qwen/Qwen3-0.6B"] == "V2"
    assert rows["dflash:z-lab/Qwen3-Coder-30B-A3B-DFlash"] == "V2"
    p_eagle = "eagle3:amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"
    assert (
        f"  {p_eagle} +parallel_drafting  V1 (Model Runner V2 does not yet support parallel "
        "drafting for EAGLE speculative decoding)"
    ) in lines
    assert "WARNING: 1 config of this space runs on vLLM v0.32.0's deprecated V1" in result.stdout


def test_optimize_on_the_default_space_warns_once_why_its_drafts_run_on_v1(
    tmp_path: Path,
) -> None:
    result = runner.invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--trials",
            "2",
            "--confirm-top",
            "0",
            "--studies-dir",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("WARNING:") == 1
    assert "deprecated V1 model runner" in result.stderr
    assert (
        "Qwen/Qwen2.5-0.5B-Instruct, Qwen/Qwen2.5-1.5B-Instruct: Model Runner V2 does not yet "
        "support heterogeneous-vocabulary draft models; use a draft with the target's 152064 "
        "vocabulary rows (e.g. Qwen/Qwen2.5-7B-Instruct)"
    ) in result.stderr
    json.loads(result.stdout)  # the JSON on stdout stays JSON


def test_a_simulated_study_on_the_2026_space_proposes_every_method_and_verification(
    tmp_path: Path,
) -> None:
    result = runner.invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--space",
            SPACE_032,
            "--trials",
            "24",
            "--confirm-top",
            "0",
            "--studies-dir",
            str(tmp_path),
            "--study",
            "s",
            "--seed",
            "3",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    ran = records(study.get_trials(deepcopy=False))
    specs = [r.server.speculative for r in ran]
    methods = {"none" if s is None else str(s.method) for s in specs}
    assert methods == {"none", "dflash", "eagle3", "draft_model", "ngram_gpu"}
    verification = {str(s.rejection_sample_method) for s in specs if s is not None}
    assert verification == {"standard", "block"}
    assert {s.enable_adaptive_verification for s in specs if s is not None} == {False, True}
    assert any(s is not None and s.parallel_drafting for s in specs)
    # Each trial stores the runner predicted for it; only P-EAGLE's is V1.
    for record in ran:
        spec = record.server.speculative
        expected = "V1" if spec is not None and spec.parallel_drafting else "V2"
        assert model_runner(record) == expected, record.number
    # The export's provenance names the runner of the config it recommends.
    header = (tmp_path / "s" / "best.yaml").read_text()
    assert "# model runner V" in header and "(predicted from vLLM's rules)" in header


def test_space_check_on_vllm_0_34_lists_v2_for_every_config_and_the_memory_flag_unset() -> None:
    result = runner.invoke(app, ["space", "check", SPACE])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    title = lines.index("model runner on vLLM v0.34.0 (predicted from vLLM's rules):")
    rows = [line.split() for line in lines[title + 1 : title + 7]]
    assert [row[0].split(":")[0] for row in rows] == [
        "none",
        "dflash",
        "eagle3",
        "Qwen/Qwen3-0.6B",
        "suffix",
        "ngram_gpu",
    ]
    assert all(row[-1] == "V2" for row in rows)
    assert "parallel_drafting" not in result.stdout and "WARNING" not in result.stdout
    assert "gpu_memory_utilization: left unset on vLLM v0.34.0" in result.stdout


def test_p_eagle_on_vllm_0_34_is_refused_in_one_line(tmp_path: Path) -> None:
    space = yaml.safe_load(builtin_spaces()[SPACE_032].read_text())
    space["vllm"]["image"] = "vllm/vllm-openai:v0.34.0"
    path = tmp_path / "p-eagle.yaml"
    path.write_text(yaml.safe_dump(space))
    result = runner.invoke(app, ["space", "check", str(path)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "P-EAGLE (parallel_drafting true on eagle3) cannot start on vLLM v0.34.0" in line
    assert "use a DFlash drafter, or an image up to vLLM 0.33" in line


def _study(tmp_path: Path, space: str, name: str) -> list[TrialRecord]:
    result = runner.invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--space",
            space,
            "--trials",
            "6",
            "--confirm-top",
            "0",
            "--studies-dir",
            str(tmp_path),
            "--study",
            name,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/{name}.db")
    return records(study.get_trials(deepcopy=False))


def test_a_study_on_vllm_0_34_leaves_the_memory_flag_unset_and_0_32_searches_its_range(
    tmp_path: Path,
) -> None:
    on_034 = _study(tmp_path, SPACE, "new")
    assert {r.server.gpu_memory_utilization for r in on_034} == {1.0}
    best = (tmp_path / "new" / "best.yaml").read_text()
    assert "gpu-memory-utilization" not in best and "# vLLM v0.34.0 flags" in best
    on_032 = _study(tmp_path, SPACE_032, "old")
    shares = {r.server.gpu_memory_utilization for r in on_032}
    assert shares and all(0.80 <= s <= 0.94 for s in shares)
    assert "gpu-memory-utilization: 0." in (tmp_path / "old" / "best.yaml").read_text()
