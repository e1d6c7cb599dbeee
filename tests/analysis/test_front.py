"""The Pareto front, once: Optuna's best_trials, feasible only, without "same as #N" repeats."""

from __future__ import annotations

import optuna
from optuna.distributions import IntDistribution

from tuner import serde
from tuner.analysis.confirmed import CONFIRMED_ATTR, Confirmed, Run
from tuner.analysis.picks import confirmation_order, feasible, pareto_front, ranked, recommend
from tuner.analysis.trials import points
from tuner.config.trial import ServerConfig, server_to_dict
from tuner.results import Source
from tuner.trial.scoring import CONSTRAINT_KEYS, TrialStatus

# (number, output tok/s, p95 TTFT ms, oom, duplicate of)
TRIALS = [
    (0, 60.0, 200.0, False, None),
    (1, 60.0, 200.0, False, 0),  # a repeat of #0: the same config, the same result
    (2, 50.0, 250.0, False, None),  # dominated by #0
    (3, 40.0, 150.0, False, None),  # the fastest to first token
    (4, 0.0, 5000.0, True, None),  # out of memory
    (5, 70.0, 900.0, False, None),  # over the TTFT limit: infeasible
]


def _study() -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for number, tok_s, ttft, oom, duplicate in TRIALS:
        server = ServerConfig("m", 1, 4096, 0.80 + number / 100, 2048)
        attrs = {
            "server": server_to_dict(server),
            "temperature": 0.2,
            "status": "OOM" if oom else "ok",
        }
        if duplicate is not None:
            attrs = {**attrs, "server": server_to_dict(ServerConfig("m", 1, 4096, 0.8, 2048))}
            attrs["duplicate_of"] = duplicate
        over = ttft - 500.0
        constraints = (-1.0, 1.0 if oom else -1.0, over)  # errors, oom, ttft_slo
        study.add_trial(
            optuna.trial.create_trial(
                values=[tok_s, ttft],
                params={"n": number},
                distributions={"n": IntDistribution(0, 10)},
                user_attrs=attrs,
                system_attrs={
                    f"constraints:{k}": v for k, v in zip(CONSTRAINT_KEYS, constraints, strict=True)
                },
            )
        )
    return study


def test_the_front_is_optunas_without_repeats() -> None:
    study = _study()
    assert {t.number for t in study.best_trials} == {0, 1, 3}  # Optuna keeps the repeat
    assert [r.number for r in pareto_front(study)] == [0, 3]  # fastest first, repeat gone
    assert {p.number for p in points(study) if p.on_front} == {0, 3}
    assert next(p for p in points(study) if p.number == 1).duplicate_of == 0
    assert [r.number for r in feasible(study)] == [0, 2, 3]


def test_picks_use_that_front_and_never_a_repeat() -> None:
    study = _study()
    assert [c.number for c in ranked(study)] == [0, 2, 3]
    assert [c.on_front for c in ranked(study)] == [True, False, True]
    best = recommend(study)
    assert best is not None and best.number == 0
    fastest = recommend(study, "min-ttft")
    assert fastest is not None and fastest.number == 3
    balanced = recommend(study, "balanced")
    assert balanced is not None and balanced.on_front  # #2, off the front, is never balanced
    # The recommendation's runner-up (#2, off the front) before the other picks' #3: the
    # recommendation is decided between the first two.
    assert [r.number for r in confirmation_order(study)] == [0, 2, 3]


def _confirm(study: optuna.Study, runs: dict[int, tuple[float, ...]]) -> None:
    stored = {
        str(n): serde.dump(
            Confirmed(n, Source.SIMULATED, tuple(Run(TrialStatus.OK, v, 200.0) for v in values))
        )
        for n, values in runs.items()
    }
    study.set_user_attr(CONFIRMED_ATTR, stored)


def test_a_confirmed_config_is_ranked_on_its_trial_and_its_runs_together() -> None:
    study = _study()
    # One confirmation run each: #2's (59) beats #0's (58), but #0 measured 60 in its trial
    # and #2 50, so every measurement of #0 together (59.0) beats #2's (54.5).
    _confirm(study, {0: (58.0,), 2: (59.0,)})
    cands = ranked(study)
    assert [c.number for c in cands] == [0, 2]
    assert [c.throughput for c in cands] == [58.0, 59.0]  # shown: the confirmation's alone
    assert [c.ranking_throughput for c in cands] == [59.0, 54.5]
    best = recommend(study, "max-throughput")
    assert best is not None and best.number == 0
    # Runs that separate the two beyond the trial's measurement decide.
    _confirm(study, {0: (58.0, 57.0, 58.0), 2: (63.0, 64.0, 63.0)})
    best = recommend(study, "max-throughput")
    assert best is not None and best.number == 2


def test_a_throttled_trial_does_not_count_towards_its_config_s_ranking() -> None:
    study = _study()
    first = study.trials[0]
    attrs = {**first.user_attrs, "gpu": {"throttled_pairs": 1}}
    throttled = optuna.create_study(directions=["maximize", "minimize"])
    throttled.add_trials(
        [
            optuna.trial.create_trial(
                values=first.values,
                params=first.params,
                distributions=first.distributions,
                user_attrs=attrs,
                system_attrs=first.system_attrs,
            ),
            *study.trials[1:],
        ]
    )
    _confirm(throttled, {0: (58.0,), 2: (59.0,)})
    cands = {c.number: c for c in ranked(throttled)}
    assert cands[0].record.throttled
    assert cands[0].ranking_throughput == 58.0  # its runs alone: the trial measured the GPUs
    assert cands[2].ranking_throughput == 54.5
