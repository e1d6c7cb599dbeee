"""The upper bounds of what a user may give, as plain numbers (no pydantic).

:mod:`tuner.config.bounds` builds its checked types from these, and ``--help`` quotes them
without importing the search-space schema (``benchmarks/help_cost.py``).
"""

from __future__ import annotations

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_CONTEXT",
    "MAX_GIB",
    "MAX_GPUS",
    "MAX_NAME",
    "MAX_REPEATS",
    "MAX_REQUESTS",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_SPEC_TOKENS",
    "MAX_TRIALS",
]

# Upper bounds come from what a value means, so a typo of a few zeros is refused at once
# instead of running for hours (or overflowing deep inside a library).
MAX_SPEC_TOKENS = 64
"""K: vLLM verifies K + 1 tokens per request every step, and even a draft right 90 % of the
time gets its 64th token accepted 0.9**64 = 0.1 % of the time."""
MAX_CONTEXT = 1 << 22
"""Tokens: 4,194,304, four times the longest context of any released model (1M tokens)."""
MAX_CONCURRENCY = 4096
"""Requests in flight: vLLM batches at most --max-num-seqs (1,024 at most by default) at once,
and one client process holds a stream each; 4,096 keeps every such batch full."""
MAX_REQUESTS = 100_000
"""Requests per (level, temperature): 100,000 at a second each is a day for one pair."""
MAX_TRIALS = 10_000
"""Trials: 10,000 at a minute each is a week of GPU time, and TPE slows with every trial."""
MAX_GPUS = 64
"""GPUs one server (or one host's workers) spans: more than any single host holds."""
MAX_SECONDS = 7 * 24 * 3600
"""Timeouts and windows: a week; longer is no limit at all."""
MAX_GIB = 1024
"""GPU memory in GiB: more than any one GPU holds."""
MAX_SEED = 2**32 - 1
"""Seeds: numpy and Optuna's samplers take unsigned 32-bit seeds."""
MAX_NAME = 4096
"""Names and paths, in characters: PATH_MAX, the longest path Linux opens."""
MAX_REPEATS = 100
"""Confirmation runs per config: each starts a fresh server, and 100 of them take days."""
