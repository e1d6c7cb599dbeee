"""spectune's default search strategy: start where the simulator puts the optimum, then refine.

On real GPUs every trial costs minutes (a server start-up, then a benchmark), so the first trials
matter most. Before any trial runs, :func:`warm_start` asks the simulator's noise-free model
(:func:`tuner.sim.virtual_time.predict`: the catalog's models, or local model directories read
through :func:`tuner.catalog.models.load_model`, on the space's hardware) where the best configs
lie, and enqueues a few of them, in this order:

1. the best predicted config;
2. its request-only variants (other temperatures) predicted nearly as fast, when the count
   leaves room: they reuse the server the first trial started, so they cost no restart, and
   how far below the best one may be is weighed by that: a trial on a new server is charged
   its config family's start-up (:mod:`tuner.search.startup`) in GPU time, a variant its
   benchmark alone (:func:`variant_share`);
3. the best config of every other speculation method (none, ngram, each draft), whatever the
   count, so that a prior wrong about one method costs a trial, not the study; each other
   kind of speculation (no speculation, prompt lookup, suffix decoding, a draft model, ...)
   before another drafter of a kind already in, since a prior wrong about one drafter (a
   draft model's passes cost more here, these prompts repeat less) is likely wrong about its
   kind, and by the second trial the search should have tested it somewhere else;
4. the best config of each next-best arm, up to the count, ranked by the forecast raised by
   its regime's measured error (:mod:`tuner.sim.band`): early trials go where the prior is
   least certain as well as where it is best. An arm is a (draft, K) with its method's own
   settings and options (:mod:`tuner.search.screen`): block or adaptive verification, sampled
   drafts, another prompt-lookup window compete here on their own forecasts.

Each config is forecast on the space's own traffic, as a trial scores it: every concurrency
level and temperature, weighted by its share, the worst level's p95 TTFT held to the limit. A
forecast of one request at a time picks K too high and memory too tight for a mix of 1, 8 and
32 requests in flight. After each result the twin re-plans what is still queued
(:mod:`tuner.search.twin_steer`).

Only configs predicted to fit with :data:`SAFETY_MARGIN_GIB` to spare are enqueued: a start-up
uses a few hundred MiB more or less than any model of it (allocator fragmentation, library
workspaces), and a config pushed on the strength of a prediction alone should not be one that
runs out of memory at launch. The study's first launch keeps more,
:data:`FIRST_START_MARGIN_GIB`: until one start-up has measured this machine (a host
calibration's did) the memory outside vLLM's budget is the model's alone. Where the favourite
leaves less, the same arm runs at a roomier memory setting in its place
(:func:`_measured_first`); the other queued configs wait for its measured peak (the twin moves
them where it says they do not fit). Memory other processes held when the study
started (:mod:`tuner.catalog.tenants`) is taken before the prediction starts: vLLM finds it in
use, so on 0.21-0.33 a utilization that leaves it no room fails the start-up check, and on 0.34
the KV cache is sized from what it leaves. Where the prediction cannot tell configs apart, the one
with more memory to spare and the lower TTFT for the longest prompts wins. The measurements
come from whatever backend runs; the predictions only choose the first trials. After them the
constraint-aware multivariate TPE of ``--sampler tpe`` learns from what was measured; starting
it next to the predicted optimum, at a safe memory setting, keeps its proposals away from the
memory limit. In a goodput study the prediction is the climb the trial would make
(:func:`tuner.search.forecast.predicted_goodput`), and configs are ranked by the goodput it finds.

The screen's grid, memory filter and order are :mod:`tuner.search.screen`'s, which the twin's
screen shares. Predicting every point of the default space (11 000 configs) would take minutes,
so this one is staged, each stage around the best of the one before: every (draft, K) in its
design's first variant at its most generous safe memory setting and the lowest temperature;
every variant of the best few and of each method's best; every temperature for the best few
arms; every utilization, then every batched-token size, for the best config; every arm at the
memory setting found; every variant of each method's best there; that method's best variant,
where it is not the first, at every other K (a variant can move the best K); every temperature at
the best server config. A hundred-odd
predictions take seconds, nothing next to one server start-up. Nothing is enqueued when no config is
predicted to meet the TTFT limit: the sampler then explores on its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace

import optuna

from tuner.catalog.models import ModelSpec
from tuner.catalog.tenants import stored_tenants
from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.errors import StartupFailure
from tuner.results import Source, TrialResult
from tuner.search.forecast import bench_seconds, predicted_goodput, predicted_trial
from tuner.search.prediction import Prediction
from tuner.search.screen import Arm, Screen, Setting, screened_traffic, screened_workload
from tuner.search.startup import REUSE_FLOOR, REUSE_SHARE, StartupPrices, reuse_share
from tuner.sim.band import Band, error_band, regime_of, widest
from tuner.sim.memory import estimate_memory
from tuner.sim.virtual_time import predict
from tuner.trial.record import WARM_START_ATTR

__all__ = [
    "FIRST_START_MARGIN_GIB",
    "SAFETY_MARGIN_GIB",
    "Prediction",
    "optimistic_top",
    "predicted_configs",
    "variant_share",
    "warm_start",
]

# Memory (GiB) a config must have to spare, beyond the memory model in every way it can run out
# (outside vLLM's budget, and KV cache beyond one max-model-len request), to be enqueued.
SAFETY_MARGIN_GIB = 0.75
# What the study's first launch must have to spare, where no start-up has measured this machine
# (no host calibration): the margin above, and the memory outside vLLM's budget that a model of
# another machine cannot know. The CUDA context differs by driver and GPU (0.3-0.8 GiB), the CUDA
# graphs crossed the budget in 0.21 (0.4-0.7 GiB for the catalog's pairs), NCCL's buffers vary
# by version (the BRIEF's field notes: 0.92 of a 24 GB card "leaves ~2 GB for CUDA context and
# attention bursts").
_UNMEASURED_STACK_GIB = 0.75
FIRST_START_MARGIN_GIB = SAFETY_MARGIN_GIB + _UNMEASURED_STACK_GIB
# At most this many trials are chosen by the prediction; the sampler chooses the rest.
WARM_START_MAX = 8
# The prediction chooses at most this share of a run's trials, so the sampler always explores.
_WARM_START_SHARE = 0.25
_MAX_VARIANTS = 2
# Candidates carried from one screening stage to the next.
_SHORTLIST = 4
# Halvings of the interval when finding how much memory a config has to spare (~1 MiB).
_BISECTIONS = 15


def optimistic_top(forecast: float, error: float | None) -> float:
    """``forecast`` raised by its regime's error band (a share); unbounded where too few
    public sources make a band (:func:`tuner.sim.band.error_band`): nothing then says the
    forecast is not far too low."""
    return math.inf if error is None else forecast * (1.0 + error)


def warm_start(study: optuna.Study, space: SearchSpace, budget: int, measured: bool = False) -> int:
    """Enqueues the configs the simulator predicts best, before any trial of ``study`` runs.

    Args:
        study: a study with no trials yet; a resumed study already has its own evidence and is
            left alone.
        space: the space the study tunes (its hardware, models and workload drive the forecast).
        budget: trials this run will spend; at most a quarter of them (and at most 8) are
            enqueued, so the sampler still explores.
        measured: the study's twin starts from a calibration of this host, whose start-ups
            measured its memory: the first launch needs no wider margin.

    Returns:
        How many trials were enqueued.
    """
    if budget < 1 or study.get_trials(deepcopy=False):
        return 0
    chosen = warm_start_configs(
        space, budget, held_gib=stored_tenants(study).gib, measured=measured
    )
    for prediction in chosen:
        band = _band(space, prediction)
        study.enqueue_trial(
            prediction.params,
            user_attrs={
                WARM_START_ATTR: {
                    "source": Source.PREDICTED.value,
                    space.objective.metric: round(prediction.throughput, 3),
                    "p95_ttft_ms": round(prediction.p95_ttft_ms, 3),
                    "error_band": band.describe(),
                }
            },
        )
    return len(chosen)


def warm_start_configs(
    space: SearchSpace,
    budget: int,
    startups: StartupPrices | None = None,
    held_gib: float = 0.0,
    measured: bool = False,
) -> list[Prediction]:
    """The configs :func:`warm_start` enqueues for a run of ``budget`` trials, in order
    (``startups``: the start-up prices, default the prior's; ``held_gib``: memory other
    processes hold on each GPU; ``measured``: a host calibration measured its memory)."""
    count = min(WARM_START_MAX, max(1, math.floor(budget * _WARM_START_SHARE)))
    # Never more than this run spends: a leftover enqueued trial would run past the budget.
    ranked = predicted_configs(space, held_gib)
    share = variant_share(space, ranked, startups or StartupPrices())
    plan = _plan(ranked, count, lambda p: _band(space, p).error, share)
    return (plan if measured else _measured_first(plan, ranked))[:budget]


def _measured_first(plan: list[Prediction], ranked: tuple[Prediction, ...]) -> list[Prediction]:
    """``plan`` led by a launch that leaves :data:`FIRST_START_MARGIN_GIB` to spare.

    Where the favourite leaves less, the same arm at its temperature, at the fastest memory
    setting predicted to leave that much and to meet the TTFT limit, runs in its place, and
    the favourite's request-only variants follow it to that server (those not predicted there
    are dropped: they were queued to reuse the favourite's). Its measured peak tells the twin's
    guard (:mod:`tuner.search.memory_guard`) whether the tighter setting the other queued
    configs share fits, before they launch; the favourite's own setting is then the twin's and
    TPE's to propose, like any other. On the 14B space the first trial runs at 0.90 of the 4090
    and 4096 batched tokens for 0.94 and 8192, forecast 0.3 % slower; in a world that holds a
    GiB more than modelled it saves a start-up that runs out of memory. Where no such setting
    meets the TTFT limit, the favourite goes first as it is: a launch that misses the limit is
    no trial worth its start-up.
    """
    if not plan or plan[0].headroom_gib >= FIRST_START_MARGIN_GIB:
        return plan
    favourite = plan[0]
    roomier = next(
        (
            p
            for p in ranked
            if p.arm == favourite.arm
            and p.config.client == favourite.config.client
            and p.headroom_gib >= FIRST_START_MARGIN_GIB
        ),
        None,
    )
    if roomier is None:
        return plan
    # Reversed, so that the best-ranked prediction of each temperature there wins.
    there = {
        p.config.client: p
        for p in reversed(ranked)
        if p.arm == favourite.arm and p.config.server == roomier.config.server
    }
    rest = [
        there.get(p.config.client) if p.config.server == favourite.config.server else p
        for p in plan[1:]
    ]
    return [roomier, *(p for p in rest if p is not None)]


def variant_share(
    space: SearchSpace, ranked: tuple[Prediction, ...], startups: StartupPrices
) -> float:
    """How close to the best config (``ranked[0]``) a request-only variant must be predicted
    to be worth a warm-start trial.

    A variant reuses the best's running server, so it is weighed by
    :func:`tuner.search.startup.reuse_share`: the best's family's start-up against the
    simulator's prediction of the best config's benchmark.
    """
    if not ranked:
        return REUSE_SHARE
    best = ranked[0]
    low, high = REUSE_FLOOR * best.throughput, REUSE_SHARE * best.throughput
    if not any(
        p.config.server == best.config.server and low <= p.throughput < high for p in ranked[1:]
    ):
        return REUSE_SHARE  # no variant the price could let in: nothing to predict
    try:
        bench = bench_seconds(best.config.client.workload, predicted_trial(space, best.config))
    except StartupFailure:  # a safe config does not run out; nothing to weigh if it did
        return REUSE_SHARE
    return reuse_share(startups.price(best.config.server).seconds, bench)


def _band(space: SearchSpace, prediction: Prediction) -> Band:
    """The least certain error band over the levels of the traffic ``prediction`` forecasts."""
    server = prediction.config.server
    levels = space.workload.concurrency
    found = widest(error_band(regime_of(space.hardware, server, level)) for level in levels)
    assert found is not None  # a workload has at least one level
    return found


@functools.lru_cache(maxsize=8)  # deterministic per space; benchmarks start many studies
def predicted_configs(space: SearchSpace, held_gib: float = 0.0) -> tuple[Prediction, ...]:
    """Screens ``space`` with the simulator on GPUs where other processes hold ``held_gib``
    each; returns the screened configs, best first.

    Only configs that fit with :data:`SAFETY_MARGIN_GIB` to spare and meet the space's TTFT
    limit are returned: those that also meet it for the longest prompts first, then by
    predicted throughput, TTFT for the longest prompts, and memory to spare.
    """
    screened = _StagedScreen(space, held_gib).run()
    return tuple(p for p in screened if p.p95_ttft_ms <= space.ttft_limit_ms)


def _plan(
    ranked: tuple[Prediction, ...],
    count: int,
    error: Callable[[Prediction], float | None] = lambda _: 0.0,
    share: float = REUSE_SHARE,
) -> list[Prediction]:
    """The enqueue order: the best, its request-only variants, the best of every other method
    (each other kind of speculation before other drafters of a kind already in), then one per
    next-best pair, the least certain first.

    Every method (none, ngram, each draft) gets its best config in, whatever the count: a prior
    wrong about one method then costs a trial, not the study. The pairs after them are taken
    by their optimistic forecast, the prediction raised by its regime's error band
    (``error``; None: too few public sources for a band, first): a pair the prior
    may well underrate is worth a trial as much as one it rates a little higher with
    confidence. A request-only variant goes in when predicted within ``share`` of the best
    (:func:`variant_share`).
    """
    if not ranked or count < 1:
        return []
    best = ranked[0]
    plan = [best]
    methods = {best.arm.draft}
    kinds = {best.config.server.method}
    # Another kind of speculation first, then another drafter of a kind already in: a prior
    # wrong about a draft model's passes, or about how often these prompts repeat, is wrong
    # about its whole kind, and the next trial should test the prior somewhere else.
    for prediction in ranked:
        if prediction.config.server.method not in kinds:
            kinds.add(prediction.config.server.method)
            methods.add(prediction.arm.draft)
            plan.append(prediction)
    for prediction in ranked:
        if prediction.arm.draft not in methods:
            methods.add(prediction.arm.draft)
            plan.append(prediction)
    variants = [
        p
        for p in ranked[1:]
        if p.config.server == best.config.server and p.throughput >= share * best.throughput
    ]
    plan[1:1] = variants[: max(0, min(_MAX_VARIANTS, count - len(plan)))]
    seen = {p.arm for p in plan}

    def optimistic(prediction: Prediction) -> float:
        return optimistic_top(prediction.throughput, error(prediction))

    # Stable: among equally certain pairs, the prediction's own order holds.
    for prediction in sorted(ranked, key=lambda p: -optimistic(p)):
        if len(plan) >= count:
            break
        if prediction.arm not in seen:
            seen.add(prediction.arm)
            plan.append(prediction)
    return plan


class _StagedScreen(Screen):
    """The warm start's screen, under the shipped simulator: each stage predicts around the
    best candidates of the one before."""

    def __init__(self, space: SearchSpace, held_gib: float = 0.0) -> None:
        super().__init__(space)
        # NVML's free memory before vLLM starts, where other processes hold some (None: all).
        self.free_gib = space.hardware.gpu.vram_gib - held_gib if held_gib > 0 else None
        # p95 TTFT is set by the longest prompts; busier levels queue (their p95 is the
        # queue's), so the tail prompt is predicted at the lightest level.
        self.tail = replace(
            screened_workload(space.workload, min(space.workload.concurrency)),
            input_tokens=self.tail_prompt,
        )
        self.drafts: dict[str, ModelSpec | None] = {d: space.draft_model(d) for d in space.drafts}
        self.done: dict[tuple[Arm, Setting, float], Prediction | None] = {}
        # Memory to spare (GiB) of every memory setting that fits each arm with the margin.
        self.safe: dict[Arm, dict[Setting, float]] = {}
        for arm in self.arms:
            safe = self.settings_leaving(functools.partial(self._headroom, arm), SAFETY_MARGIN_GIB)
            if safe:
                self.safe[arm] = safe

    def run(self) -> list[Prediction]:
        """Runs the stages; returns every prediction made, best first."""
        # Acceptance never rises with temperature, so the lowest one shows what an arm can do;
        # the most generous safe setting (most KV cache, largest prefill chunks) likewise.
        coldest = min(self.temperatures)
        reference = {arm: max(settings) for arm, settings in self.safe.items()}
        # Each (draft, K) in its design's first variant, then every variant of the best few
        # and of each method's best: the settings act mostly alone, so a variant that does not
        # pay at a method's best K is not tried at its others.
        bases = {(arm.draft, arm.k): arm for arm in reversed(list(self.safe))}
        stage1 = self._best([self._predict(arm, reference[arm], coldest) for arm in bases.values()])
        leaders = [p.arm for p in stage1[:_SHORTLIST]] + list(
            {p.arm.draft: p.arm for p in reversed(stage1)}.values()
        )
        for arm in self.safe:
            if any((arm.draft, arm.k) == (lead.draft, lead.k) for lead in leaders):
                self._predict(arm, reference[arm], coldest)
        arms = [p.arm for p in self._best(list(self.done.values()))[:_SHORTLIST]]
        stage2 = [self._predict(arm, reference[arm], t) for arm in arms for t in self.temperatures]
        ranked = self._best(stage2)
        if not ranked:
            return []
        setting = self._tune_memory(ranked[0])
        # The memory setting that suits the best arm suits the others too (memory settings act
        # through KV capacity and prefill chunking, which the arms share); each arm's best
        # temperature so far goes with it.
        temperature: dict[Arm, float] = {}
        for prediction in self._best(list(self.done.values())):
            temperature.setdefault(prediction.arm, prediction.config.client.sampling_temperature)
        for arm, settings in self.safe.items():
            if setting in settings and (arm in temperature or arm in bases.values()):
                self._predict(arm, setting, temperature.get(arm, coldest))
        self._within_the_limit()
        # Every variant of each method's best where that best runs: the forecast says whether
        # block or adaptive verification, sampled drafts or another lookup window would change
        # the ranking.
        for lead in self._method_bests():
            self._beside(
                lead, [a for a in self.safe if (a.draft, a.k) == (lead.arm.draft, lead.arm.k)]
            )
        self._other_ks()
        # Request-only variants of the best config: candidates that reuse its server.
        best = self._best(list(self.done.values()))[0]
        server = best.config.server
        for t in self.temperatures:
            self._predict(
                best.arm, (server.gpu_memory_utilization, server.max_num_batched_tokens), t
            )
        self._roomier(best)
        return self._best(list(self.done.values()))

    def _roomier(self, best: Prediction) -> None:
        """Where ``best`` leaves less than a study's first launch keeps, its arm at the most
        generous utilization of each batch size that leaves that much, at every temperature:
        the candidates for the first launch and its variants (:func:`_measured_first`)."""
        if best.headroom_gib >= FIRST_START_MARGIN_GIB:
            return
        roomy: dict[int, float] = {}
        for (util, mnbt), room in self.safe[best.arm].items():
            if room >= FIRST_START_MARGIN_GIB:
                roomy[mnbt] = max(util, roomy.get(mnbt, util))
        for mnbt, util in roomy.items():
            for t in self.temperatures:
                self._predict(best.arm, (util, mnbt), t)

    def _other_ks(self) -> None:
        """Each method's best, where its variant is not the first its K was chosen in, at
        every other K. A variant can move the best K: P-EAGLE's parallel drafting makes a
        drafted token cheaper (the 2026 space on vLLM 0.32: K=3 without it, K=4 with it,
        forecast 3.6 % apart), so the K that suits the first variant is not the one to queue."""
        for lead in self._method_bests():
            choice = self.space.choice(lead.arm.draft)
            if lead.arm.spec is None or choice.own(lead.arm.spec) == choice.design()[0]:
                continue
            own = choice.own(lead.arm.spec)
            self._beside(
                lead,
                [
                    arm
                    for arm in self.safe
                    if arm.draft == lead.arm.draft
                    and arm.k != lead.arm.k
                    and arm.spec is not None
                    and choice.own(arm.spec) == own
                ],
            )

    def _method_bests(self) -> list[Prediction]:
        """Each drafter's best prediction so far (no speculation and prompt lookup count as
        drafters)."""
        ranked = self._best(list(self.done.values()))
        return list({p.arm.draft: p for p in reversed(ranked)}.values())

    def _beside(self, lead: Prediction, arms: list[Arm]) -> None:
        """``arms`` predicted where ``lead`` runs: its memory setting, where that is safe for
        them, and its temperature."""
        server = lead.config.server
        where = (server.gpu_memory_utilization, server.max_num_batched_tokens)
        for arm in arms:
            if where in self.safe[arm]:
                self._predict(arm, where, lead.config.client.sampling_temperature)

    def _within_the_limit(self) -> None:
        """Where a drafter's best config misses the TTFT limit, its arm at the other batch
        sizes of that utilization. A slower drafter (a larger draft model's prefill) can break
        the limit at the setting that suits the best arm and meet it with smaller prefill
        chunks: so every drafter that can meet the limit has a config that does."""
        for lead in self._method_bests():
            if lead.p95_ttft_ms > self.space.ttft_limit_ms:
                util = lead.config.server.gpu_memory_utilization
                for other in self.safe[lead.arm]:
                    if other[0] == util:
                        self._predict(lead.arm, other, lead.config.client.sampling_temperature)

    def _best(self, predictions: list[Prediction | None]) -> list[Prediction]:
        return self.best_first((p for p in predictions if p is not None), _forecast)

    def _tune_memory(self, top: Prediction) -> Setting:
        """Coordinate search over the safe settings: utilization first, then batched tokens."""
        arm, temperature = top.arm, top.config.client.sampling_temperature
        settings = self.safe[arm]
        mnbt = top.config.server.max_num_batched_tokens
        by_util = self._best([self._predict(arm, s, temperature) for s in settings if s[1] == mnbt])
        util = (
            by_util[0].config.server.gpu_memory_utilization
            if by_util
            else top.params["gpu_memory_utilization"]
        )
        by_mnbt = self._best([self._predict(arm, s, temperature) for s in settings if s[0] == util])
        best = by_mnbt[0] if by_mnbt else top
        return best.params["gpu_memory_utilization"], best.config.server.max_num_batched_tokens

    def _headroom(self, arm: Arm, setting: Setting) -> float:
        """GiB a start-up may use beyond the memory model before it fails (< 0: it fails).

        The least of two slacks: memory outside vLLM's budget (found by bisection on the
        model's hidden-overhead input), and KV cache beyond one ``max-model-len`` request.
        """
        server = self.config(arm, setting, self.temperatures[0]).server
        draft = self.drafts[arm.draft]

        def fits(extra_gib: float) -> bool:
            return estimate_memory(
                self.space.hardware,
                self.space.target,
                draft,
                server,
                jitter_gib=extra_gib,
                version=self.space.version,
                free_gib=self.free_gib,
            ).fits

        memory = estimate_memory(
            self.space.hardware,
            self.space.target,
            draft,
            server,
            version=self.space.version,
            free_gib=self.free_gib,
        )
        if not memory.fits:
            return -1.0
        low, high = 0.0, memory.gpu_total_gib
        for _ in range(_BISECTIONS):
            middle = (low + high) / 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        kv_slack = memory.kv_cache_gib * (1 - server.max_model_len / memory.kv_tokens)
        return min(low, kv_slack)

    def _predict(self, arm: Arm, setting: Setting, temperature: float) -> Prediction | None:
        key = (arm, setting, temperature)
        if key not in self.done:
            self.done[key] = self._forecast(arm, setting, temperature)
        return self.done[key]

    def _forecast(self, arm: Arm, setting: Setting, temperature: float) -> Prediction | None:
        config = self.config(arm, setting, temperature)
        params = self.params(arm, setting, temperature)
        headroom = self.safe[arm][setting]
        try:
            if self.space.goodput:  # one temperature stands in for the mix
                serving = self.space.workload.serving(temperature)
                goodput, ttft = predicted_goodput(self.space, config.server, serving)
                return Prediction(params, config, goodput, ttft, ttft, headroom)
            tok_s, ttft = self._traffic(arm, config)
            tail = predict(
                self.space.hardware,
                self.space.target,
                self.drafts[arm.draft],
                config.server,
                config.client.sampling_temperature,
                self.tail,
                self.tail.concurrency[0],
                version=self.space.version,
            )
        except StartupFailure:  # cannot happen for a safe setting; skipped, not guessed at
            return None
        return Prediction(params, config, tok_s, ttft, max(ttft, _ttft(tail)), headroom)

    def _traffic(self, arm: Arm, config: TrialConfig) -> tuple[float, float]:
        """(tok/s, p95 TTFT) as a trial scores ``config``: every (level, temperature) pair of
        the space's traffic, weighted by its share; the worst p95 TTFT of them.

        Serving one request at a time favours long drafts and tight memory that 32 requests
        in flight punish; forecasting the mix the trial is scored on picks what it measures.
        """
        total = value = 0.0
        ttft = 0.0
        for condition, result in screened_traffic(self.space, config, self.drafts[arm.draft]):
            total += condition.weight
            value += condition.weight * result.output_tok_s
            ttft = max(ttft, _ttft(result))
        return value / total, ttft


def _ttft(result: TrialResult) -> float:
    ttft = result.ttft_ms(95)
    return math.inf if ttft is None else ttft


def _forecast(prediction: Prediction) -> tuple[float, float, float, float]:
    """What :meth:`Screen.best_first` ranks a prediction by."""
    return (
        prediction.throughput,
        prediction.p95_ttft_ms,
        prediction.tail_ttft_ms,
        prediction.headroom_gib,
    )
