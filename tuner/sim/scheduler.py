"""A vLLM-like scheduler that advances one step at a time.

Each :meth:`Scheduler.step` does what one iteration of vLLM's EngineCore loop does: reserve KV-cache
blocks for the running sequences (preempting the newest ones by recomputation when the cache is
full), fill the step's token budget with decode tokens and prefill chunks, run the forward passes,
and emit tokens. With speculation a decode is K draft passes plus one target pass verifying K+1
tokens, and a sequence emits the accepted drafts plus one token from the target.

The scheduler knows no clock: a step returns its duration, and the caller moves time on, virtually
(:func:`tuner.sim.virtual_time.simulate`) or by sleeping (a real-time fake server).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError
from tuner.results import SpecDecodeStats
from tuner.sim.acceptance import SPEC_METHODS, Rates, expected_accepted, shipped_rates
from tuner.sim.memory import BLOCK_TOKENS, effective_batched_tokens, max_num_seqs
from tuner.sim.noise import StepNoise
from tuner.sim.perfmodel import PerfModel, StepShape

__all__ = ["Scheduler", "StepResult"]

# The first step after start-up compiles kernels and warms allocators: why benchmarks warm up.
COLD_START_S = 0.25
# vLLM keeps this share of blocks free when admitting new requests, to limit preemptions.
WATERMARK = 0.01


@dataclass(frozen=True)
class StepResult:
    """What one scheduler step did.

    Attributes:
        duration_s: how long the step took on the GPUs plus the server's own overhead.
        emitted: tokens each request (by id) received in this step; speculation can give several.
        finished: ids of requests that completed in this step.
        kv_usage: share of KV-cache blocks in use during the step (0..1).
        shape: what the step scheduled (None for a step with nothing to run), for the step's
            work (:meth:`~tuner.sim.perfmodel.PerfModel.step_work`).
    """

    duration_s: float
    emitted: Mapping[int, int]
    finished: tuple[int, ...]
    kv_usage: float
    shape: StepShape | None = None


# eq=False: the scheduler means "this very sequence" in every membership test and remove(), and
# field-by-field comparison made each step quadratic in the batch (7.6 ms at 256 sequences).
@dataclass(eq=False, slots=True)
class _Seq:
    rid: int
    prompt: int
    max_tokens: int
    reach: tuple[float, ...]  # unconditional acceptance of each drafted position
    rates: tuple[float, ...]  # conditional acceptance of each drafted position
    target: int  # tokens to (re)compute before decoding resumes
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    credit: float = 0.0  # expected accepted drafts not yet emitted (noise-free mode)
    # Kept beside computed and target rather than derived: the scheduler asks it of every
    # sequence several times a step, and the screen runs hundreds of thousands of steps.
    decoding: bool = field(init=False)
    expected: dict[int, float] = field(init=False, default_factory=dict)  # sum(reach[:k]) by k

    def __post_init__(self) -> None:
        self.decoding = self.computed >= self.target

    def compute(self, chunk: int) -> None:
        """Records a prefill chunk as computed."""
        self.computed += chunk
        self.decoding = self.computed >= self.target

    def recompute(self) -> None:
        """Starts the prompt and the output so far over (after a preemption)."""
        self.computed = 0
        self.target = self.prompt + self.generated
        self.decoding = self.computed >= self.target

    def expected_accepted(self, k: int) -> float:
        """Expected accepted drafts of a step drafting ``k``: the same sum every step."""
        gain = self.expected.get(k)
        if gain is None:
            gain = self.expected[k] = sum(self.reach[:k])
        return gain

    @property
    def context(self) -> int:
        return self.prompt + self.generated if self.decoding else self.computed


@dataclass
class _Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: float = 0.0
    per_position: list[float] = field(default_factory=list)


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS)


def _flag(server: ServerConfig, name: str) -> int | None:
    """The value of a pass-through flag (``extra_flags``), as an int; None when absent."""
    for key, value in server.extra_flags:
        if key.lstrip("-").replace("_", "-") == name:
            return int(value)
    return None


class Scheduler:
    """Schedules requests over the GPUs step by step, like vLLM's EngineCore.

    Args:
        hardware: the GPUs.
        target: the served model.
        draft: the draft model (ignored unless the server speculates with ``draft_model``).
        server: batching, chunked prefill and speculative settings.
        kv_tokens: KV-cache capacity in tokens, from :func:`tuner.sim.memory.estimate_memory`.
        seed: seeds acceptance sampling and timing noise; None runs noise-free, with every
            draft accepting its expected number of tokens (used for predictions).
        perf: the step-time model; default the shipped :class:`PerfModel` of this config on
            the newest known vLLM (its release also caps a block drafter's running requests).
        rates: the acceptance model; default the shipped one.

    Raises:
        ConfigError: an unknown speculative method, or a draft-model method without a draft.
    """

    def __init__(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        *,
        kv_tokens: int,
        seed: int | None = None,
        perf: PerfModel | None = None,
        rates: Rates = shipped_rates,
    ) -> None:
        spec = server.speculative
        self.method = server.method
        self.k = spec.num_speculative_tokens if spec is not None else 0
        if spec is not None and self.method not in SPEC_METHODS:
            raise ConfigError(
                f"speculative method {str(self.method)!r} is not simulated; use one of "
                f"{', '.join(SPEC_METHODS)}"
            )
        if method_of(self.method).family is MethodFamily.DRAFT and draft is None:
            raise ConfigError(f"{server.draft} drafts for {target.hf_id} but no draft model given")
        self.target = target
        self.draft = draft if method_of(self.method).family is MethodFamily.DRAFT else None
        self.server = server
        self.model = perf or PerfModel(hardware, target, self.draft, server)
        self._rates = rates
        self.budget = effective_batched_tokens(server)
        self.chunked = server.enable_chunked_prefill
        cap = method_of(self.method).running_cap(
            self.k, server.max_num_batched_tokens, self.model.version
        )
        self.max_seqs = max_num_seqs(server) if cap is None else min(max_num_seqs(server), cap)
        self.graphs = not _flag(server, "enforce-eager")
        self.total_blocks = kv_tokens // BLOCK_TOKENS
        self.free_blocks = self.total_blocks
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.preemptions = 0
        self.steps = 0
        self._counters = _Counters(per_position=[0.0] * self.k)
        self._rng = random.Random(seed) if seed is not None else None
        self._noise = StepNoise(self._rng)

    @property
    def has_work(self) -> bool:
        """Whether any request is waiting or running."""
        return bool(self.waiting or self.running)

    def add_request(
        self, rid: int, prompt_tokens: int, max_tokens: int, temperature: float, prompt_set: str
    ) -> None:
        """Queues a request; it joins the batch at the next step.

        Args:
            rid: the caller's id for the request, echoed in :class:`StepResult`.
            prompt_tokens: prompt length.
            max_tokens: tokens to generate (generation runs to this length, as with ignore_eos).
            temperature: the request's sampling temperature (drives acceptance).
            prompt_set: the workload kind (drives acceptance), see ``acceptance_probability``.

        Raises:
            ValueError: the request does not fit in ``max_model_len`` (vLLM answers HTTP 400).
        """
        limit = self.server.max_model_len
        if prompt_tokens + max_tokens > limit:
            raise ValueError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion."
            )
        rates: tuple[float, ...] = ()
        if self.k:
            rates = self._rates(
                self.target,
                self.draft,
                self.method,
                prompt_set,
                temperature,
                self.k,
                speculative=self.server.speculative,
            )
        seq = _Seq(
            rid, prompt_tokens, max(max_tokens, 1), expected_accepted(rates), rates, prompt_tokens
        )
        self.waiting.append(seq)

    def abort_request(self, rid: int) -> bool:
        """Drops a request whose client went away; returns whether the scheduler held it."""
        for seq in self.waiting:
            if seq.rid == rid:
                self.waiting.remove(seq)
                return True
        for seq in self.running:
            if seq.rid == rid:
                self.running.remove(seq)
                self.free_blocks += seq.blocks
                return True
        return False

    def spec_stats(self) -> SpecDecodeStats | None:
        """Cumulative speculative counters since start, as vLLM's /metrics exposes them."""
        if not self.k:
            return None
        c = self._counters
        return SpecDecodeStats(
            float(c.drafts), float(c.draft_tokens), c.accepted, tuple(c.per_position)
        )

    @property
    def kv_usage(self) -> float:
        """Share of KV-cache blocks in use now."""
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 1.0

    # -- scheduling -------------------------------------------------------------------------

    def _preempt(self, seq: _Seq) -> None:
        """Frees a sequence's blocks; it recomputes prompt and output when readmitted."""
        self.running.remove(seq)
        self.free_blocks += seq.blocks
        seq.blocks = 0
        seq.recompute()
        self.waiting.appendleft(seq)
        self.preemptions += 1

    def _reserve_decodes(self) -> list[_Seq]:
        """Reserves room for each decoding sequence's next 1+K tokens, preempting if needed."""
        scheduled: list[_Seq] = []
        lookahead = 1 + self.k
        for seq in [s for s in self.running if s.decoding]:
            if not seq.decoding:
                continue  # preempted for an older sequence (a preempted one recomputes)
            need = _blocks(seq.prompt + seq.generated + lookahead) - seq.blocks
            while need > self.free_blocks and self.running[-1] is not seq:
                victim = self.running[-1]
                if victim in scheduled:
                    scheduled.remove(victim)
                self._preempt(victim)
            if need > self.free_blocks:
                self._preempt(seq)
                continue
            if need > 0:
                seq.blocks += need
                self.free_blocks -= need
            scheduled.append(seq)
        return scheduled

    def _schedule_chunk(self, seq: _Seq, budget: int, whole: bool) -> int:
        """Allocates blocks for the next prefill chunk of ``seq``; returns its size (0: none)."""
        chunk = min(seq.target - seq.computed, budget)
        if chunk <= 0 or (whole and chunk < seq.target - seq.computed):
            return 0
        need = _blocks(seq.computed + chunk) - seq.blocks
        if need > self.free_blocks:
            return 0
        seq.blocks += need
        self.free_blocks -= need
        return chunk

    def _schedule_prefills(self, budget: int, whole: bool) -> list[tuple[_Seq, int]]:
        chunks: list[tuple[_Seq, int]] = []
        for seq in self.running:
            if not seq.decoding and budget > 0:
                chunk = self._schedule_chunk(seq, budget, whole)
                if chunk:
                    chunks.append((seq, chunk))
                    budget -= chunk
        reserve = int(self.total_blocks * WATERMARK)
        while self.waiting and budget > 0 and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            first = min(seq.target, budget)
            if _blocks(first) > self.free_blocks - reserve and self.running:
                break  # wait for blocks to free up rather than thrash
            chunk = self._schedule_chunk(seq, budget, whole)
            if not chunk:
                break
            self.waiting.popleft()
            self.running.append(seq)
            chunks.append((seq, chunk))
            budget -= chunk
        return chunks

    # -- one step ---------------------------------------------------------------------------

    def step(self) -> StepResult:
        """Runs one scheduler iteration and returns what it took and what it emitted.

        Raises:
            RuntimeError: a request can never be scheduled (its prompt exceeds the KV cache).
        """
        decodes: list[_Seq] = []
        chunks: list[tuple[_Seq, int]] = []
        if not self.chunked and self.waiting:
            # Without chunked prefill vLLM runs whole prompts in prefill-only steps first.
            chunks = self._schedule_prefills(self.budget, whole=True)
        k = self.k
        if not chunks:
            decodes = self._reserve_decodes()
            # A per-batch-size table picks K by the requests running (vLLM's dynamic K);
            # adaptive verification sizes the budget step by step.
            k = self._adaptive_k(decodes) if self.model.adaptive else self._k_at(len(self.running))
            budget = self.budget - (1 + k) * len(decodes)
            if self.chunked:
                chunks = self._schedule_prefills(budget, whole=False)
        if not decodes and not chunks:
            if self.has_work:
                raise RuntimeError("no request fits in the KV cache; the scheduler cannot progress")
            return StepResult(0.0, {}, (), self.kv_usage)
        usage = self.kv_usage
        shape = self._shape(decodes, chunks, k)
        duration = self._duration(shape)
        emitted: dict[int, int] = {}
        for seq in decodes:
            emitted[seq.rid] = self._emit(seq, k)
        for seq, chunk in chunks:
            seq.compute(chunk)
            if seq.decoding:
                seq.generated += 1  # a finished prefill samples one token
                emitted[seq.rid] = 1
        finished = []
        for seq in decodes + [s for s, _ in chunks]:
            if seq.generated >= seq.max_tokens and seq in self.running:
                self.running.remove(seq)
                self.free_blocks += seq.blocks
                finished.append(seq.rid)
            else:
                # Lookahead slots of rejected drafts go back to the pool.
                held = _blocks(seq.context)
                self.free_blocks += seq.blocks - held
                seq.blocks = held
        self.steps += 1
        return StepResult(duration, emitted, tuple(finished), usage, shape)

    def _adaptive_k(self, decodes: list[_Seq]) -> int:
        """Adaptive verification's K for this step (see :meth:`PerfModel.adaptive_k`)."""
        if not decodes:
            return self.k
        reach = [sum(s.reach[i] for s in decodes) / len(decodes) for i in range(self.k)]
        context = sum(s.context for s in decodes)
        return self.model.adaptive_k(len(decodes), context, reach, self.graphs)

    def _k_at(self, batch_size: int) -> int:
        spec = self.server.speculative
        return spec.k_at(max(batch_size, 1)) if spec is not None else 0

    def _emit(self, seq: _Seq, k: int) -> int:
        """Tokens one decoding sequence gains this step, drafting ``k``; updates the counters."""
        room = seq.max_tokens - seq.generated
        accepted = 0
        if k:
            c = self._counters
            c.drafts += 1
            c.draft_tokens += k
            if self._rng is None:
                gain = seq.expected_accepted(k)
                seq.credit += gain
                accepted = min(int(seq.credit), k)
                seq.credit -= accepted
                c.accepted += gain
                per_position = c.per_position
                for i, p in enumerate(seq.reach[:k]):
                    per_position[i] += p
            else:
                draw = self._rng.random
                per_position = c.per_position
                for i, rate in enumerate(seq.rates[:k]):
                    if draw() >= rate:
                        break
                    accepted += 1
                    per_position[i] += 1
                c.accepted += accepted
        tokens = min(1 + accepted, room)
        seq.generated += tokens
        return tokens

    def _shape(self, decodes: list[_Seq], chunks: list[tuple[_Seq, int]], k: int) -> StepShape:
        return StepShape(
            decodes=len(decodes),
            decode_context=sum(s.prompt + s.generated for s in decodes),  # all decoding
            chunks=tuple((s.computed, c) for s, c in chunks),
            first_tokens=sum(1 for s, c in chunks if s.computed + c >= s.target),
            graphed=self.graphs and not chunks,
            k=k,
        )

    def _duration(self, shape: StepShape) -> float:
        duration = self.model.step_s(shape)
        if self.steps == 0:
            duration += COLD_START_S
        return self._noise(duration)
