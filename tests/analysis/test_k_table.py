"""The per-batch-size K table runs as its own config and is exported only where it won."""

from __future__ import annotations

import json

import yaml

from tests.testbed.results import StudyCopy, judge_table
from tuner.analysis.k_table import planned_table, stored_verdict
from tuner.analysis.picks import DEFAULT_PICK, pick_candidate
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.export.vllm import export
from tuner.results import Endpoint, Source
from tuner.study.confirm import confirm_k_table
from tuner.trial.backends import Backend, BackendOptions, backend_factory


def _header(text: str) -> list[str]:
    return [line[2:] for line in text.splitlines() if line.startswith("# ")]


def _spec(text: str) -> dict[str, object]:
    spec: dict[str, object] = yaml.safe_load(text)["speculative-config"]
    return spec


def test_a_table_never_run_is_not_exported(levels: StudyCopy) -> None:
    study, space = levels.open()
    exported = export(study, space, "vllm")
    assert exported.batch_size_table == ()
    assert "num_speculative_tokens_per_batch_size" not in _spec(exported.text)
    assert any("was never run as one config" in line for line in _header(exported.text))


def test_a_table_that_lost_leaves_the_fixed_k(levels: StudyCopy) -> None:
    study, space = levels.open()
    verdict = judge_table(study, space, wins=False)
    exported = export(study, space, "compose")
    command = yaml.safe_load(exported.text)["services"]["vllm"]["command"]
    spec = json.loads(command[command.index("--speculative-config") + 1])
    assert "num_speculative_tokens_per_batch_size" not in spec and exported.batch_size_table == ()
    spelled = json.dumps([list(entry) for entry in verdict.table])
    assert any(f"K table {spelled} lost" in line for line in _header(exported.text))


def test_a_table_that_won_is_exported_and_says_so(levels: StudyCopy) -> None:
    study, space = levels.open()
    verdict = judge_table(study, space, wins=True)
    exported = export(study, space, "vllm")
    assert exported.batch_size_table == verdict.table
    table = _spec(exported.text)["num_speculative_tokens_per_batch_size"]
    assert table == [list(entry) for entry in verdict.table]
    assert any("won as its own config" in line for line in _header(exported.text))


def test_a_verdict_on_another_config_is_not_this_ones(levels: StudyCopy) -> None:
    study, space = levels.open()
    verdict = judge_table(study, space, wins=True)
    other = next(t.number for t in study.trials if t.number != verdict.trial)
    exported = export(study, space, "vllm", pick=str(other))
    assert exported.batch_size_table == ()


class _Counting:
    """The simulator, remembering every server it was asked to start."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.name, self.source = inner, inner.name, inner.source
        self.started: list[ServerConfig] = []

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.started.append(server)
        return self.inner.start(server, context)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_the_table_runs_as_its_own_config_and_the_export_follows_its_verdict(
    levels: StudyCopy,
) -> None:
    study, space = levels.open()
    _, table = planned_table(study, space, pick_candidate(study, DEFAULT_PICK))
    backend = _Counting(backend_factory("sim")(space, BackendOptions(study="levels")))
    verdict = confirm_k_table(study, space, backend, 2, log_dir=levels.folder / "logs")  # type: ignore[arg-type]
    assert verdict is not None and verdict.table == table and len(verdict.runs) == 2
    assert verdict.source is Source.SIMULATED
    # Each run started a server of its own that switches K by batch size, largest K on top.
    assert len(backend.started) == 2
    for server in backend.started:
        assert server.speculative is not None and server.speculative.k_by_batch_size == table
        assert server.k == max(k for *_, k in table)
    assert stored_verdict(study) == verdict
    assert all(run.ok and run.levels for run in verdict.runs)
    exported = export(study, space, "vllm")
    assert exported.batch_size_table == (table if verdict.wins else ())
