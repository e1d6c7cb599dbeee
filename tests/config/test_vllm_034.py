"""vLLM 0.33 and 0.34's rules, each pinned to the line of that release's source that states it.

The 0.34 wheel is GPU-only (``pip install vllm==0.34.0`` fails here: flashinfer-python 0.7.3 is
not on the index), so these rules are spectune's transcription, each test naming the file and
line of vLLM 0.34.0 (``pip download vllm==0.34.0 --no-deps``) it follows. On a GPU host the
pre-flight (:mod:`tuner.launch.preflight`) asks the image's own vLLM instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from tuner.catalog.models import load_model
from tuner.config.methods import method_of
from tuner.config.schema import parse_space
from tuner.config.space import SearchSpace, space_from_dict
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import memory_range, parse_version, server_argv, server_yaml
from tuner.config.vllm_runner import ModelRunner, predict_runner
from tuner.errors import ConfigError
from tuner.sim.memory import estimate_memory, memory_rules

V034, V033, V032 = parse_version("0.34.0"), parse_version("0.33.0"), parse_version("0.32.0")
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
QWEN3 = "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
DFLASH = "z-lab/Qwen3-Coder-30B-A3B-DFlash"
P_EAGLE = "amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"


def _space(search: dict[str, Any], version: str = "0.34.0", **extra: Any) -> SearchSpace:
    raw = {"hardware": "4090x2", "target": QWEN3, "vllm": {"version": version}}
    return space_from_dict({**raw, "search": search, **extra}, "test space")


def _server(method: str, k: int = 3, share: float = 0.9, **spec: Any) -> ServerConfig:
    speculative = SpeculativeConfig(SpecMethod(method), k, **spec)
    return ServerConfig(LLAMA, 1, 8192, share, 2048, speculative)


def test_every_config_lands_on_v2_because_0_34_has_no_v1_runner() -> None:
    # vllm/v1/worker/ holds no gpu_model_runner.py; gpu_worker.py:585-587 builds
    # vllm.v1.worker.gpu.model_runner.GPUModelRunner whatever the config.
    suffix = _server("suffix")
    assert predict_runner(suffix, V033).runner is ModelRunner.V1
    assert predict_runner(suffix, V034).runner is ModelRunner.V2
    mixed = ServerConfig(QWEN3, 2, 8192, 0.9, 2048)
    assert predict_runner(mixed, V034, heterogeneous_vocab=True).runner is ModelRunner.V2


def test_parallel_drafting_on_an_eagle_head_cannot_start_on_0_34() -> None:
    # vllm/config/speculative.py:1688-1693: ValueError "parallel_drafting is only supported by
    # the dflash and dspark methods, not 'eagle3'."
    server = _server("eagle3", model=EAGLE3, parallel_drafting=True)
    server_argv(server, V033, host="h", port=1)
    with pytest.raises(ConfigError, match=r"P-EAGLE .* cannot start on vLLM 0\.34\.0"):
        server_argv(server, V034, host="h", port=1)
    head = {"method": "eagle3", "model": P_EAGLE, "parallel_drafting": [False, True]}
    _space({"methods": [head]}, version="0.33.0")
    with pytest.raises(ConfigError, match=r"use a DFlash drafter, or an image up to vLLM 0\.33"):
        _space({"methods": [head]})


def test_suffix_runs_on_the_gpu_and_its_two_dead_knobs_are_neither_written_nor_searched() -> None:
    # vllm/config/speculative.py:598-604: max_spec_factor and min_token_prob "Deprecated and
    # has no effect"; suffix/config.py:28: default K min(8, max_tree_depth).
    server = _server(
        "suffix",
        k=8,
        suffix_decoding_max_tree_depth=24,
        suffix_decoding_max_spec_factor=1.0,
        suffix_decoding_min_token_prob=0.1,
    )
    old = str(server_yaml(server, V033)["speculative-config"])
    new = str(server_yaml(server, V034)["speculative-config"])
    assert "suffix_decoding_max_spec_factor" in old and "suffix_decoding_min_token_prob" in old
    assert "suffix_decoding_max_spec_factor" not in new and "min_token_prob" not in new
    assert "'suffix_decoding_max_tree_depth': 24" in new
    searched = {"method": "suffix", "suffix_decoding_min_token_prob": {"low": 0.05, "high": 0.3}}
    _space({"methods": [searched]}, version="0.33.0")
    with pytest.raises(ConfigError, match="suffix_decoding_min_token_prob has no effect on vLLM"):
        _space({"methods": [searched]})


def test_a_draft_of_another_vocabulary_size_is_refused_again_on_0_34() -> None:
    # speculative.py:1725-1740 (verify_equal_vocab_size_if_draft_model), and 0.34 has no
    # use_heterogeneous_vocab (configs forbid extra fields: "Unexpected keyword argument").
    raw = {"hardware": "4090x2", "target": "Qwen/Qwen2.5-32B-Instruct-AWQ"}
    search = {"methods": [{"method": "draft_model", "model": "Qwen/Qwen2.5-0.5B-Instruct"}]}
    space_from_dict({**raw, "vllm": {"version": "0.33.0"}, "search": search}, "on 0.33")
    with pytest.raises(ConfigError, match=r"0\.34 removed use_heterogeneous_vocab"):
        space_from_dict({**raw, "vllm": {"version": "0.34.0"}, "search": search}, "on 0.34")


def test_adaptive_verification_is_refused_beside_lora_and_pipeline_stages() -> None:
    # vllm/config/vllm.py:3276-3281 (LoRA), :3283-3288 (full CUDA graphs), :3306-3314 (PP).
    method = {"method": "dflash", "model": DFLASH, "enable_adaptive_verification": [False, True]}
    _space({"methods": [method]}, server={"extra_flags": {"pipeline-parallel-size": 1}})
    for flags, why in (
        ({"enable-lora": True}, "not currently compatible with LoRA"),
        ({"pipeline-parallel-size": 2}, "not currently compatible with pipeline parallelism"),
        ({"enforce-eager": True}, "requires full CUDA graphs"),
    ):
        with pytest.raises(ConfigError, match=why):
            _space({"methods": [method]}, server={"extra_flags": flags})


def test_block_drafters_cap_the_running_requests_from_0_33() -> None:
    # vllm/config/vllm.py:2300-2320 lowers max_num_active_seqs to max_num_batched_tokens //
    # num_lookahead_tokens: K + 1 for DFlash (dflash/config.py:53-60), K for DSpark sampling
    # from its anchor (dspark/config.py:129-137, 0.34).
    dflash, dspark = method_of(SpecMethod.DFLASH), method_of(SpecMethod.DSPARK)
    assert dflash.running_cap(15, 2048, V034) == 128  # vLLM's own log for K=15, 2048
    assert dflash.running_cap(15, 2048, V032) is None
    assert dspark.running_cap(16, 2048, V034) == 128
    assert dspark.running_cap(16, 2048, V033) == 120
    assert method_of(SpecMethod.EAGLE3).running_cap(15, 2048, V034) is None


def test_the_memory_flag_is_left_unset_on_0_34_unless_a_headroom_is_named() -> None:
    # vllm/config/cache.py:216-234: gpu_memory_utilization None resolves to 1.0 with the
    # extensible KV cache; "leave this unset unless something needs memory that vLLM does not
    # measure".
    written = space_from_dict(
        {"hardware": "4090x2", "target": QWEN3, "vllm": {"version": "0.32.0"}}, "s"
    ).gpu_memory_utilization
    space = _space({"gpu_memory_utilization": {"low": 0.8, "high": 0.94, "step": 0.02}})
    assert (space.gpu_memory_utilization.low, space.gpu_memory_utilization.high) == (1.0, 1.0)
    assert written.low == written.high == 0.9  # 0.32: the space's value, as written
    capped = _space(
        {"gpu_memory_utilization": {"low": 0.8, "high": 0.94, "step": 0.02}},
        server={"memory_headroom_gib": 2},
    ).gpu_memory_utilization
    assert capped.low == 0.8 and capped.high == pytest.approx(1 - 2 / 24, abs=1e-3)
    assert memory_range(written, V033, 2.0, 24.0) == written
    unset = ServerConfig(QWEN3, 2, 8192, 1.0, 2048)
    assert "--gpu-memory-utilization" not in server_argv(unset, V034, host="h", port=1)
    assert "--gpu-memory-utilization" in server_argv(unset, V033, host="h", port=1)


def test_the_0_34_memory_model_sizes_the_kv_cache_from_what_is_free() -> None:
    # extensible_kv_cache.py:597-617: min(budget - held, free - margin) - transient; no
    # start-up free-memory check with the extensible cache (v1/worker/utils.py:783-797);
    # blocks of 64 tokens (cache.py:185).
    hardware = space_from_dict({"hardware": "4090", "target": LLAMA}, "s").hardware
    target = load_model(LLAMA)
    rules = memory_rules(V034)
    assert rules.measured_kv_cache and not rules.free_memory_check and rules.block_tokens == 64
    unset = ServerConfig(LLAMA, 1, 8192, 1.0, 2048)
    alone = estimate_memory(hardware, target, None, unset, version=V034)
    shared = estimate_memory(hardware, target, None, unset, version=V034, free_gib=20.0)
    assert alone.fits and shared.fits  # 0.32 refuses 1.0 outright: free < utilization x total
    assert alone.kv_cache_gib - shared.kv_cache_gib == pytest.approx(24.0 - 20.0, abs=0.05)
    assert alone.kv_tokens % 64 == 0
    assert not estimate_memory(hardware, target, None, unset, version=V032).fits
    capped = ServerConfig(LLAMA, 1, 8192, 0.8, 2048)
    assert estimate_memory(hardware, target, None, capped, version=V034).kv_cache_gib < (
        alone.kv_cache_gib
    )


def test_a_space_pinned_to_a_release_newer_than_the_rules_loads_with_one_warning() -> None:
    space = space_from_dict(
        {"hardware": "4090x2", "target": QWEN3, "vllm": {"image": "vllm/vllm-openai:v0.35.0"}},
        "newer",
    )
    assert space.version == parse_version("0.35.0")
    note = space.newer_note
    assert note is not None and "newer than spectune's rules (0.34.0)" in note
    assert "pre-flight" in note and "\n" not in note
    assert _space({}).newer_note is None


def _lossy_head(*verifications: str, k: Any = 3) -> dict[str, Any]:
    return {
        "method": "draft_model",
        "model": "Qwen/Qwen3-0.6B",
        "num_speculative_tokens": k,
        "rejection_sample_method": list(verifications),
    }


def test_fly_is_refused_unless_the_space_opts_in_to_lossy_verification() -> None:
    # vllm/config/speculative.py:610-617: "'fly' applies FLy's lossy, entropy-gated deferred
    # window"; :1716-1719 logs that it "may degrade model outputs".
    search = {"methods": ["none", _lossy_head("standard", "fly")]}
    with pytest.raises(ConfigError, match=r"fly is lossy .* `quality: \{allow_lossy: true\}`"):
        _space(search)
    space = _space(search, quality={"allow_lossy": True})
    assert space.quality is not None and space.quality.min_similarity == 0.9
    assert _space({"methods": ["none", _lossy_head("standard")]}).quality is None


def test_fly_needs_0_33_and_two_speculative_tokens() -> None:
    # 0.32's RejectionSampleMethod is standard/synthetic/block; 0.33 adds fly (:83).
    search = {"methods": [_lossy_head("fly")]}
    with pytest.raises(ConfigError, match=r"no rejection_sample_method 'fly' .* 0\.33\.0"):
        _space(search, version="0.32.0", quality={"allow_lossy": True})
    # :1706-1708: "FLy requires num_speculative_tokens to be at least 2."
    low = {"methods": [_lossy_head("fly", k={"low": 1, "high": 4})]}
    with pytest.raises(ConfigError, match="FLy requires num_speculative_tokens to be at least 2"):
        _space(low, quality={"allow_lossy": True})


def test_a_fly_server_writes_the_verifier_and_nothing_else() -> None:
    server = _server("eagle3", model=EAGLE3, rejection_sample_method="fly")
    argv = server_argv(server, V034, host="h", port=1)
    spec = argv[argv.index("--speculative-config") + 1]
    assert '"rejection_sample_method": "fly"' in spec and "fly_window_size" not in spec


def test_a_heads_lm_head_quantization_is_searched_on_0_33_and_later() -> None:
    # speculative.py:538-543 (0.34.0): draft_lm_head_quantization fp8 | nvfp4, accepted by
    # EAGLE/EAGLE-3 heads and MTP (eagle/config.py:37, mtp/config.py:21); absent from 0.32.
    head = {
        "method": "eagle3",
        "model": EAGLE3,
        "num_speculative_tokens": 3,
        "draft_lm_head_quantization": ["none", "fp8"],
    }
    raw = {"hardware": "4090", "target": LLAMA, "vllm": {"version": "0.34.0"}}
    space = space_from_dict({**raw, "search": {"methods": ["none", head]}}, "q.yaml")
    choice = space.choices[1]
    assert "draft_lm_head_quantization" in choice.tuned
    assert choice.allowed("draft_lm_head_quantization") == ("none", "fp8")
    quantized = choice.speculative(3, {"draft_lm_head_quantization": "fp8"})
    plain = choice.speculative(3)
    for spec, written in ((quantized, True), (plain, False)):
        assert spec is not None
        argv = server_argv(ServerConfig(LLAMA, 1, 8192, 0.9, 2048, spec), V034, host="h", port=1)
        text = argv[argv.index("--speculative-config") + 1]
        assert ('"draft_lm_head_quantization": "fp8"' in text) is written
    old = {**raw, "vllm": {"version": "0.32.0"}, "search": {"methods": [head]}}
    with pytest.raises(ConfigError, match=r"no draft_lm_head_quantization .fp8.*0\.33\.0"):
        space_from_dict(old, "q.yaml")
    draft = {**head, "method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct"}
    with pytest.raises(ConfigError, match=r"unknown key .*draft_model\.draft_lm_head_quantization"):
        parse_space({**raw, "search": {"methods": [draft]}}, "q.yaml")  # as a file is read


def test_a_quantized_lm_head_drafts_faster_in_the_simulator() -> None:
    # Fewer bytes read each draft pass (EAGLE-3's 32k-token head: 16 -> 8 bits).
    from tuner.sim.perfmodel import drafter

    target = load_model(LLAMA)
    plain = drafter(target, None, _server("eagle3", model=EAGLE3))
    fp8 = drafter(target, None, _server("eagle3", model=EAGLE3, draft_lm_head_quantization="fp8"))
    assert plain is not None and fp8 is not None
    assert plain.weight_bytes - fp8.weight_bytes == pytest.approx(32000 * 4096)
