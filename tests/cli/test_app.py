"""The command line through typer's CliRunner, plus one real-process end-to-end run."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_optimize_sim_end_to_end(tmp_path: Path) -> None:
    code, out, err = _run(
        "optimize",
        "--hardware",
        "4090x2",
        "--backend",
        "sim",
        "--trials",
        "5",
        "--studies-dir",
        str(tmp_path),
        "--seed",
        "1",
    )
    assert code == 0, err
    db = tmp_path / "qwen2.5-32b-awq-4090x2.db"
    assert db.exists()
    study = optuna.load_study(study_name="qwen2.5-32b-awq-4090x2", storage=f"sqlite:///{db}")
    # The twin may leave its next proposal WAITING for a resume: it is no trial that ran.
    ran = [t for t in study.trials if t.state is not optuna.trial.TrialState.WAITING]
    assert len(ran) == 5
    assert "Pareto front (feasible, simulated)" in out and "Recommended" in out
    assert "simulated:" in out
    best = tmp_path / "qwen2.5-32b-awq-4090x2" / "best.yaml"
    text = best.read_text()
    assert text.startswith("# spectune export: study qwen2.5-32b-awq-4090x2")
    assert "# simulated: output" in text
    config = yaml.safe_load(text)
    assert config["model"] == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert config["tensor-parallel-size"] == 2
    assert 0.8 <= config["gpu-memory-utilization"] <= 0.98


def test_optimize_json_and_export(tmp_path: Path) -> None:
    code, out, err = _run(
        "optimize",
        "--backend",
        "sim",
        "--trials",
        "6",
        "--studies-dir",
        str(tmp_path),
        "--study",
        "j",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["study"] == "j" and data["trials"] == 6
    best = data["recommended"]
    assert best["source"] == "simulated" and best["output_tok_s"] > 0
    assert all(p["status"] == "ok" for p in data["pareto_front"])
    out_file = tmp_path / "exported.yaml"
    code, out, err = _run(
        "export", "j", "--studies-dir", str(tmp_path), "--out", str(out_file), "--json"
    )
    assert code == 0, err
    exported = json.loads(out)
    assert exported["trial"] == best["trial"]
    assert yaml.safe_load(out_file.read_text())["model"] == "Qwen/Qwen2.5-32B-Instruct-AWQ"


def test_estimate_is_labelled_predicted() -> None:
    code, out, err = _run(
        "estimate",
        "--hardware",
        "4090x2",
        "--model",
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        "--draft",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--k",
        "4",
        "--workload",
        "code",
        "--temperature",
        "0.2",
    )
    assert code == 0, err
    assert "Predicted" in out and "fits" in out and "tok/s" in out
    code, out, _ = _run(
        "estimate",
        "--hardware",
        "4090x2",
        "--model",
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        "--gpu-memory-utilization",
        "0.98",
        "--vllm-version",
        "0.32.0",  # 0.21-0.33 refuse 0.98 at start-up; 0.34 sizes its cache from what is free
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["source"] == "predicted" and data["fits"] is False
    assert data["result"] is None and data["memory_per_gpu_gib"]["reason"]


def test_catalog_commands() -> None:
    code, out, _ = _run("hardware")
    assert code == 0 and "RTX 4090" in out and "H200" in out
    code, out, _ = _run("models", "--json")
    assert code == 0 and any(m["hf_id"] == "Qwen/Qwen2.5-0.5B-Instruct" for m in json.loads(out))


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.db")}


@pytest.fixture
def existing_study(tmp_path: Path) -> Path:
    code, _, err = _run(
        "optimize",
        "--backend",
        "sim",
        "--trials",
        "2",
        "--studies-dir",
        str(tmp_path),
        "--study",
        "keep",
    )
    assert code == 0, err
    return tmp_path


def _bad_inputs(folder: Path) -> list[tuple[list[str], str]]:
    bad_yaml = folder / "bad.yaml"
    bad_yaml.write_text("target: [oops\n")
    blocker = folder / "a-file"
    blocker.write_text("")
    return [
        (["optimize", "--hardware", "9090x2", "--studies-dir", str(folder)], "unknown hardware"),
        (["estimate", "--hardware", "4090x2", "--model", "Qwen/Nope"], "unknown model"),
        (
            [
                "estimate",
                "--hardware",
                "4090x2",
                "--model",
                "Qwen/Qwen2.5-32B-Instruct-AWQ",
                "--draft",
                "meta-llama/Llama-3.2-1B-Instruct",
            ],
            "tokenizer",
        ),
        (["optimize", "--space", str(bad_yaml), "--studies-dir", str(folder)], "not valid YAML"),
        (["optimize", "--studies-dir", str(blocker / "sub")], "not writable"),
        (
            ["optimize", "--storage", "nonsense", "--studies-dir", str(folder)],
            "invalid storage URL",
        ),
        (["optimize", "--backend", "cloud", "--studies-dir", str(folder)], "unknown backend"),
        (["optimize", "--sampler", "magic", "--studies-dir", str(folder)], "unknown sampler"),
        (["export", "nope", "--studies-dir", str(folder)], "no study 'nope'"),
    ]


def test_bad_input_is_one_line_exit_2_and_leaves_studies_intact(existing_study: Path) -> None:
    before = _digest(existing_study)
    for args, message in _bad_inputs(existing_study):
        code, out, err = _run(*args)
        assert code == 2, (args, out, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
        assert message in lines[0], (args, err)
    assert _digest(existing_study) == before


def test_console_script_runs_a_study(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("spectune")
    proc = subprocess.run(
        [
            str(exe),
            "optimize",
            "--hardware",
            "4090x1",
            "--space",
            "qwen2.5-14b-awq-4090x1",
            "--backend",
            "sim",
            "--trials",
            "2",
            "--confirm-top",
            "0",
            "--studies-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Pareto front" in proc.stdout or "No trial met" in proc.stdout
    assert (tmp_path / "qwen2.5-14b-awq-4090x1.db").exists()
