"""Study commands: optimize, worker, estimate, and the catalogs."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tuner.bench.gpu import gpu_names
from tuner.bench.workload import WorkloadSpec
from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors, print_json
from tuner.cli.options import backend_options, parse_gpus
from tuner.confirm import Run
from tuner.estimate import Estimate, estimate
from tuner.hardware import CATALOG as GPU_CATALOG
from tuner.hardware import parse_hardware
from tuner.models import CATALOG as MODEL_CATALOG
from tuner.optimize import OptimizeRequest, OptimizeResult, optimize
from tuner.recommend import TrialView
from tuner.render import (
    config_label,
    confirm_run_line,
    confirmed_table,
    outcome_row,
    trial_table,
    views_table,
)
from tuner.runner import TrialOutcome
from tuner.space import SearchSpace, load_space
from tuner.storage import default_storage, safe_url, study_exists
from tuner.trial_config import server_to_dict
from tuner.workers import WorkerRequest, run_worker


def _build_space(
    space: str | None, hardware: str | None, slo_ttft_ms: float | None, vllm_version: str | None
) -> SearchSpace:
    loaded = load_space(space)
    if hardware is not None:
        loaded = loaded.with_hardware(parse_hardware(hardware))
    if slo_ttft_ms is not None:
        loaded = loaded.with_ttft_limit(slo_ttft_ms)
    if vllm_version is not None:
        loaded = loaded.with_vllm_version(vllm_version)
    return loaded


@app.command("optimize")
@handle_errors
def optimize_command(
    hardware: opt.Hardware = None,
    space: Annotated[
        str | None,
        typer.Option(
            "--space", help="Search space: a shipped name or a YAML path (default: default)."
        ),
    ] = None,
    backend: opt.Backend = "docker",
    trials: Annotated[int, typer.Option("--trials", help="Trials to run now (all workers).")] = 30,
    study: opt.StudyName = None,
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    sampler: opt.Sampler = "spectune",
    seed: opt.Seed = 0,
    slo_ttft_ms: Annotated[
        float | None,
        typer.Option("--slo-ttft-ms", help="p95 TTFT limit in ms (default from the space)."),
    ] = None,
    vllm_version: Annotated[
        str | None,
        typer.Option(
            "--vllm-version",
            help="vLLM version whose flags to speak (default: the image tag, "
            "or `vllm --version` for the process backend).",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            help="Parallel workers on this host, each on its own GPUs (needs PostgreSQL).",
        ),
    ] = 1,
    gpus_per_trial: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-trial", help="GPUs each worker uses (default: the hardware's count)."
        ),
    ] = None,
    gpus: opt.Gpus = None,
    vllm_command: opt.VllmCommand = "vllm",
    image: opt.Image = None,
    docker_volume: opt.DockerVolume = None,
    docker_entrypoint: opt.DockerEntrypoint = "vllm",
    sim_speed: opt.SimSpeed = None,
    ready_timeout: opt.ReadyTimeout = 900.0,
    request_timeout: opt.RequestTimeout = 120.0,
    confirm_top: Annotated[
        int,
        typer.Option(
            "--confirm-top", help="Best configs measured again on fresh servers (0: none)."
        ),
    ] = 3,
    confirm_repeats: Annotated[
        int, typer.Option("--confirm-repeats", help="Fresh runs per confirmed config.")
    ] = 3,
    as_json: opt.Json = False,
) -> None:
    """Run a tuning study, confirm the best configs, and export the recommended one."""
    explicit = any(v is not None for v in (space, hardware, slo_ttft_ms, vllm_version))
    built = _build_space(space, hardware, slo_ttft_ms, vllm_version)
    name = study or built.name
    url = storage or default_storage(name, studies_dir)
    resume_only = not explicit and study_exists(url, name)
    options = backend_options(
        name,
        seed,
        vllm_command,
        image,
        docker_volume,
        docker_entrypoint,
        sim_speed,
        ready_timeout,
        request_timeout,
    )
    if gpus is not None:
        options = replace(options, gpus=parse_gpus(gpus))
    request = OptimizeRequest(
        name,
        None if resume_only else built,
        backend,
        trials,
        studies_dir,
        storage=url,
        sampler=sampler,
        seed=seed,
        workers=workers,
        gpus_per_trial=gpus_per_trial,
        backend_options=options,
        confirm_top=confirm_top,
        confirm_repeats=confirm_repeats,
    )
    if as_json:
        print_json(_optimize_json(optimize(request)))
        return
    source = "simulated" if backend == "sim" else "measured"
    table = trial_table(f"study {name}: {source} trials")
    progress = Progress(
        TextColumn("trials"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("trials", total=trials)

    def on_confirm(number: int, repeat: int, run: Run) -> None:
        console.print(confirm_run_line(number, repeat, run, confirm_repeats, source))

    def on_tick(finished: int) -> None:  # worker processes report through the database
        progress.update(task, completed=finished)

    def on_trial(number: int, outcome: TrialOutcome | None, note: str | None) -> None:
        if outcome is not None:
            table.add_row(*outcome_row(number, outcome))
        else:
            status, _, detail = (note or "").partition(": ")
            table.add_row(str(number), *["-"] * 9, status)
            if detail:
                progress.console.print(f"trial {number} {status}: {detail}", markup=False)
        progress.advance(task)

    with Live(Group(table, progress), console=console, refresh_per_second=4):
        result = optimize(request, on_trial, on_tick=on_tick, on_confirm=on_confirm)
    console.print()
    _print_optimize(result)


@app.command("worker")
@handle_errors
def worker_command(
    study: Annotated[str, typer.Option("--study", help="The study to join (must exist).")],
    storage: Annotated[
        str, typer.Option("--storage", help="The study's database URL.", envvar="SPECTUNE_STORAGE")
    ],
    backend: opt.Backend = "docker",
    studies_dir: opt.StudiesDir = Path("studies"),
    gpus: opt.Gpus = None,
    hardware: opt.Hardware = None,
    worker_id: Annotated[
        str, typer.Option("--worker-id", help="Names this worker's containers on this host.")
    ] = "0",
    sampler: opt.Sampler = "spectune",
    seed: opt.Seed = 0,
    vllm_command: opt.VllmCommand = "vllm",
    image: opt.Image = None,
    docker_volume: opt.DockerVolume = None,
    docker_entrypoint: opt.DockerEntrypoint = "vllm",
    sim_speed: opt.SimSpeed = None,
    ready_timeout: opt.ReadyTimeout = 900.0,
    request_timeout: opt.RequestTimeout = 120.0,
) -> None:
    """Join an existing study from this host and run trials until its budget is used up."""
    options = replace(
        backend_options(
            study,
            seed,
            vllm_command,
            image,
            docker_volume,
            docker_entrypoint,
            sim_speed,
            ready_timeout,
            request_timeout,
        ),
        gpus=None if gpus is None else parse_gpus(gpus),
        worker=worker_id,
    )
    request = WorkerRequest(
        study,
        storage,
        backend,
        studies_dir,
        options,
        sampler,
        None if hardware is None else parse_hardware(hardware),
    )
    run_worker(request, detected=gpu_names(options.gpus) if backend != "sim" else None)
    console.print(f"worker {worker_id}: study {study} has used up its trial budget")


def _view_json(view: TrialView) -> dict[str, Any]:
    return {
        "trial": view.number,
        "source": view.source,
        "output_tok_s": view.output_tok_s,
        "p95_ttft_ms": view.p95_ttft_ms,
        "status": view.status,
        "temperature": view.temperature,
        "server": server_to_dict(view.server),
        "summary": view.summary,
    }


def _optimize_json(result: OptimizeResult) -> dict[str, Any]:
    return {
        "study": result.study,
        "storage": safe_url(result.storage),
        "trials": result.trials,
        "pareto_front": [_view_json(v) for v in result.pareto],
        "recommended": None if result.recommended is None else _view_json(result.recommended),
        "best_yaml": None if result.best_yaml is None else str(result.best_yaml),
    }


def _print_optimize(result: OptimizeResult) -> None:
    source = result.recommended.source if result.recommended else "n/a"
    console.print(views_table(f"Pareto front (feasible, {source})", result.pareto))
    if result.recommended is None:
        console.print(
            "No trial met the constraints: no config recommended. Run more trials or "
            "relax --slo-ttft-ms."
        )
        return
    if result.confirmed:
        console.print(confirmed_table(result.confirmed, result.space.ttft_limit_ms))
    best = result.recommended
    confirmed = {c.trial: c for c in result.confirmed}.get(best.number)
    tok_s, ttft = f"{best.output_tok_s:.1f}", f"{best.p95_ttft_ms:.0f}"
    if confirmed and confirmed.output_tok_s and confirmed.p95_ttft_ms:
        tok_s, ttft = confirmed.output_tok_s.format(1), confirmed.p95_ttft_ms.format(0)
    limit = result.space.ttft_limit_ms
    console.print(
        f"Recommended (highest throughput within p95 TTFT <= {limit:.0f} ms): "
        f"trial {best.number}: {config_label(best.server, best.temperature)}\n"
        f"  {best.source}: {tok_s} output tok/s, p95 TTFT {ttft} ms"
        + (f" (confirmed over {len(confirmed.runs)} fresh runs)" if confirmed else "")
    )
    where = safe_url(result.storage)
    console.print(f"Wrote {result.best_yaml} (vllm serve --config); study in {where}")


@app.command("estimate")
@handle_errors
def estimate_command(
    hardware: Annotated[str, typer.Option("--hardware", help="GPUs, e.g. 4090x2.")],
    model: Annotated[str, typer.Option("--model", help="Target: HF id or local directory.")],
    draft: Annotated[str, typer.Option("--draft", help="Draft model, ngram, or none.")] = "none",
    k: Annotated[int, typer.Option("--k", help="Speculative tokens per step.")] = 4,
    workload: Annotated[
        str, typer.Option("--workload", help="code, creative, chat, long-context.")
    ] = "code",
    temperature: Annotated[float, typer.Option("--temperature")] = 0.2,
    gpu_memory_utilization: Annotated[float, typer.Option("--gpu-memory-utilization")] = 0.92,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens")] = 2048,
    max_model_len: Annotated[int, typer.Option("--max-model-len")] = 8192,
    concurrency: Annotated[int, typer.Option("--concurrency")] = 1,
    input_tokens: Annotated[int, typer.Option("--input-tokens")] = 512,
    output_tokens: Annotated[int, typer.Option("--output-tokens")] = 256,
    as_json: opt.Json = False,
) -> None:
    """Predict one config's speed and memory with the simulator (nothing is launched)."""
    spec = WorkloadSpec(
        prompt_set=workload,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=(concurrency,),
        requests=max(8, 4 * concurrency),
    )
    result = estimate(
        parse_hardware(hardware),
        model,
        draft=draft,
        k=k,
        workload=spec,
        temperature=temperature,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        concurrency=concurrency,
    )
    if as_json:
        print_json(_estimate_json(result))
    else:
        _print_estimate(result)


