"""Records a library keeps: every stored or printed record is written and read by pydantic from its
own dataclass (:mod:`tuner.serde`), never by a hand-written ``to_dict`` beside it, and what
main 4bc06cf stored, before that was so, still loads (``fixtures/records_4bc06cf``: how they were
made is in its README).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import json_to_distribution
from optuna.trial import TrialState

import tuner
from tuner import serde
from tuner.analysis.confirmed import Confirmed, Interval, Run, load_confirmed
from tuner.analysis.k_table import KTableVerdict, stored_verdict
from tuner.config.space import space_from_dict
from tuner.export.vllm import export
from tuner.results import Source
from tuner.search.twin_steer import stored_twin
from tuner.sim.twin.fit import FittedTwin
from tuner.trial.race import incumbent_among
from tuner.trial.record import TrialRecord, stored_run
from tuner.trial.rounds import PairInterval
from tuner.trial.run_facts import RunFacts
from tuner.trial.scoring import TrialStatus

ROOT = Path(tuner.__file__).parent
STORED = Path(__file__).parent / "fixtures" / "records_4bc06cf"
# What a record once wrote by hand; pydantic writes and reads them now.
_HAND_WRITTEN = frozenset({"to_dict", "from_dict", "to_json", "from_json"})


def _stored(name: str) -> Any:
    return json.loads((STORED / name).read_text())


def test_no_record_writes_or_reads_itself_by_hand() -> None:
    found = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}"
        for path in sorted(ROOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in _HAND_WRITTEN
    ]
    assert found == [], "use tuner.serde (pydantic) instead of: " + ", ".join(found)


def test_a_confirmation_stored_by_4bc06cf_loads_and_is_written_again_alike() -> None:
    stored = _stored("confirmed.json")
    confirmed = serde.load(Confirmed, stored)
    assert confirmed.trial == 0 and confirmed.source is Source.SIMULATED
    assert len(confirmed.runs) == 2 and confirmed.stable
    first = confirmed.runs[0]
    assert first.status is TrialStatus.OK and first.throughput == stored["runs"][0]["output_tok_s"]
    assert [c for c, _ in first.levels] == [1, 8, 32]
    assert first.p95_ttft_bounds is not None and first.p95_ttft_bounds[1] is None  # too few
    assert confirmed.throughput is not None and confirmed.throughput.n == 2
    assert confirmed.throughput.mean == pytest.approx(stored["output_tok_s"]["mean"])
    assert serde.dump(confirmed) == stored


def test_a_run_and_intervals_stored_by_4bc06cf_load() -> None:
    run = serde.load(Run, _stored("run.json"))
    assert run.ok and run.acceptance_rate is not None and 0 < run.acceptance_rate < 1
    assert serde.dump(run) == _stored("run.json")
    stored = _stored("interval.json")
    spread = serde.load(Interval, stored)
    assert spread.n == 2 and spread.mean == stored["mean"]
    assert (spread.low, spread.high) == pytest.approx(stored["ci95"])
    single = serde.load(Interval, _stored("interval_single.json"))
    assert single == Interval(61.5, None, 1) and single.format() == "61.5 (n=1)"
    assert serde.dump(single) == _stored("interval_single.json")


def test_a_k_table_verdict_stored_by_4bc06cf_loads() -> None:
    stored = _stored("k_table.json")
    verdict = serde.load(KTableVerdict, stored)
    assert verdict.table == ((1, 8, 4), (9, 64, 2)) and verdict.spelled == "[[1, 8, 4], [9, 64, 2]]"
    assert verdict.source is Source.SIMULATED and len(verdict.runs) == 2
    assert verdict.wins and stored["wins"]
    assert serde.dump(verdict) == stored


def test_run_facts_stored_by_4bc06cf_load() -> None:
    sim = serde.load(RunFacts, _stored("run_facts_sim.json"))
    assert sim == RunFacts("sim", "v0.32.0")
    docker = serde.load(RunFacts, _stored("run_facts_docker.json"))
    assert docker.image == "vllm/vllm-openai:v0.32.0"
    assert docker.gpus is not None and docker.gpus["gpu_count"] == 2
    assert serde.dump(docker) == _stored("run_facts_docker.json")


def test_a_fitted_twin_stored_by_4bc06cf_loads() -> None:
    stored = _stored("fitted_twin.json")
    twin = serde.load(FittedTwin, stored)
    assert twin.observations == 3 and twin.margin_gib == stored["margin_gib"]
    assert twin.params.decode == stored["params"]["decode"]
    shift = twin.params.shift("ngram", "code")
    assert shift.logit == pytest.approx(0.339, abs=1e-3)
    assert len(twin.counters) == len(stored["counters"]) > 0
    (draft, prompt_set, temperature), counts = next(iter(twin.counters.items()))
    assert prompt_set == "code" and temperature in (0.2, 0.8) and counts.k >= 1
    accepted = twin.measured_accepted(draft, prompt_set, temperature, 1)
    assert accepted is not None and 0 < accepted.mid <= 1
    assert serde.dump(twin) == stored


def test_pair_intervals_stored_by_4bc06cf_load() -> None:
    stored = _stored("pair_interval.json")
    bounded = serde.load(PairInterval, stored)
    assert bounded.low < bounded.mid < bounded.high and bounded.half_share < 0.05
    unbounded = serde.load(PairInterval, _stored("pair_interval_unbounded.json"))
    assert unbounded == PairInterval(0.0, 12.5, math.inf) and unbounded.half_share == math.inf
    assert [serde.dump(bounded), serde.dump(unbounded)] == [stored, [0.0, 12.5, None]]


def _study_4bc06cf() -> optuna.Study:
    """The sim study 4bc06cf ran (optimize --rounds, 3 trials, one confirmed), as its
    database hands its attributes back."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    for key, value in _stored("study_attrs.json").items():
        study.set_user_attr(key, value)
    for row in _stored("trial_attrs.json"):
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState[row["state"]],
                values=row["values"],
                params=row["params"],
                distributions={
                    name: json_to_distribution(text) for name, text in row["distributions"].items()
                },
                user_attrs=row["attrs"],
                system_attrs={f"constraints:{k}": v for k, v in row["constraints"].items()},
            )
        )
    return study


def test_a_sim_study_written_by_4bc06cf_opens_and_exports() -> None:
    study = _study_4bc06cf()
    space = space_from_dict(study.user_attrs["space"], origin="the 4bc06cf study")
    assert stored_run(study) == RunFacts("sim", "v0.32.0")
    assert stored_verdict(study) is None  # its table was not run
    ((number, confirmed),) = load_confirmed(study).items()
    assert number == 0 and confirmed.source is Source.SIMULATED
    twin = stored_twin(study)
    assert twin is not None and twin.observations == 3
    found = [TrialRecord.from_trial(t) for t in study.trials]
    assert all(r is not None and r.measured for r in found)
    incumbent = incumbent_among(r for r in found if r is not None)  # its pairs' stored bounds
    assert incumbent is not None and all(p.low <= p.mid <= p.high for p in incumbent.pairs)
    exported = export(study, space, "json")
    data = json.loads(exported.text)["provenance"]
    assert data["trial"] == 0 and data["backend"] == "sim" and data["confirmed"]
    assert data["runs"] == 2 and data["output_tok_s"] == pytest.approx(confirmed.throughput.mean)  # type: ignore[union-attr]
