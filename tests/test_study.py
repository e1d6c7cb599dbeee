"""The study on the simulator backend: constraints, resume, restarts, budget, storage errors."""

from pathlib import Path

import optuna
import pytest

from tuner.config.space import load_space
from tuner.config.trial import LaunchContext
from tuner.errors import ConfigError
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.storage import BUDGET_ATTR, open_storage
from tuner.trial.backends import BackendOptions, backend_factory
from tuner.trial.runner import TrialRunner
from tuner.trial.scoring import CONSTRAINT_KEYS, TrialStatus


def _request(tmp_path: Path, trials: int = 6, **kw: object) -> OptimizeRequest:
    return OptimizeRequest(
        study="s", space=load_space(), backend="sim", trials=trials, studies_dir=tmp_path, **kw
    )  # type: ignore[arg-type]


def test_oom_trials_are_complete_with_constraints(tmp_path: Path) -> None:
    result = optimize(_request(tmp_path, trials=12, seed=3))
    study = optuna.load_study(study_name="s", storage=result.storage)
    trials = study.get_trials()
    assert len(trials) == 12
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:
        # Only the keyed constraints: a legacy list would make Optuna count them twice.
        assert list(t.constraints) == list(CONSTRAINT_KEYS)
        assert "constraints" not in t.system_attrs
        assert all(v == v and abs(v) < float("inf") for v in t.values)
    assert study.metric_names == ["output_tok_s", "p95_ttft_ms"]
    assert study.user_attrs[BUDGET_ATTR] == 12


def test_resume_adds_trials_and_keeps_the_space(tmp_path: Path) -> None:
    optimize(_request(tmp_path, trials=3))
    again = optimize(
        OptimizeRequest(study="s", space=None, backend="sim", trials=2, studies_dir=tmp_path)
    )
    assert again.trials == 5 and again.space == load_space()
    other = load_space().with_ttft_limit(123)
    with pytest.raises(ConfigError, match="different search space"):
        optimize(
            OptimizeRequest(study="s", space=other, backend="sim", trials=1, studies_dir=tmp_path)
        )


def test_predicted_oom_launches_nothing_and_request_changes_reuse_the_server(
    tmp_path: Path,
) -> None:
    space = load_space()
    starts: list[object] = []
    backend = backend_factory("sim")(space, BackendOptions(study="s"))
    original = backend.start

    def counting_start(server, context):  # type: ignore[no-untyped-def]
        starts.append(server)
        return original(server, context)

    backend.start = counting_start  # type: ignore[method-assign]
    runner = TrialRunner(backend, space.hardware, space.ttft_limit_ms)
    ctx = LaunchContext("s", 0, tmp_path)
    too_big = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.98, 2048, 0.2)
    out = runner.run(too_big, ctx, seed=1)
    assert out.status is TrialStatus.OOM_PREDICTED and starts == [] and not out.results
    fits = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.92, 2048, 0.2)
    first = runner.run(fits, ctx, seed=1)
    second = runner.run(fits.with_temperature(0.7), ctx, seed=2)
    assert first.restarted and not second.restarted and len(starts) == 1
    assert first.primary is not None and second.primary is not None
    assert second.primary.acceptance_rate < first.primary.acceptance_rate  # type: ignore[operator]
    runner.close()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("not a url", "invalid storage URL"),
        ("nosuchdb://x/y", "cannot open storage"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open storage"),
    ],
)
def test_bad_storage_urls(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        open_storage(url)
    assert "secret" not in str(info.value)


def test_unwritable_studies_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="not writable"):
        optimize(_request(blocker / "studies"))


def test_simulated_and_measured_trials_never_share_a_study(tmp_path: Path) -> None:
    optimize(_request(tmp_path, trials=1))
    with pytest.raises(ConfigError, match="holds simulated trials"):
        optimize(
            OptimizeRequest(
                study="s", space=None, backend="process", trials=1, studies_dir=tmp_path
            )
        )
