"""vLLM 0.32 judges the newer methods and options, and the model runner of every config.

Each config goes through vLLM's own ``vllm serve`` parser and ``create_engine_config()`` as on
a CUDA host (the oracle's ``judge_gpu``: Triton and CUDA graphs switched on, as every CUDA build
has them; vLLM's code decides the rest), on weight-less folders holding the catalog's
``config.json`` files, the DFlash, DSpark and P-EAGLE drafters' included. Covered: every shipped
space's choices, each in every option variant its warm start proposes (adaptive verification,
block verification, parallel drafting, probabilistic draft sampling) at both ends of its K
range; each catalog block drafter with its targets; dspark_draft_topk; the YAML a simulated
study on the shipped 2026 space exports. For each, vLLM must accept it and pick the runner
spectune predicted. Controls: pairs spectune refuses at load, which vLLM refuses too, for the
same reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.testbed import VllmOracle, require_vllm, vllm_venv, write_hf_cache
from tuner.catalog.models import CATALOG
from tuner.catalog.mtp import MTP_MODEL_TYPES
from tuner.catalog.seed_drafters import DRAFTERS
from tuner.cli import app
from tuner.config.space import SearchSpace, builtin_spaces, load_space
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling
from tuner.config.vllm_args import heterogeneous_vocab, parse_version, server_argv
from tuner.config.vllm_runner import predict_runner

pytestmark = pytest.mark.vllm

VERSION = parse_version("0.32.0")


def _argv(server: ServerConfig) -> list[str]:
    return ["serve", *server_argv(server, VERSION, host="127.0.0.1", port=8000)]


def _variant_servers(space: SearchSpace) -> Iterator[tuple[str, ServerConfig]]:
    """Each speculation choice in each option variant, at both ends of its K range."""
    for choice in space.choices:
        ks = space.k_range(choice.label)
        for variant in choice.design():
            for k in {ks[0], ks[-1]}:
                spec = choice.speculative(k, variant)
                server = space.config(spec, space.gpu_memory_utilization.low, 2048, 0.0).server
                yield f"{space.name}/{choice.label}/k{k}/{sorted(variant.items())}", server


def _drafter_servers() -> Iterator[tuple[str, ServerConfig]]:
    """Each catalog block drafter with each of its targets, at its trained width."""
    for drafter in DRAFTERS:
        for target in drafter.targets:
            width = 15 if drafter.method is SpecMethod.DFLASH else 7
            spec = SpeculativeConfig(drafter.method, width, model=drafter.hf_id)
            yield f"{target}+{drafter.hf_id}", ServerConfig(target, 1, 8192, 0.9, 2048, spec)
    topk = SpeculativeConfig(
        SpecMethod.DSPARK, 7, model="deepseek-ai/dspark_qwen3_8b_block7", dspark_draft_topk=64
    )
    yield "dspark_draft_topk", ServerConfig("Qwen/Qwen3-8B", 1, 8192, 0.9, 2048, topk)


def _refused_servers() -> dict[str, tuple[ServerConfig, str]]:
    """Configs spectune refuses when a space loads, with vLLM's words for the same reason."""
    head = "amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"
    coder = "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
    eager = (("enforce-eager", True),)
    adaptive = SpeculativeConfig(
        SpecMethod.EAGLE3, 4, model=head, enable_adaptive_verification=True
    )
    mixed = SpeculativeConfig(
        SpecMethod.DRAFT_MODEL,
        4,
        model="Qwen/Qwen2.5-0.5B-Instruct",
        draft_sample_method=DraftSampling.PROBABILISTIC,
    )
    p_eagle = SpeculativeConfig(
        SpecMethod.EAGLE3, 4, model=head, parallel_drafting=True, enable_adaptive_verification=True
    )
    return {
        "adaptive-eager": (
            ServerConfig(coder, 2, 8192, 0.9, 2048, adaptive, extra_flags=eager),
            "Adaptive verification requires full CUDA graphs",
        ),
        "heterogeneous-probabilistic": (
            ServerConfig("Qwen/Qwen2.5-32B-Instruct-AWQ", 2, 8192, 0.9, 2048, mixed),
            "use_heterogeneous_vocab currently only supports greedy draft sampling",
        ),
        "p-eagle-adaptive": (
            ServerConfig(coder, 2, 8192, 0.9, 2048, p_eagle),
            "Model Runner V1 does not support: adaptive draft verification",
        ),
    }


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The best.yaml of a short simulated study on the shipped 2026 space (its 0.32 copy)."""
    folder = tmp_path_factory.mktemp("studies")
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--space",
            "qwen3-coder-30b-fp8-4090x2-2026-vllm032",  # the release the oracle runs
            "--trials",
            "8",
            "--confirm-top",
            "0",
            "--studies-dir",
            str(folder),
            "--study",
            "s",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    return folder / "s" / "best.yaml"


@pytest.fixture(scope="module")
def judge(vllm_oracle: VllmOracle) -> VllmOracle:
    """The oracle, the catalog's models (drafters included) laid out in its Hub cache."""
    write_hf_cache(vllm_oracle.hub_cache, {m.hf_id: m.config for m in CATALOG})
    return vllm_oracle