def _estimate_json(est: Estimate) -> dict[str, Any]:
    return {
        "source": "predicted",
        "hardware": est.hardware.label,
        "server": server_to_dict(est.server),
        "memory_per_gpu_gib": asdict(est.memory),
        "fits": est.memory.fits,
        "result": None if est.result is None else est.result.summary(),
    }


def _print_estimate(est: Estimate) -> None:
    m = est.memory
    console.print(
        f"[bold]Predicted[/bold] (simulator, nothing launched) for {est.server.model} "
        f"on {est.hardware.label}"
    )
    console.print(
        f"  memory per GPU: weights {m.weights_gib:.2f} GiB, draft {m.draft_gib:.2f}, "
        f"activations {m.activation_gib:.2f}, overhead {m.overhead_gib:.2f}, "
        f"KV cache {m.kv_cache_gib:.2f} GiB ({m.kv_tokens} tokens) of budget {m.budget_gib:.2f} "
        f"/ {m.gpu_total_gib:.2f} GiB"
    )
    if est.result is None:
        console.print(f"  verdict: does NOT fit: {m.reason}")
        return
    r = est.result
    accept = r.acceptance_rate
    console.print("  verdict: fits")
    console.print(
        f"  predicted: {r.output_tok_s:.1f} output tok/s, TTFT p50 {r.ttft_ms(50):.0f} ms / "
        f"p95 {r.ttft_ms(95):.0f} ms, TPOT {r.tpot_ms(50) or 0:.1f} ms, draft acceptance "
        + ("n/a" if accept is None else f"{accept * 100:.1f} %")
    )


