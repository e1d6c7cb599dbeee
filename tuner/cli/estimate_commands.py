"""``spectune estimate``: one config's predicted speed and memory, with how wrong it may be."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.catalog.spec_method import SpecMethod
from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors, print_json
from tuner.config.vllm_version import check_release
from tuner.errors import ConfigError

if TYPE_CHECKING:  # the simulator loads with the command, not with `spectune --help`
    from tuner.sim.estimate import Estimate, SettingValue

__all__ = ["estimate_command"]

_METHODS = ", ".join(str(m) for m in SpecMethod)


def parse_settings(pairs: list[str] | None) -> dict[str, SettingValue]:
    """``--set NAME=VALUE`` pairs as typed values (``5``, ``0.1``, ``true``, ``block``).

    Raises:
        ConfigError: a pair without ``=``.
    """
    import yaml

    settings: dict[str, SettingValue] = {}
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"--set {pair!r}: write NAME=VALUE, e.g. --set prompt_lookup_max=5 or "
                "--set rejection_sample_method=block"
            )
        value = yaml.safe_load(text)
        settings[name.strip()] = value if isinstance(value, int | float | bool) else text.strip()
    return settings


@app.command("estimate")
@handle_errors
def estimate_command(
    hardware: Annotated[str, typer.Option("--hardware", help="GPUs, e.g. 4090x2.")],
    model: Annotated[str, typer.Option("--model", help="Target: HF id or local directory.")],
    method: Annotated[
        str | None,
        typer.Option(
            "--method", help=f"Speculation method ({_METHODS}); default: what --draft is."
        ),
    ] = None,
    draft: Annotated[
        str,
        typer.Option(
            "--draft", help="Draft model, EAGLE head or block drafter (id or folder), ngram, none."
        ),
    ] = "none",
    k: opt.SpecTokens = 4,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="The method's own setting or option, NAME=VALUE (repeat), e.g. "
            "prompt_lookup_max=5, parallel_drafting=true, rejection_sample_method=block.",
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            help="code, sharegpt (real prompts), creative, chat, long-context (synthetic).",
        ),
    ] = "code",
    temperature: opt.Temperature = 0.2,
    gpu_memory_utilization: opt.GpuMemoryUtilization = 0.92,
    max_num_batched_tokens: opt.BatchTokens = 2048,
    max_model_len: opt.MaxModelLen = 8192,
    concurrency: opt.Concurrency = 1,
    input_tokens: opt.InputTokens = 512,
    output_tokens: opt.OutputTokens = 256,
    vllm_version: Annotated[
        str | None,
        typer.Option("--vllm-version", help="Whose rules and engine apply (default: newest)."),
    ] = None,
    study: Annotated[
        str | None, typer.Option("--study", help="Predict with this study's fitted twin.")
    ] = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    gpu_spec: opt.GpuSpecFile = None,
    as_json: opt.Json = False,
) -> None:
    """Predict one config's speed and memory with the simulator (nothing is launched)."""
    from tuner.catalog.gpus import parse_hardware
    from tuner.catalog.models import load_model
    from tuner.config.context import check_lengths
    from tuner.config.workload import WorkloadSpec
    from tuner.sim.estimate import estimate
    from tuner.study.twin_calibrate import study_physics  # the trial runner's HTTP clients

    lengths = ("--max-model-len", "--input-tokens", "--output-tokens")
    check_lengths(load_model(model), max_model_len, input_tokens, output_tokens, lengths)
    spec = WorkloadSpec(
        prompt_set=workload,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=(concurrency,),
        requests=max(8, 4 * concurrency),
    )
    parsed = parse_hardware(hardware)
    physics = study_physics(study, storage, studies_dir, parsed, model)
    power = None
    if study is not None:  # the study's own GPUs' draw, where it read them
        from tuner.study.paths import default_storage
        from tuner.study.twin_power import study_power

        power = study_power(storage or default_storage(study, studies_dir), study, physics)
    result = estimate(
        parsed,
        model,
        method=method,
        draft=draft,
        k=k,
        settings=parse_settings(settings),
        workload=spec,
        temperature=temperature,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        concurrency=concurrency,
        physics=physics,
        vllm_version=None if vllm_version is None else check_release(vllm_version),
        power_scale=power,
    )
    if as_json:
        from tuner.cli.outputs import EstimateOutput

        print_json(EstimateOutput.of(result))
    else:
        _print_estimate(result)


def _print_estimate(est: Estimate) -> None:
    m = est.memory
    console.print(
        f"[bold]Predicted[/bold] (simulator, nothing launched) for {est.server.model} "
        f"on {est.hardware.label}",
        highlight=False,
    )
    console.print(
        f"  memory per GPU: weights {m.weights_gib:.2f} GiB, draft {m.draft_gib:.2f}, "
        f"activations {m.activation_gib:.2f}, overhead {m.overhead_gib:.2f}, "
        f"KV cache {m.kv_cache_gib:.2f} GiB ({m.kv_tokens} tokens) of budget {m.budget_gib:.2f} "
        f"/ {m.gpu_total_gib:.2f} GiB",
        highlight=False,
    )
    if est.result is None:
        console.print(f"  verdict: does NOT fit: {m.reason}", markup=False, highlight=False)
        return
    r = est.result
    accept = r.acceptance_rate
    console.print("  verdict: fits")
    console.print(
        f"  simulated {r.output_tok_s:.1f} output tok/s, {est.band.describe()}",
        markup=False,
        highlight=False,
    )
    console.print(
        f"  TTFT p50 {r.ttft_ms(50):.0f} ms / p95 {r.ttft_ms(95):.0f} ms, TPOT "
        f"{r.tpot_ms(50) or 0:.1f} ms, draft acceptance "
        + ("n/a" if accept is None else f"{accept * 100:.1f} %"),
        highlight=False,
    )
    console.print(f"  {_energy_line(est)}", markup=False, highlight=False)


def _energy_line(est: Estimate) -> str:
    """``simulated 3.10 J/token (0.32 tok/J) at 412 W, +/- 40 %: power +/- 26 % (...), plus
    throughput +/- 14 %``, or why there is none."""
    r = est.result
    per_token = None if r is None else r.joules_per_token
    if r is None or r.gpu is None or per_token is None or est.power_band is None:
        return f"energy: unknown ({est.hardware.gpu.name} has no board power in the catalog)"
    error = est.energy_error
    speed = est.band.error
    power = est.power_scale.describe() if est.power_scale else est.power_band.describe()
    return (
        f"simulated {per_token:.2f} J/token ({1 / per_token:.2f} tok/J) at "
        f"{r.gpu.mean_power_w or 0:.0f} W, "
        + ("error unknown" if error is None else f"+/- {error * 100:.0f} %")
        + f": power {power}, plus throughput "
        + ("(too few public figures)" if speed is None else f"+/- {speed * 100:.0f} %")
    )
