"""The driver's loop: ask Optuna for trials, run them in slots, write what they return.

Only the driver writes the study, so SQLite is enough. Trials are asked for while a slot is
idle and the study's budget allows (:class:`~tuner.study.storage.BudgetedStorage` refuses
past it), so the budget is exact however many run at once; a FAIL does not use it up, so a
failed trial is replaced, as with several workers.

A trial whose config a slot is running already (samplers repeat points of a discrete space)
waits for that trial and records its result ("same as #N"), as a worker does
(:mod:`tuner.study.claims`); if that trial fails, the waiting one runs the config itself.

Faults: a slot whose actor dies (its node was lost, its process killed) fails its trial, which
Optuna's retry copies once (the stale-trial retry, :class:`~tuner.study.storage.RetryOwnRecord`)
for the next idle slot, on another node. Ctrl-C or SIGTERM (which the CLI turns into a
KeyboardInterrupt) cancels every slot: each stops its servers, and the running trials end FAIL.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner import serde
from tuner.catalog.gpus import Hardware
from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.errors import ConfigError, LaunchError, SpectuneError
from tuner.launch.exit_hooks import signals_held
from tuner.study.claims import ended_same_config, same_params
from tuner.study.cluster.connect import connect
from tuner.study.cluster.nodes import detect_with_nvml, read_nodes, require_matching
from tuner.study.cluster.pool import Slot, SlotPool
from tuner.study.cluster.slot import SlotResult
from tuner.study.incumbent import race_for
from tuner.study.lifecycle import OnTrial, TrialEnds
from tuner.study.loop import release_statements
from tuner.study.storage import BudgetExhausted, RetryOwnRecord
from tuner.trial.backends import BackendOptions
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.optuna_private import rdb_of, trial_id
from tuner.trial.record import RUN_ATTR, TrialRecord

__all__ = ["RayOptions", "check_cluster", "check_ray_options", "run_on_ray"]

_POLL_S = 1.0  # how often the driver looks up from waiting (a Ctrl-C lands within it)


@dataclass(frozen=True)
class RayOptions:
    """Where the cluster is and how much of it one study uses."""

    address: str  # ray://HEAD:10001, HEAD:6379, or auto
    parallel: int = 1  # trials at once
    start_timeout_s: float = 300.0  # a slot must be placed on its node and ready by then


def check_ray_options(options: RayOptions, workers: int = 1) -> None:
    """Refuses bad ``--ray``/``--parallel`` values before anything connects."""
    if workers != 1:
        raise ConfigError(f"--workers {workers} with --ray: use --parallel {workers} instead")
    if not options.address.strip():
        raise ConfigError("--ray '': give the cluster, e.g. ray://HEAD:10001 or auto")
    if options.parallel < 1:
        raise ConfigError(f"--parallel {options.parallel}: run at least 1 trial at a time")


def check_cluster(ray_options: RayOptions, hardware: Hardware) -> None:
    """Refuses a study whose hardware no node of the cluster has, before it is stored.

    Raises:
        ConfigError: Ray is missing, the cluster cannot be reached, or no node matches.
    """
    ray = connect(ray_options.address)
    require_matching(read_nodes(ray.nodes(), detect_with_nvml(ray)), hardware, ray_options.address)


@dataclass(frozen=True)
class _Job:
    trial: optuna.Trial
    config: TrialConfig
    slot: Slot


def run_on_ray(
    study: optuna.Study,
    space: SearchSpace,
    ray_options: RayOptions,
    backend: str,
    options: BackendOptions,
    seed: int,
    on_trial: OnTrial | None = None,
    rounds: bool = False,
) -> None:
    """Runs trials on the cluster until the study's budget is used up; with ``rounds``, each
    pair in rounds against the incumbent, a losing trial pruned (as on one host).

    Raises:
        ConfigError: Ray is missing, the cluster cannot be reached, no node has the study's
            hardware, or a slot cannot start there.
        SpectuneError: trials kept failing, or every matching node was lost.
    """
    check_ray_options(ray_options)
    ray = connect(ray_options.address)
    nodes = read_nodes(ray.nodes(), detect_with_nvml(ray))
    matching = require_matching(nodes, space.hardware, ray_options.address)
    pool = SlotPool(ray, space, backend, options, matching, ray_options.start_timeout_s)
    loop = _Loop(ray, study, space, pool, seed, on_trial, backend, rounds)
    try:
        loop.run(ray_options.parallel)
    except BaseException as stopped:
        pool.cancel()  # Ctrl-C, SIGTERM, a fatal error: every node removes its servers
        loop.fail_running(stopped)
        raise
    finally:
        pool.close()


class _Loop:
    def __init__(
        self,
        ray: Any,
        study: optuna.Study,
        space: SearchSpace,
        pool: SlotPool,
        seed: int,
        on_trial: OnTrial | None,
        backend: str,
        rounds: bool,
    ) -> None:
        self.ray = ray
        self.study = study
        self.space = space
        self.pool = pool
        self.seed = seed
        self.rounds = rounds
        self.source = BackendKind.parse(backend).source
        self.ends = TrialEnds(study, on_trial, "their temp folder under spectune/ on the nodes")
        self.running: dict[Any, _Job] = {}
        # Trials whose config a running trial measures, by that trial's number.
        self.waiting: dict[int, list[optuna.Trial]] = {}
        self.runnable: list[optuna.Trial] = []  # their trial failed: they run it themselves
        self.idle: list[Slot] = []
        self.driver = f"{socket.gethostname()}/ray-driver"  # who recorded a reused result
        self.last_beat = time.monotonic()

    def run(self, parallel: int) -> None:
        self.idle = self.pool.grow(parallel)
        if not self.idle:
            raise ConfigError(
                "no trial slot could be placed on the Ray cluster within "
                f"{self.pool.start_timeout_s:.0f} s: its matching GPUs are busy"
            )
        while True:
            self._fill()
            if not self.running:
                return
            ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=_POLL_S)
            self._beat()
            for ref in ready:
                self._collect(ref, self.running[ref])  # _finish takes it out of running

    def _beat(self) -> None:
        """Records the heartbeat of every trial a slot runs, as a worker does for its own: each
        beat once as it started (the storage does that), so without these a trial that outlives
        the grace would read as stale to any other run of the study while it still runs."""
        storage = rdb_of(self.study)
        interval = storage.get_heartbeat_interval() if storage is not None else None
        if storage is None or interval is None or time.monotonic() - self.last_beat < interval:
            return
        self.last_beat = time.monotonic()
        for job in self.running.values():
            storage.record_heartbeat(trial_id(job.trial))

    def _fill(self) -> None:
        while self.idle:
            with signals_held():  # a trial asked for is running or told before a signal lands
                if not self._start_one():
                    return

    def _start_one(self) -> bool:
        trial = self._ask()
        if trial is None:
            return False
        config = self.space.suggest(trial)
        earlier = ended_same_config(self.study, trial)
        if earlier is not None:  # samplers repeat points of a discrete space: don't rerun
            self._finish(trial, earlier.reused_by(trial.number, self.driver))
            return True
        holder = next(
            (
                j.trial
                for j in self.running.values()
                if j.trial is not trial and same_params(j.trial.params, trial.params)
            ),
            None,
        )
        if holder is not None:
            self.waiting.setdefault(holder.number, []).append(trial)
            return True
        slot = self.idle.pop()
        trial.set_user_attr("worker", slot.worker)  # before it runs: a FAIL says where
        seed = self.seed * 100_003 + trial.number
        race = race_for(self.study, self.space, config, self.rounds)  # here, where the study is
        settled = None if race is None else race.settled(config.client.workload.conditions)
        ref = slot.handle.run.remote(trial.number, config, seed, settled)
        self.running[ref] = _Job(trial, config, slot)
        return True

    def _ask(self) -> optuna.Trial | None:
        if self.runnable:
            return self.runnable.pop(0)
        try:
            return self.study.ask()
        except BudgetExhausted:
            return None

    def _collect(self, ref: Any, job: _Job) -> None:
        try:
            result: SlotResult = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            self._node_lost(job, exc)
            return
        except self.ray.exceptions.RayTaskError as exc:  # a bug on the node, not a fault
            raise SpectuneError(
                f"trial {job.trial.number} broke on Ray node {job.slot.host}: {exc}"
            ) from None
        self.idle.append(job.slot)
        if result.facts is not None:
            self.study.set_user_attr(RUN_ATTR, serde.dump(result.facts))
        self._finish(job.trial, result.record)
        if result.fatal is not None:
            raise ConfigError(result.fatal)
        self.ends.count(result.record)

    def _node_lost(self, job: _Job, exc: Exception) -> None:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        error = LaunchError(
            f"Ray node {job.slot.host} was lost during trial {job.trial.number} ({reason}); "
            "it is retried on another node"
        )
        number = job.trial.number
        record = TrialRecord.failed(number, job.config, error, self.source, job.slot.worker)
        self._finish(job.trial, record)
        failed = next(t for t in self.study.get_trials(deepcopy=False) if t.number == number)
        RetryOwnRecord(max_retry=1)(self.study, failed)  # a WAITING copy, once
        self.pool.lose(job.slot)
        self.idle += self.pool.grow(1)  # on a matching node with free GPUs, if any is left
        if not self.idle and not self.running:
            raise SpectuneError(
                f"every Ray node with {self.space.hardware.label} was lost "
                f"(last {job.slot.host}): the study stops; resume it when nodes are back"
            )

    def _finish(self, trial: optuna.Trial, record: TrialRecord) -> None:
        with signals_held():  # told and out of running together, or neither
            self.running = {r: j for r, j in self.running.items() if j.trial is not trial}
            record = self.ends.write(trial, record)
            if record.state is TrialState.COMPLETE:
                self.study.tell(trial, list(record.objective))
            else:  # PRUNED or FAIL: Optuna's samplers read which
                self.study.tell(trial, state=record.state)
        self.ends.tell(record)
        for waiter in self.waiting.pop(trial.number, []):
            if record.state is TrialState.FAIL:
                self.runnable.append(waiter)
            else:
                self._finish(waiter, record.reused_by(waiter.number, self.driver))

    def fail_running(self, stopped: BaseException) -> None:
        """Ends the trials that were running when ``stopped`` stopped the study: FAIL, no retry.

        The FAILs are written after what ``stopped`` left open in the database is released (a
        signal inside one of the driver's SQLite statements holds the file's lock otherwise).
        """
        release_statements(stopped)
        self.runnable += [trial for waiters in self.waiting.values() for trial in waiters]
        self.waiting.clear()
        for job in list(self.running.values()):
            error = LaunchError(f"trial {job.trial.number} was cancelled: the study was stopped")
            number, worker = job.trial.number, job.slot.worker
            self._finish(
                job.trial, TrialRecord.failed(number, job.config, error, self.source, worker)
            )
        self.running.clear()
        for trial in self.runnable:  # asked, but never given a slot
            error = LaunchError(f"trial {trial.number} was cancelled: the study was stopped")
            config = self.space.suggest(trial)
            self._finish(trial, TrialRecord.failed(trial.number, config, error, self.source))
        self.runnable.clear()
