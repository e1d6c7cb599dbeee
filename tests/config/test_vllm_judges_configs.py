"""Real vLLM as the judge: every config spectune proposes is one vLLM 0.32 accepts.

Each argv spectune would launch (``server_argv``) and each exported ``--config`` YAML
(``server_yaml``) goes through vLLM's own ``vllm serve`` parser and
``EngineArgs(...).create_engine_config()`` on weight-less model folders that carry the models'
``config.json`` (the catalog's, EAGLE heads included, written into a Hugging Face cache). Covered:
every shipped search space (each speculation choice at its own K bounds and settings' ends,
memory utilization and batched tokens at their ends), every (target, draft) pair the catalog
allows, ngram for every catalog target, each catalog head with its targets, mtp for every target
with MTP layers, and suffix decoding (arctic-inference is installed in the test bed's vLLM).
A new method or model joins by entering the space files or the catalog.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testbed import VllmOracle, write_hf_cache
from tuner.catalog.heads import HEADS, is_head
from tuner.catalog.models import CATALOG, ModelSpec, needs_heterogeneous_vocab
from tuner.catalog.mtp import mtp_layers
from tuner.config.methods.draft_model import check_pair
from tuner.config.space import SearchSpace, builtin_spaces, load_space
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import (
    VllmVersion,
    config_file_argv,
    parse_version,
    sampled_value_refusal,
    server_argv,
    server_yaml,
)
from tuner.errors import IncompatibleDraftError

pytestmark = pytest.mark.vllm

JUDGE_VERSION = parse_version("0.32.0")  # the CPU build in the test bed, and the spaces' image
K_BOUNDS = (1, 8)
_BY_ID = {m.hf_id: m for m in CATALOG}
# Heads are no targets; a checkpoint that ships its own code (auto_map: MiMo) needs
# --trust-remote-code and code files a weight-less folder does not have.
_TARGETS = [m for m in CATALOG if not is_head(m.config, m.hf_id) and "auto_map" not in m.config]


def _argv(server: ServerConfig, version: VllmVersion) -> list[str]:
    return ["serve", *server_argv(server, version, host="127.0.0.1", port=8000)]


def _yaml_argv(server: ServerConfig, version: VllmVersion, folder: Path, name: str) -> list[str]:
    config = server_yaml(server, version)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = config_file_argv(config, str(path), model=server.model)
    return ["serve", *argv, "--host", "127.0.0.1", "--port", "8000"]


def _space_servers(space: SearchSpace) -> Iterator[tuple[str, ServerConfig]]:
    """Each choice at its K bounds and its settings' ends, memory settings at their ends."""
    utils = (space.gpu_memory_utilization.low, space.gpu_memory_utilization.high)
    batched = (min(space.max_num_batched_tokens), max(space.max_num_batched_tokens))
    for choice in space.choices:
        ks = space.k_range(choice.label)
        ends = [{name: r.low for name, r in choice.settings}]
        ends.append({name: r.high for name, r in choice.settings})
        for k, util, mnbt, end in itertools.product((ks[0], ks[-1]), utils, batched, ends):
            trial = space.config(choice.speculative(k, end), util, mnbt, 0.0)
            label = f"{space.name}/{choice.label}/k{k}/u{util}/b{mnbt}/{sorted(end.values())}"
            yield label, trial.server


def _pair_servers() -> Iterator[tuple[str, ServerConfig, ModelSpec | None, ModelSpec]]:
    """Every catalog (target, draft) pair check_draft allows on 0.32, and ngram per target."""
    for target in _TARGETS:
        base = ServerConfig(target.hf_id, 1, 8192, 0.9, 2048)
        for k in K_BOUNDS:
            ngram = SpeculativeConfig(SpecMethod.NGRAM, k, prompt_lookup_max=4, prompt_lookup_min=1)
            yield f"{target.hf_id}+ngram/k{k}", _with(base, ngram), None, target
        for draft in CATALOG:
            try:
                check_pair(target, draft, JUDGE_VERSION)
            except IncompatibleDraftError:
                continue
            spec = SpeculativeConfig(SpecMethod.DRAFT_MODEL, K_BOUNDS[-1], model=draft.hf_id)
            yield f"{target.hf_id}+{draft.hf_id}", _with(base, spec), draft, target


