"""The trial record: written once, read back with enums, and older studies still read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner.analysis.trials import level_tok_s
from tuner.bench.summary import gpu_summary, level_summary
from tuner.config.space import load_space
from tuner.config.trial import (
    ClientConfig,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    TrialConfig,
    server_from_dict,
    server_to_dict,
)
from tuner.config.vllm_runner import ModelRunner, RunnerForecast
from tuner.config.workload import Condition
from tuner.errors import ConfigError, FailureKind, MeasurementError, StartupFailure
from tuner.export.vllm import export
from tuner.launch.served import ServedFacts
from tuner.results import GpuWindow, RequestRecord, Source, TrialResult
from tuner.trial.model_runner import model_runner, runner_note
from tuner.trial.record import (
    RECORD_ATTRS,
    SPACE_ATTR,
    TrialRecord,
    records,
)
from tuner.trial.scoring import LEGACY_CONSTRAINT_KEYS, TrialStatus

DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
SERVER = ServerConfig(
    "Qwen/Qwen2.5-32B-Instruct-AWQ",
    2,
    8192,
    0.9,
    2048,
    SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, DRAFT),
)
SUMMARY = {"concurrency": 1, "output_tok_s": 55.0, "acceptance_rate": 0.7, "ttft_p95_ms": 230.0}


def _frozen(
    attrs: dict[str, Any],
    *,
    number: int = 0,
    state: TrialState = TrialState.COMPLETE,
    values: list[float] | None = None,
    constraints: tuple[float, float] | None = (-1.0, -270.0),
) -> optuna.trial.FrozenTrial:
    system = (
        {}
        if constraints is None
        else {
            f"constraints:{k}": v for k, v in zip(LEGACY_CONSTRAINT_KEYS, constraints, strict=True)
        }
    )
    trial = optuna.trial.create_trial(
        state=state,
        values=values if values is not None or state is not TrialState.COMPLETE else [55.0, 230.0],
        params={"draft": DRAFT},
        distributions={"draft": CategoricalDistribution([DRAFT])},
        user_attrs=attrs,
        system_attrs=system,
    )
    trial.number = number
    return trial


def test_a_record_reads_back_what_it_wrote_with_its_enums() -> None:
    written = TrialRecord(
        number=0,
        state=TrialState.COMPLETE,
        server=SERVER,
        trial_temperature=0.2,
        status=TrialStatus.OK,
        source=Source.SIMULATED,
        values=(55.0, 230.0),
        constraints={"oom": -1.0, "ttft_slo": -270.0},
        restarted=True,
        memory={"kv_cache_gib": float("inf"), "fits": True},
        summary=SUMMARY,
        levels=(SUMMARY,),
        worker="host/0",
    )
    attrs = written.to_attrs()
    assert set(attrs) <= set(RECORD_ATTRS)
    assert attrs["memory"]["kv_cache_gib"] is None  # JSON has no inf
    assert "failure" not in attrs and "duplicate_of" not in attrs  # absent, not None
    read = TrialRecord.from_trial(_frozen(attrs))
    assert read is not None
    assert read.status is TrialStatus.OK and read.source is Source.SIMULATED
    assert read.server == SERVER and read.server.speculative is not None
    assert read.server.speculative.method is SpecMethod.DRAFT_MODEL
    assert (read.throughput, read.p95_ttft_ms, read.acceptance_rate) == (55.0, 230.0, 0.7)
    assert read.feasible and read.measured and not read.oom and read.draft == DRAFT
    assert level_tok_s(read.levels, read.steps) == ((1, 55.0),) and read.worker == "host/0"


def _pair(tokens: int, concurrency: int, temperature: float, weight: float) -> dict[str, Any]:
    """One measured pair as a record stores it: one request of ``tokens`` in one second."""
    request = RequestRecord(0.0, first_token=0.1, end=1.0, completion_tokens=tokens)
    result = TrialResult(Source.MEASURED, concurrency, 1.0, (request,))
    return level_summary(result, Condition(concurrency, temperature, weight))


def test_level_throughput_weighs_each_levels_temperatures() -> None:
    cold = _pair(100, 1, 0.0, 0.35)  # 100 tok/s at concurrency 1
    hot = _pair(50, 1, 1.0, 0.15)  # 50 tok/s at concurrency 1
    busy = _pair(300, 8, 0.0, 0.5)
    levels = level_tok_s([cold, hot, busy])
    # approx in place of the floats: == compares within its tolerance.
    assert levels == (  # type: ignore[comparison-overlap]
        (1, pytest.approx(0.7 * 100 + 0.3 * 50)),
        (8, pytest.approx(300.0)),
    )
    assert level_tok_s([cold, hot, busy], steps=((2.0, True),)) == ()  # goodput: rates


def test_oom_failed_and_repeated_records() -> None:
    config = TrialConfig(SERVER, ClientConfig(0.2, load_space().workload))
    crash = StartupFailure(FailureKind.CRASH, "engine core died", 1, "x" * 5000)
    failed = TrialRecord.failed(3, config, crash, Source.MEASURED, "h/1")
    assert failed.state is TrialState.FAIL and failed.status is TrialStatus.FAILED
    assert failed.failure == str(crash) and len(failed.to_attrs()["log_tail"]) == 4000
    plain = TrialRecord.failed(4, config, MeasurementError("no request succeeded"), Source.MEASURED)
    assert plain.failure == "no request succeeded" and plain.log_tail == ""
    # A failed trial keeps its config: the live table and the dashboard show it.
    assert TrialRecord.from_trial(
        _frozen(plain.to_attrs(), state=TrialState.FAIL, constraints=None)
    ) == TrialRecord(
        number=0,
        state=TrialState.FAIL,
        server=SERVER,
        trial_temperature=0.2,
        status=TrialStatus.FAILED,
        source=Source.MEASURED,
        failure="no request succeeded",
        params={"draft": DRAFT},
        temperature_mix=config.client.workload.temperature_mix,
    )
    oom = TrialRecord.from_trial(
        _frozen({**plain.to_attrs(), "status": "OOM"}, values=[0.0, 5000.0], constraints=(1, 1))
    )
    assert oom is not None and oom.oom and not oom.feasible and not oom.measured
    assert oom.throughput is None and oom.objective == (0.0, 5000.0)
    reused = oom.reused_by(9, "h/2")
    assert (reused.number, reused.duplicate_of, reused.worker) == (9, 0, "h/2")
    assert reused.reused_by(12).duplicate_of == 0  # a repeat of a repeat names the original
    with pytest.raises(ValueError, match="trial 4 did not complete"):
        _ = plain.objective


# What spectune wrote before TrialRecord, key for key: statuses as plain strings, no status on
# an early OK trial, no source, a FAIL trial with nothing but its failure.
OLD_OK: dict[str, Any] = {
    "worker": "h/0",
    "server": server_to_dict(SERVER),
    "temperature": 0.2,
    "restarted": True,
    "memory": {"fits": True},
    "summary": SUMMARY,
    "levels": [SUMMARY],
}
OLD_DUPLICATE: dict[str, Any] = {
    **OLD_OK,
    "status": "ok",
    "source": "simulated",
    "duplicate_of": 0,
    "server": {**server_to_dict(SERVER), "speculative": {**server_to_dict(SERVER)["speculative"]}},
}
OLD_FAILED: dict[str, Any] = {
    "worker": "h/0",
    "status": "failed",
    "failure": "engine died",
    "log_tail": "boom",
}


def test_old_attributes_still_read() -> None:
    ok = TrialRecord.from_trial(_frozen(OLD_OK))
    assert ok is not None and ok.status is TrialStatus.OK and ok.source is Source.MEASURED
    assert ok.server.method is SpecMethod.DRAFT_MODEL
    nulls = TrialRecord.from_trial(_frozen({**OLD_OK, "memory": None, "levels": None}))
    assert nulls is not None and nulls.memory == {} and nulls.levels == ()
    duplicate = TrialRecord.from_trial(_frozen(OLD_DUPLICATE, number=1))
    assert duplicate is not None and duplicate.duplicate_of == 0
    # A failure recorded without its config is no record; the trial itself is still there.
    assert TrialRecord.from_trial(_frozen(OLD_FAILED, state=TrialState.FAIL)) is None
    assert records([_frozen(OLD_OK), _frozen(OLD_FAILED, state=TrialState.FAIL)]) == [ok]


# Every field as main ed48bf2 wrote it (TrialRecord.to_attrs before the record was a pydantic
# dataclass), read from the file as a study database hands it back.
STORED_ED48BF2 = Path(__file__).parent / "fixtures" / "trial_attrs_ed48bf2.json"


def test_a_record_stored_before_the_pydantic_model_loads_with_every_field() -> None:
    stored = json.loads(STORED_ED48BF2.read_text())
    read = TrialRecord.from_trial(_frozen(stored, number=7, values=[812.5, 1450.0]))
    assert read is not None and read.number == 7 and read.values == (812.5, 1450.0)
    assert read.status is TrialStatus.OVER_TTFT and read.source is Source.SIMULATED
    spec = read.server.speculative
    assert spec is not None and spec.method is SpecMethod.NGRAM
    assert spec.k_by_batch_size == ((1, 8, 4), (9, 64, 2)) and spec.k_at(32) == 2
    assert read.server.extra_flags == (("enforce-eager", True),)
    assert read.memory == {"kv_cache_gib": None, "fits": True} and read.duplicate_of == 3
    assert read.levels[0]["tok_s_interval"] == [790.0, 812.5, 835.0]
    assert read.temperature_mix == ((0.5, 1.0),) and read.steps == ((2.0, True), (4.0, False))
    assert read.served is not None and read.served.warnings == ("w",)
    assert read.runner == RunnerForecast(ModelRunner.V1, ("speculative method ngram",))
    assert (read.worker, read.failed_share, read.pruned) == ("gpu-host/1", 0.0, None)
    # Written again, it is the same record, in the same form (the runner now names an empty
    # off_by_default rather than leaving it out, the speculative config the 0.33 settings it
    # did not have, at their defaults).
    rewritten = read.to_attrs()
    newer = {"draft_lm_head_quantization": "none", "xpress_topc": None}
    server = {**stored["server"], "speculative": {**stored["server"]["speculative"], **newer}}
    runner = {**stored["runner"], "off_by_default": ""}
    assert rewritten == {**stored, "runner": runner, "server": server}
    assert TrialRecord.from_trial(_frozen(rewritten, number=7, values=[812.5, 1450.0])) == read


def test_a_study_written_by_the_previous_version_opens_and_exports(tmp_path: Path) -> None:
    space = load_space()
    study = optuna.create_study(
        study_name="old",
        storage=f"sqlite:///{tmp_path / 'old.db'}",
        directions=["maximize", "minimize"],
    )
    study.set_user_attr(SPACE_ATTR, space.source)
    study.set_user_attr("source", "measured")
    for number, attrs in enumerate([OLD_OK, OLD_DUPLICATE, OLD_FAILED]):
        frozen = _frozen(attrs, number=number)
        if attrs is OLD_FAILED:
            frozen = _frozen(attrs, number=number, state=TrialState.FAIL, constraints=None)
        study.add_trial(frozen)
    exported = export(study, space, "vllm")
    assert exported.provenance.trial == 0  # the repeat is not a config of its own
    assert "backend not recorded" in exported.text.splitlines()[1]
    assert "draft_model" in exported.text and DRAFT in exported.text


def test_spec_method_names_become_members_and_unknown_names_are_refused_there() -> None:
    stored = server_to_dict(SERVER)
    for name, member in (("ngram", SpecMethod.NGRAM), ("eagle", SpecMethod.EAGLE)):
        spec = {"method": name, "num_speculative_tokens": 3, "model": "head"}
        read = server_from_dict({**stored, "speculative": spec}).speculative
        assert read is not None and read.method is member
    medusa = {"method": "medusa", "num_speculative_tokens": 3, "model": "head"}
    with pytest.raises(ConfigError, match="unknown speculative method 'medusa': use one of"):
        server_from_dict({**stored, "speculative": medusa})
    assert ServerConfig("m", 1, 512, 0.9, 512).method is SpecMethod.NONE
    assert (
        ServerConfig("m", 1, 512, 0.9, 512, SpeculativeConfig(SpecMethod.NGRAM, 3)).draft == "ngram"
    )


def test_the_runner_is_stored_and_the_logged_one_wins() -> None:
    predicted = RunnerForecast(ModelRunner.V1, ("heterogeneous-vocabulary draft models",))
    record = TrialRecord(
        number=0,
        state=TrialState.COMPLETE,
        server=SERVER,
        trial_temperature=0.2,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        values=(55.0, 230.0),
        runner=predicted,
    )
    read = TrialRecord.from_trial(_frozen(record.to_attrs()))
    assert read is not None and read.runner == predicted and model_runner(read) == "V1"
    assert runner_note(read) == (
        "V1 (Model Runner V2 does not yet support heterogeneous-vocabulary draft models) "
        "(predicted from vLLM's rules)"
    )
    logged = replace(read, served=ServedFacts(model_runner="V1", runner_reason="x"))
    assert runner_note(logged) == "V1 (logged by vLLM: x)"
    # Earlier studies stored no runner: the table shows a dash, the export says so.
    attrs = record.to_attrs()
    del attrs["runner"]
    old = TrialRecord.from_trial(_frozen(attrs))
    assert old is not None and model_runner(old) == "-" and runner_note(old) == "not recorded"


def test_a_record_keeps_its_server_s_start_up_seconds() -> None:
    started = TrialRecord(
        number=4,
        state=TrialState.COMPLETE,
        server=SERVER,
        trial_temperature=0.0,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        values=(55.0, 230.0),
        restarted=True,
        startup_s=212.5,
    )
    attrs = started.to_attrs()
    assert attrs["startup_s"] == 212.5
    read = TrialRecord.from_trial(_frozen(attrs, number=4))
    assert read is not None and read.startup_s == 212.5 and read.restarted
    # A repeat ran on no server of its own: it took no start-up, and stores none.
    repeat = started.reused_by(5)
    assert repeat.startup_s is None and "startup_s" not in repeat.to_attrs()
    # Stored before start-ups were timed: it reads as one that timed none.
    old = TrialRecord.from_trial(_frozen(json.loads(STORED_ED48BF2.read_text())))
    assert old is not None and old.startup_s is None


def _measured(tokens: int, energy_j: float, throttled: dict[str, float]) -> TrialResult:
    request = RequestRecord(0.0, first_token=0.1, end=2.0, completion_tokens=tokens)
    window = GpuWindow(2.0, 4, energy_j, "counter", energy_j / 2.0, 2400.0, 10501.0, 70.0)
    return TrialResult(
        Source.MEASURED, 1, 2.0, (request,), gpu=replace(window, throttled_s=throttled)
    )


def test_a_trial_stores_what_its_gpus_did_through_all_its_pairs_and_old_ones_have_none() -> None:
    results = [_measured(100, 500.0, {}), _measured(300, 700.0, {"thermal": 0.5})]
    gpu = gpu_summary(results)
    assert gpu is not None
    assert gpu["joules_per_token"] == pytest.approx(1200.0 / 400)
    assert gpu["throttled_s"] == {"thermal": 0.5}
    assert gpu_summary([*results, replace(results[0], gpu=None)]) is None  # a pair unread
    levels = tuple(level_summary(r) for r in results)
    assert levels[1]["gpu_throttled_s"] == {"thermal": 0.5}
    assert levels[0]["joules_per_token"] == pytest.approx(5.0)
    record = TrialRecord(
        number=2,
        state=TrialState.COMPLETE,
        server=SERVER,
        trial_temperature=0.0,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        values=(55.0, 230.0),
        levels=levels,
        gpu=gpu,
    )
    read = TrialRecord.from_trial(_frozen(record.to_attrs(), number=2))
    assert read is not None and read.gpu == gpu
    assert read.tokens_per_joule == pytest.approx(400 / 1200.0)
    old = TrialRecord.from_trial(_frozen(json.loads(STORED_ED48BF2.read_text())))
    assert old is not None and old.gpu is None and old.tokens_per_joule is None
