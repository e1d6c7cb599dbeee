"""Exports a study's chosen config: vLLM ``--config`` YAML, docker-compose, ``docker run``,
Kubernetes, JSON.

The container formats are rendered by :mod:`tuner.export.deploy` and
:mod:`tuner.export.kubernetes`.

Which trial: a pick (:mod:`tuner.analysis.picks`: max-throughput, min-ttft, balanced or
min-energy, on confirmed numbers where the study has them; by default the one the study's
``slo.prefer`` names) or a trial number. Every format starts with the
provenance (:mod:`tuner.analysis.provenance`): study, trial, vLLM version and image, GPUs and
driver, the numbers with their confidence intervals, the date. The flags are spelled in the
dialect of the study's vLLM version (:mod:`tuner.config.vllm_args`): the space's, or where it
names none, the version that ran (detected at the first start).

Where the workload measured several concurrency levels, the notes give the best K per load
level (:mod:`tuner.analysis.levels`). The speculative config carries them as
``num_speculative_tokens_per_batch_size`` (0.24+) only where that table ran as a config of its
own and beat the fixed K on the traffic profile (:mod:`tuner.analysis.k_table`); otherwise the
fixed K is exported and a note says why.

No secret is written: tokens pass through by name (``HF_TOKEN``), extra flags that look like
credentials (``--api-key`` ...) are dropped with a note, and the storage URL never appears.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import yaml

from tuner import serde
from tuner.analysis.k_table import KTableVerdict, Table, spell, table_choice, with_table
from tuner.analysis.levels import LevelChoice
from tuner.analysis.picks import PICKS, Candidate, pick_candidate, study_pick
from tuner.analysis.provenance import Provenance, provenance
from tuner.analysis.recommendation import dialect_space
from tuner.config.space import SearchSpace
from tuner.config.trial import ServerConfig, is_secret_flag
from tuner.config.vllm_args import config_file_argv, has_per_batch_size, server_argv, server_yaml
from tuner.errors import ConfigError
from tuner.export.deploy import PORT, compose_file, docker_run_script
from tuner.export.formats import FORMATS
from tuner.export.kubernetes import kubernetes_manifests
from tuner.results import Source
from tuner.trial.scoring import TrialStatus

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

__all__ = [
    "FORMATS",
    "PICKS",
    "Exported",
    "export",
]


@dataclass(frozen=True)
class Exported:
    """One rendered export."""

    format: str
    text: str
    provenance: Provenance
    levels: tuple[LevelChoice, ...]  # best K per load level (empty with one level)
    batch_size_table: tuple[tuple[int, int, int], ...]  # written into the config, or empty


def export(
    study: optuna.Study,
    space: SearchSpace,
    fmt: str = "vllm",
    pick: str | None = None,
    today: dt.date | None = None,
) -> Exported:
    """Renders the config that ``pick`` (default: the study's own) selects in format ``fmt``.

    Raises:
        ConfigError: unknown format or pick, or nothing to export.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    pick = pick or study_pick(study)
    candidate = pick_candidate(study, pick)
    return _render(study, dialect_space(study, space), candidate, pick, fmt, today)


def _render(
    study: optuna.Study,
    space: SearchSpace,
    candidate: Candidate,
    pick: str,
    fmt: str,
    today: dt.date | None,
) -> Exported:
    facts = provenance(study, space, candidate, pick if not pick.isdigit() else "trial", today)
    record = candidate.record
    server, removed = _without_secrets(record.server)
    choice = table_choice(study, space, candidate)
    levels = list(choice.levels)
    notes = _notes(space, server, levels, choice.planned, choice.verdict, removed, record.source)
    server = with_table(server, choice.exported)
    notes += _smoothing_note(record.summary)
    notes += _power_note(record.params)
    if record.status is not TrialStatus.OK:  # only a trial asked for by number gets here
        notes.insert(0, f"WARNING: trial {candidate.number} was not feasible: {record.status}")
    header = [*facts.lines(), *notes]
    if fmt == "vllm":
        text = _vllm_yaml(server, space, header)
    elif fmt in ("compose", "docker-run"):
        render = compose_file if fmt == "compose" else docker_run_script
        text = render(
            _argv(server, space),
            image=space.vllm_image,
            gpus=space.hardware.count,
            server=server,
            env=_env_names(removed),
            header=header,
        )
    elif fmt == "kubernetes":
        text = kubernetes_manifests(
            _argv(server, space),
            image=space.vllm_image,
            server=server,
            env=_env_names(removed),
            header=header,
        )
    else:
        text = _json(server, space, facts, levels, notes)
    return Exported(fmt, text, facts, choice.levels, choice.exported)


def _without_secrets(server: ServerConfig) -> tuple[ServerConfig, list[str]]:
    secret = [k for k, _ in server.extra_flags if is_secret_flag(k)]
    kept = tuple((k, v) for k, v in server.extra_flags if k not in secret)
    removed = [k.lstrip("-") for k in secret]
    return replace(server, extra_flags=kept), removed


def _smoothing_note(summary: Mapping[str, Any]) -> list[str]:
    """Says when speculation's bursts would read as stutter: several tokens per chunk and a
    p99 gap far above the median one (a smoothing buffer of 15-20 ms at the gateway, as the
    field notes suggest, spreads each burst over the next gap)."""
    per_chunk, p50, p99 = (summary.get(k) for k in ("tokens_per_chunk", "itl_p50_ms", "itl_p99_ms"))
    if per_chunk is None or p50 is None or p99 is None or per_chunk < 1.5 or p99 < 3 * p50:
        return []
    return [
        f"the stream comes in bursts ({per_chunk:.1f} tokens per chunk, p99 gap {p99:.0f} ms "
        f"against a median {p50:.0f} ms): a 15-20 ms smoothing buffer at the gateway evens it out"
    ]


def _power_note(params: Mapping[str, Any]) -> list[str]:
    """The GPU power limit the config was measured at, where the study searched it: no vLLM
    flag sets it, so the deployment has to."""
    watts = params.get("power_limit_w")
    if watts is None:
        return []
    return [
        f"measured at a GPU power limit of {watts} W per GPU (not a vLLM setting): set it "
        f"where this runs, e.g. sudo nvidia-smi -pl {watts}"
    ]


def _notes(
    space: SearchSpace,
    server: ServerConfig,
    levels: list[LevelChoice],
    planned: Table,
    verdict: KTableVerdict | None,
    removed: list[str],
    source: Source,
) -> list[str]:
    notes = []
    if levels:
        per_level = "; ".join(
            f"{c.concurrency}: "
            + (f"K={c.k}" if c.k else "off")
            + f" ({c.output_tok_s:.1f} tok/s {source} at that level, trial {c.trial})"
            for c in levels
        )
        notes.append(f"best speculation per concurrency level: {per_level}")
        notes += _table_notes(space, server, levels, planned, verdict)
    for flag in removed:
        hint = " (vLLM also reads VLLM_API_KEY)" if flag == "api-key" else ""
        notes.append(f"--{flag} left out: it holds a secret; pass it at deploy time{hint}")
    return notes


def _table_notes(
    space: SearchSpace,
    server: ServerConfig,
    levels: list[LevelChoice],
    planned: Table,
    verdict: KTableVerdict | None,
) -> list[str]:
    if not planned:
        if not has_per_batch_size(space.version) and any(c.k != server.k for c in levels):
            return [
                f"vLLM {space.version} cannot switch K by batch size (needs 0.24+): "
                f"this config keeps K={server.k} at every load"
            ]
        return []
    if verdict is None:
        return [
            f"the per-batch-size K table {spell(planned)} was never run as one config "
            f"(confirmation off): K={server.k} is exported at every load"
        ]
    if verdict.output_tok_s is None:
        return [
            f"the per-batch-size K table {verdict.spelled} was {verdict.evidence()}: "
            f"K={server.k} is exported at every load"
        ]
    if not verdict.wins:
        return [
            f"the per-batch-size K table {verdict.spelled} lost ({verdict.evidence()}): "
            "fixed K exported"
        ]
    return [
        f"num_speculative_tokens_per_batch_size below switches K by batch size (0 = off); it "
        f"won as its own config ({verdict.evidence()}); num_speculative_tokens is its largest K"
    ]


def _config(server: ServerConfig, space: SearchSpace) -> dict[str, Any]:
    return server_yaml(server, space.version)


def _argv(server: ServerConfig, space: SearchSpace) -> list[str]:
    return server_argv(server, space.version, host="0.0.0.0", port=PORT)


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def _vllm_yaml(server: ServerConfig, space: SearchSpace, header: list[str]) -> str:
    config = _config(server, space)
    use = " ".join(["vllm", "serve", *config_file_argv(config, "FILE", model=server.model)])
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=None)
    return _comment([*header, f"use: {use}"]) + body


def _env_names(removed: list[str]) -> list[str]:
    return ["HF_TOKEN", *(["VLLM_API_KEY"] if "api-key" in removed else [])]


def _json(
    server: ServerConfig,
    space: SearchSpace,
    facts: Provenance,
    levels: list[LevelChoice],
    notes: list[str],
) -> str:
    data = {
        "provenance": serde.dump(facts),
        "notes": notes,
        "image": space.vllm_image,
        "vllm_config": _config(server, space),
        "argv": ["vllm", "serve", *_argv(server, space)],
        "speculation_by_level": [
            {
                "concurrency": c.concurrency,
                "k": c.k,
                "output_tok_s": c.output_tok_s,
                "trial": c.trial,
            }
            for c in levels
        ],
    }
    return json.dumps(data, indent=2) + "\n"