def _method_servers() -> Iterator[tuple[str, ServerConfig]]:
    """Each catalog head with its targets, mtp per MTP target, suffix on one target."""
    for head in HEADS:
        for target_id in head.targets:
            spec = SpeculativeConfig(head.method, K_BOUNDS[-1], model=head.hf_id)
            yield f"{target_id}+{head.hf_id}", ServerConfig(target_id, 1, 8192, 0.9, 2048, spec)
    for target in _TARGETS:
        if mtp_layers(target.config):
            spec = SpeculativeConfig(SpecMethod.MTP, 2)
            yield f"{target.hf_id}+mtp", ServerConfig(target.hf_id, 1, 8192, 0.9, 2048, spec)
    suffix = SpeculativeConfig(
        SpecMethod.SUFFIX, 16, suffix_decoding_max_tree_depth=24, suffix_decoding_min_token_prob=0.1
    )
    yield "suffix", ServerConfig("meta-llama/Llama-3.1-8B-Instruct", 1, 8192, 0.9, 2048, suffix)


def _sampled_servers(server: ServerConfig) -> dict[str, ServerConfig]:
    """Tuned values vLLM refuses, or just accepts (the boundary of sampled_value_refusal)."""
    seqs = (("max-num-seqs", 256),)  # explicit: the default depends on the device
    return {
        "batched-below-seqs": _replace(server, max_num_batched_tokens=128, extra_flags=seqs),
        "batched-equal-seqs": _replace(server, max_num_batched_tokens=256, extra_flags=seqs),
        "no-chunking-short-batch": _replace(server, enable_chunked_prefill=False),
        "no-chunking-long-batch": _replace(
            server, enable_chunked_prefill=False, max_num_batched_tokens=8192
        ),
    }


def _replace(server: ServerConfig, **changes: Any) -> ServerConfig:
    return ServerConfig(**{**server.__dict__, **changes})


def _with(server: ServerConfig, spec: SpeculativeConfig) -> ServerConfig:
    return ServerConfig(**{**server.__dict__, "speculative": spec})


