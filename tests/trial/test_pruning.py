"""A study in rounds on the simulator: losing trials end PRUNED, stored, never recommended.

Random sampling over no speculation, prompt lookup and a draft model at two levels and two
temperatures: the incumbent is the first trial; a config that cannot reach it over the whole
mix (measured pairs, then the forecast with its error band) stops there.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.trial.traffic_support import small_space
from tuner.analysis.picks import pareto_front, pick_candidate, recommend
from tuner.errors import ConfigError
from tuner.report.page import write_report
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.trial.record import TrialRecord, stored_space

SEARCH = {
    "draft": ["none", "ngram", "Qwen/Qwen2.5-0.5B-Instruct"],
    "num_speculative_tokens": {"low": 1, "high": 8},
    "max_num_batched_tokens": [2048, 1024],
}
WORKLOAD = {"prompt_set": "code", "concurrency": [1, 4], "requests": 8, "output_tokens": 64}


def _study(tmp_path: Path, rounds: bool) -> optuna.Study:
    space = small_space(tmp_path, search=SEARCH, workload={**WORKLOAD, "input_tokens": 256})
    request = OptimizeRequest(
        study="p",
        space=space,
        backend="sim",
        trials=12,
        studies_dir=tmp_path,
        sampler="random",
        confirm_top=0,
        rounds=rounds,
    )
    return optimize(request).handle


def test_a_trial_that_cannot_reach_the_incumbent_is_pruned_and_never_recommended(
    tmp_path: Path,
) -> None:
    study = _study(tmp_path, rounds=True)
    pruned = study.get_trials(states=(TrialState.PRUNED,))
    assert pruned, "a losing config of this space is pruned"
    # The one stopped soonest: the first trial of each method runs in full, so it need not be
    # the first pruned.
    first = min(pruned, key=lambda t: len(t.user_attrs["levels"]))
    record = TrialRecord.from_trial(first)
    assert record is not None and record.state is TrialState.PRUNED
    # The reason, and what it measured, pair by pair, with how much and what interval.
    assert record.pruned is not None and "cannot reach trial" in record.pruned
    # Stopped short: fewer requests than its four pairs (two levels x two temperatures) take.
    assert 1 <= len(record.levels) <= 4
    assert sum(level["requests"] for level in record.levels) < 4 * 8  # WORKLOAD's requests
    for level in record.levels:
        assert level["requests"] >= 4
        low, mid, high = level["tok_s_interval"]
        assert low <= mid <= high
        assert level["stopped"] in ("below the incumbent", "tight", "ceiling")
    # The samplers read a PRUNED trial: no values, no constraints to rank it by.
    assert first.values is None and not first.constraints
    # Never recommended: not by a pick, not by number, not on the front.
    chosen = recommend(study)
    assert chosen is not None and chosen.record.state is TrialState.COMPLETE
    assert {r.number for r in pareto_front(study)}.isdisjoint(t.number for t in pruned)
    with pytest.raises(ConfigError, match="did not complete"):
        pick_candidate(study, str(first.number))
    # Every method tried has a trial measured in full: the report compares the best of each.
    stored = [TrialRecord.from_trial(t) for t in study.get_trials()]
    tried = {str(r.server.method) for r in stored if r is not None}
    full = {
        str(r.server.method) for r in stored if r is not None and r.state is TrialState.COMPLETE
    }
    assert full == tried
    # The report counts them beside the other ends.
    space = stored_space(study)
    assert space is not None
    page = write_report(study, space, tmp_path / "report").html.read_text()
    assert f"OOM, {len(pruned)} pruned, 0 failed" in page
    # A sampler that proposes the pruned config again gets it pruned again, not rerun.
    again = [t for t in pruned if t.user_attrs.get("duplicate_of") == first.number]
    assert all(t.state is TrialState.PRUNED for t in again)


def test_fixed_count_measures_every_pair_of_every_trial_in_full(tmp_path: Path) -> None:
    study = _study(tmp_path, rounds=False)
    trials = study.get_trials()
    assert all(t.state is TrialState.COMPLETE for t in trials)
    levels = [level for t in trials for level in t.user_attrs["levels"]]
    assert len(levels) == 4 * len(trials)
    assert {(level["requests"], level["stopped"]) for level in levels} == {(8, "fixed count")}
