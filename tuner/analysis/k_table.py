"""The per-batch-size K table: which one a study's best config would carry, and whether it won.

A study measures every config at each level of its traffic profile, so it can say which K wins
where (:mod:`tuner.analysis.levels`) and spell that as vLLM's
``num_speculative_tokens_per_batch_size``. A table is not the sum of its levels, though: vLLM
forces piecewise CUDA graphs when one is set, and vLLM #49548 reports throughput collapsing at
the threshold. So the table is run as a config of its own after the confirmation runs
(:func:`tuner.study.confirm.confirm_k_table`) and exported only where it beat the fixed-K config
on the traffic profile. The verdict is stored (:func:`tuner.serde.dump`) as the study's
``k_table`` attribute::

    {"trial": 20, "table": [[1, 2, 4], [3, 64, 0]], "source": "simulated",
     "runs": [{"status": "ok", "output_tok_s": 61.2, ...}, ...],
     "output_tok_s": 61.2, "fixed_tok_s": 59.4, "wins": true}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pydantic import computed_field

from tuner import serde
from tuner.analysis.confirmed import Run
from tuner.analysis.levels import LevelChoice, batch_size_table, speculation_by_level
from tuner.analysis.picks import Candidate
from tuner.analysis.trials import points
from tuner.config.space import SearchSpace
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.config.vllm_args import has_per_batch_size
from tuner.results import Source

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

__all__ = [
    "K_TABLE_ATTR",
    "KTableVerdict",
    "TableChoice",
    "planned_table",
    "spell",
    "stored_verdict",
    "table_choice",
    "with_table",
]

K_TABLE_ATTR = "k_table"

Table = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class KTableVerdict:
    """The table's own runs against the fixed-K config it would replace."""

    trial: int  # the fixed-K config's trial
    table: Table
    source: Source
    runs: tuple[Run, ...]
    output_tok_s: float | None  # the mean over the runs; None unless every run was feasible
    fixed_tok_s: float  # the fixed-K config's confirmed mean (else its single measurement)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def wins(self) -> bool:
        return self.output_tok_s is not None and self.output_tok_s > self.fixed_tok_s

    @property
    def spelled(self) -> str:
        return spell(self.table)

    def evidence(self) -> str:
        """What the runs showed, for the export's notes and the CLI alike: "61.2 tok/s against
        59.4 for fixed K, 3 simulated runs", or that one run was not feasible."""
        runs = f"{len(self.runs)} {self.source.value} runs"
        if self.output_tok_s is None:
            return f"not feasible in every one of {runs}"
        return f"{self.output_tok_s:.1f} tok/s against {self.fixed_tok_s:.1f} for fixed K, {runs}"


def spell(table: Table) -> str:
    """The table as vLLM reads it (JSON)."""
    return json.dumps([list(entry) for entry in table])


def stored_verdict(study: optuna.Study) -> KTableVerdict | None:
    raw = study.user_attrs.get(K_TABLE_ATTR)
    return None if raw is None else serde.load(KTableVerdict, raw)


def planned_table(
    study: optuna.Study, space: SearchSpace, candidate: Candidate
) -> tuple[list[LevelChoice], Table]:
    """The best K per level for ``candidate``'s draft, each level's own best measured there,
    and the table they make (empty with one level, one K everywhere, or a vLLM older than
    0.24)."""
    server = candidate.record.server
    if len(space.workload.concurrency) < 2 or server.speculative is None:
        return [], ()
    levels = speculation_by_level(points(study), server.draft or SpecMethod.NONE)
    table = tuple(batch_size_table(levels))
    if len(levels) < 2 or len(table) < 2 or not has_per_batch_size(space.version):
        return levels, ()
    return levels, table


@dataclass(frozen=True)
class TableChoice:
    """What the export does about a per-batch-size K table for one candidate."""

    levels: tuple[LevelChoice, ...]  # the best K per level for the candidate's draft
    planned: Table  # the table those levels make (empty: none to propose)
    verdict: KTableVerdict | None  # its own runs, where they judged this very table

    @property
    def exported(self) -> Table:
        """The table written into the config: only one that won as its own config."""
        return self.planned if self.verdict is not None and self.verdict.wins else ()


def table_choice(study: optuna.Study, space: SearchSpace, candidate: Candidate) -> TableChoice:
    """The per-level K, the planned table and its verdict for exporting ``candidate``."""
    levels, planned = planned_table(study, space, candidate)
    verdict = stored_verdict(study)
    if verdict is not None and (verdict.trial, verdict.table) != (candidate.number, planned):
        verdict = None  # it judged another config's table
    return TableChoice(tuple(levels), planned, verdict)


def with_table(server: ServerConfig, table: Table) -> ServerConfig:
    """``server`` switching K by batch size; num_speculative_tokens is the table's largest K."""
    spec = server.speculative
    if spec is None or not table:
        return server
    top = max(spec.num_speculative_tokens, *(k for _, _, k in table))
    return replace(
        server, speculative=replace(spec, num_speculative_tokens=top, k_by_batch_size=table)
    )