@app.command("hardware")
def hardware_command(as_json: opt.Json = False) -> None:
    """List the GPU catalog."""
    rows = [asdict(g) for g in GPU_CATALOG]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table("GPU", "--hardware", "VRAM GiB", "bandwidth GB/s", "FP16 TFLOPS", "interconnect")
    for g in GPU_CATALOG:
        table.add_row(
            g.name,
            f"{g.aliases[0]}xN",
            f"{g.vram_gib:.1f}",
            f"{g.bandwidth_gbs:.0f}",
            f"{g.fp16_tflops:.0f}",
            f"{g.interconnect.value} {g.link_gbs:.0f} GB/s",
        )
    console.print(table)


@app.command("models")
def models_command(as_json: opt.Json = False) -> None:
    """List the model catalog."""
    if as_json:
        print_json([{**asdict(m), "weight_gib": m.weight_bytes / 1024**3} for m in MODEL_CATALOG])
        return
    from rich.table import Table

    table = Table(
        "model", "tokenizer", "params", "layers", "hidden", "heads/kv", "quant", "weights GiB"
    )
    for m in MODEL_CATALOG:
        table.add_row(
            m.hf_id,
            m.tokenizer_family,
            f"{m.params / 1e9:.1f}B",
            str(m.layers),
            str(m.hidden),
            f"{m.heads}/{m.kv_heads}",
            m.quantization,
            f"{m.weight_bytes / 1024**3:.1f}",
        )
    console.print(table)