@pytest.fixture(scope="module")
def verdicts(judge: VllmOracle) -> dict[str, tuple[ServerConfig, dict[str, Any]]]:
    cases: dict[str, ServerConfig] = {}
    for name in sorted(builtin_spaces()):
        cases.update(_variant_servers(load_space(name)))
    cases.update(_drafter_servers())
    cases.update({f"refused:{k}": server for k, (server, _) in _refused_servers().items()})
    answers = judge.judge_gpu(_argv(server) for server in cases.values())
    return {label: (cases[label], answer) for label, answer in zip(cases, answers, strict=True)}


def _predicted(server: ServerConfig) -> str:
    mixed = heterogeneous_vocab(server, VERSION)
    forecast = predict_runner(server, VERSION, heterogeneous_vocab=mixed)
    return str(forecast.runner)


def test_vllm_accepts_every_variant_and_picks_the_predicted_runner(
    verdicts: dict[str, tuple[ServerConfig, dict[str, Any]]],
) -> None:
    accepted = {k: v for k, v in verdicts.items() if not k.startswith("refused:")}
    refused = {k: a["error"] for k, (_, a) in accepted.items() if not a["ok"]}
    assert refused == {}
    for label, (server, answer) in accepted.items():
        assert answer["runner"] == _predicted(server), (label, answer["v2_unsupported"])
        spec, judged = server.speculative, answer["speculative"]
        if spec is None:
            continue
        assert judged["method"] == str(spec.method), label
        for key in ("rejection_sample_method", "draft_sample_method"):
            assert judged[key] == str(getattr(spec, key)), (label, key)
        assert judged["enable_adaptive_verification"] is spec.enable_adaptive_verification
        # vLLM turns parallel drafting on for block drafters itself.
        block = str(spec.method) in ("dflash", "dspark")
        assert judged["parallel_drafting"] is (spec.parallel_drafting or block), label
    # Every new method, option and runner was judged, not just listed.
    specs = [s for s, _ in accepted.values() if s.speculative is not None]
    methods = {str(s.speculative.method) for s in specs if s.speculative}
    assert {"dflash", "dspark", "eagle3", "ngram_gpu", "draft_model"} <= methods
    assert {a["runner"] for _, a in accepted.values()} == {"V1", "V2"}
    options = [s.speculative for s in specs if s.speculative]
    assert any(o.parallel_drafting for o in options)
    assert any(o.enable_adaptive_verification for o in options)
    assert any(str(o.rejection_sample_method) == "block" for o in options)
    assert any(str(o.draft_sample_method) == "probabilistic" for o in options)
    assert verdicts["dspark_draft_topk"][1]["speculative"]["dspark_draft_topk"] == 64


def test_the_default_spaces_drafts_land_on_v1_as_predicted(
    verdicts: dict[str, tuple[ServerConfig, dict[str, Any]]],
) -> None:
    drafts = {k: a for k, (_, a) in verdicts.items() if "/Qwen/Qwen2.5-0.5B-Instruct/" in k}
    assert drafts
    for answer in drafts.values():
        assert answer["runner"] == "V1"
        assert answer["v2_unsupported"] == ["heterogeneous-vocabulary draft models"]


def test_what_spectune_refuses_at_load_vllm_refuses_too(
    verdicts: dict[str, tuple[ServerConfig, dict[str, Any]]],
) -> None:
    for label, (_, reason) in _refused_servers().items():
        _, answer = verdicts[f"refused:{label}"]
        assert answer["ok"] is False, label
        assert reason in answer["error"], (label, answer["error"])


def test_the_2026_spaces_export_is_a_config_vllm_accepts(judge: VllmOracle, exported: Path) -> None:
    argv = ["serve", "--config", str(exported), "--host", "127.0.0.1", "--port", "8000"]
    (answer,) = judge.judge_gpu([argv])
    assert answer["ok"] is True, answer
    config = yaml.safe_load(exported.read_text())
    written = config.get("speculative-config")
    if written is None:  # the study picked no speculation
        assert answer["speculative"] is None
        return
    assert answer["speculative"]["method"] == written["method"]
    header = exported.read_text().split("\n# model runner ", 1)[1].split(" ", 1)[0]
    assert answer["runner"] == header  # the export names the runner vLLM picks


def test_the_mtp_families_are_the_installed_vllms() -> None:
    """spectune's list of MTP model types is vLLM 0.32's ``MTPModelTypes``, read from its source."""
    require_vllm()
    source = next(vllm_venv().glob("lib/python3*/site-packages/vllm/config/speculative.py"))
    tree = ast.parse(source.read_text())
    literal = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "MTPModelTypes" for t in node.targets)
    )
    assert isinstance(literal, ast.Subscript) and isinstance(literal.slice, ast.Tuple)
    names = {e.value for e in literal.slice.elts if isinstance(e, ast.Constant)}
    assert names == MTP_MODEL_TYPES