@pytest.fixture(scope="module")
def verdicts(vllm_oracle: VllmOracle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM judges every case of this module, the catalog's models laid out in its Hub cache."""
    write_hf_cache(vllm_oracle.hub_cache, {m.hf_id: m.config for m in CATALOG})
    folder = tmp_path_factory.mktemp("yaml")
    cases: dict[str, list[str]] = {}
    # The CPU build judges the spaces pinned to its release; the 0.34 space's rules are pinned
    # to 0.34's source lines (tests/config/test_vllm_034.py), and its 0.32 copy is judged here.
    spaces = {name: load_space(name) for name in sorted(builtin_spaces())}
    newer = {name for name, space in spaces.items() if space.version != JUDGE_VERSION}
    assert newer == {"qwen3-coder-30b-fp8-4090x2-2026"}, newer
    for name in sorted(set(spaces) - newer):
        space = spaces[name]
        for label, server in _space_servers(space):
            cases[label] = _argv(server, space.version)
            cases[label + "/yaml"] = _yaml_argv(server, space.version, folder, str(len(cases)))
    for label, server, _, _ in _pair_servers():
        cases["pair:" + label] = _argv(server, JUDGE_VERSION)
    for label, server in _method_servers():
        cases["method:" + label] = _argv(server, JUDGE_VERSION)
        cases["method:" + label + "/yaml"] = _yaml_argv(
            server, JUDGE_VERSION, folder, str(len(cases))
        )
    default = load_space("default")
    small = default.config(default.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.9, 2048, 0.0)
    # Controls: the argv 0.24's dialect writes (no use_heterogeneous_vocab) and an unknown flag.
    cases["control:no-heterogeneous-flag"] = _argv(small.server, parse_version("0.24.0"))
    unknown = ServerConfig(**{**small.server.__dict__, "extra_flags": (("no-such-flag", 1),)})
    cases["control:unknown-flag"] = _argv(unknown, JUDGE_VERSION)
    for label, server in _sampled_servers(small.server).items():
        cases["sampled:" + label] = _argv(server, JUDGE_VERSION)
    results = vllm_oracle.judge(cases.values())
    return dict(zip(cases, results, strict=True))


def _refused(verdicts: dict[str, Any], prefix: str) -> dict[str, str]:
    return {
        label: f"{v['stage']}: {v['error']}"
        for label, v in verdicts.items()
        if label.startswith(prefix) and not v["ok"]
    }


def test_vllm_accepts_every_config_of_every_shipped_space(verdicts: dict[str, Any]) -> None:
    for name in builtin_spaces():
        space = load_space(name)
        if space.version != JUDGE_VERSION:  # the 0.34 space (the verdicts fixture says why)
            continue
        labels = [label for label in verdicts if label.startswith(space.name + "/")]
        assert len(labels) >= 2 * len(space.drafts)
        assert _refused(verdicts, space.name + "/") == {}
        for choice in space.choices:  # every choice was judged, and vLLM runs its method
            mine = [label for label in labels if label.startswith(f"{space.name}/{choice.label}/k")]
            assert mine, choice.label
            for label in mine:
                spec = verdicts[label]["speculative"]
                if choice.method is SpecMethod.NONE:
                    assert spec is None
                    continue
                assert spec["method"] == str(choice.method)
                if "awq" in space.target.quantization:  # vLLM detects AWQ by itself
                    assert verdicts[label]["quantization"] == space.target.quantization
                if choice.method == SpecMethod.DRAFT_MODEL:
                    differs = needs_heterogeneous_vocab(space.target, _BY_ID[str(choice.model)])
                    assert spec["use_heterogeneous_vocab"] is differs


def test_vllm_accepts_every_head_mtp_and_suffix_config(verdicts: dict[str, Any]) -> None:
    labels = [label for label in verdicts if label.startswith("method:")]
    assert len(labels) == 2 * len(list(_method_servers()))
    assert _refused(verdicts, "method:") == {}
    for label, server in _method_servers():
        assert server.speculative is not None
        for case in ("method:" + label, "method:" + label + "/yaml"):
            assert verdicts[case]["speculative"]["method"] == str(server.speculative.method)


def test_vllm_accepts_every_catalog_pair(verdicts: dict[str, Any]) -> None:
    pairs = [label for label in verdicts if label.startswith("pair:")]
    assert len(pairs) > 2 * len(CATALOG)  # ngram at both K bounds, plus the draft pairs
    assert _refused(verdicts, "pair:") == {}
    for label, _, draft, target in _pair_servers():
        spec = verdicts["pair:" + label]["speculative"]
        if draft is not None:
            assert spec["use_heterogeneous_vocab"] is needs_heterogeneous_vocab(target, draft)


def test_the_judge_refuses_what_vllm_refuses(verdicts: dict[str, Any]) -> None:
    """The tier would have caught issue 10: the default pair without the flag is refused."""
    no_flag = verdicts["control:no-heterogeneous-flag"]
    assert no_flag["ok"] is False and no_flag["stage"] == "engine"
    assert "Target and draft model should have the same vocabulary size" in no_flag["error"]
    assert "vocab_size=152064" in no_flag["error"] and "vocab_size=151936" in no_flag["error"]
    unknown = verdicts["control:unknown-flag"]
    assert unknown["stage"] == "argparse" and unknown["exit"] == 2
    assert "unrecognized arguments: --no-such-flag" in unknown["error"]


def test_sampled_value_refusals_match_vllms(verdicts: dict[str, Any]) -> None:
    """Refusals that depend on sampled values: spectune predicts them (infeasible trials)."""
    default = load_space("default")
    base = default.config(default.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.9, 2048, 0.0)
    for label, server in _sampled_servers(base.server).items():
        verdict = verdicts["sampled:" + label]
        predicted = sampled_value_refusal(server)
        assert verdict["ok"] is (predicted is None), label
        if predicted is not None:
            assert predicted in verdict["error"], label
    # Nothing a shipped space proposes is refused for its sampled values, on its own GPUs.
    for name in builtin_spaces():
        space = load_space(name)
        for _, server in _space_servers(space):
            assert sampled_value_refusal(server, space.hardware.gpu) is None
