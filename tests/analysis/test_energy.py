"""Energy as a pick: the most tokens per joule, the front of throughput against joules per
token, and the sentence on what the fastest config costs against the most frugal."""

from __future__ import annotations

from dataclasses import replace

from optuna.trial import TrialState

from tuner.analysis.energy import energy_cost, energy_front, energy_note
from tuner.analysis.picks import Candidate, choose
from tuner.cli.render import record_row
from tuner.config.preference import Preference
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.results import Source
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

SERVER = ServerConfig(
    "Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048, SpeculativeConfig(SpecMethod.NGRAM, 3)
)
RECORD = TrialRecord(
    number=0,
    state=TrialState.COMPLETE,
    server=SERVER,
    trial_temperature=0.2,
    status=TrialStatus.OK,
    source=Source.MEASURED,
    values=(100.0, 200.0),
    constraints={"oom": -1.0, "ttft_slo": -1.0},
)


def _candidate(number: int, tok_s: float, joules: float | None) -> Candidate:
    gpu = None if joules is None else {"joules_per_token": joules, "tokens_per_joule": 1 / joules}
    return Candidate(replace(RECORD, number=number, values=(tok_s, 200.0), gpu=gpu))


def test_min_energy_takes_the_most_tokens_per_joule_among_those_read() -> None:
    cands = [_candidate(0, 120.0, 0.6), _candidate(1, 90.0, 0.3), _candidate(2, 80.0, None)]
    assert choose(cands, "max-throughput") is cands[0]
    assert choose(cands, "min-energy") is cands[1]
    assert choose([cands[2]], "min-energy") is None  # nothing read: nothing to rank by


def test_the_front_keeps_what_nothing_beats_on_both_fastest_first() -> None:
    fast, frugal = _candidate(0, 120.0, 0.6), _candidate(1, 90.0, 0.3)
    beaten = _candidate(2, 85.0, 0.4)  # slower and hungrier than #1
    assert energy_front([beaten, frugal, fast, _candidate(3, 200.0, None)]) == [fast, frugal]


def test_the_cost_sentence_names_both_and_the_price() -> None:
    cands = [_candidate(0, 120.0, 0.6), _candidate(1, 90.0, 0.3)]
    assert energy_cost(cands) == (
        "The fastest config, trial 0 (120.0 tok/s, 0.600 J per output token), spends 100% more "
        "energy per token than the most frugal, trial 1 (0.300 J per token, 90.0 tok/s, 25% "
        "slower)."
    )
    assert energy_cost(cands[:1]) == (
        "The fastest config, trial 0 (120.0 tok/s), is also the most frugal: 0.600 J per "
        "output token."
    )
    assert energy_cost([_candidate(0, 120.0, None)]) is None


def test_an_energy_preference_says_when_energy_was_not_read() -> None:
    unread = [_candidate(0, 120.0, None), _candidate(1, 90.0, None)]
    note = energy_note(Preference.ENERGY, unread)
    assert note is not None and "no feasible trial had its GPU energy read" in note
    assert "the recommendation is the fastest config" in note
    partly = energy_note(Preference.BOTH, [_candidate(0, 120.0, 0.5), unread[1]])
    assert partly is not None and "read on 1 of 2 feasible configs" in partly
    assert energy_note(Preference.THROUGHPUT, unread) is None
    assert energy_note(Preference.ENERGY, [_candidate(0, 120.0, 0.5)]) is None


def test_the_live_row_shows_tokens_per_joule_and_a_throttled_trial() -> None:
    row = record_row(replace(RECORD, gpu={"tokens_per_joule": 3.456, "throttled_pairs": 1}))
    assert row[8] == "3.46" and row[-1] == "ok hot"
    assert record_row(RECORD)[8] == "-" and record_row(RECORD)[-1] == "ok"
