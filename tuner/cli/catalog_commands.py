"""Commands that need no study: the GPU and model catalogs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table

from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors, print_json
from tuner.cli.options import parse_gpus
from tuner.errors import ConfigError

# The catalogs (YAML read through pydantic) load with the command, not with `spectune --help`.
if TYPE_CHECKING:
    from tuner.catalog.gpus import Hardware

__all__ = [
    "hardware_app",
    "hardware_command",
    "hardware_detect_command",
    "hardware_list_command",
    "models_command",
]


hardware_app = typer.Typer(
    help="The GPU catalog (also `hardware list`), and `hardware detect`: this host's GPUs.",
    no_args_is_help=False,
)
app.add_typer(hardware_app, name="hardware")


@hardware_app.callback(invoke_without_command=True)
def hardware_command(
    ctx: typer.Context, gpu_spec: opt.GpuSpecFile = None, as_json: opt.Json = False
) -> None:
    """List the GPU catalog (the same as `spectune hardware list`)."""
    if ctx.invoked_subcommand is None:  # the command as it was before it had subcommands
        _list_catalog(as_json)


@hardware_app.command("list")
def hardware_list_command(gpu_spec: opt.GpuSpecFile = None, as_json: opt.Json = False) -> None:
    """List the GPU catalog."""
    _list_catalog(as_json)


def _list_catalog(as_json: bool) -> None:
    from tuner.catalog.gpus import GpuSpec, known_gpus

    if as_json:
        print_json(list(known_gpus()), list[GpuSpec])
        return

    table = Table("GPU", "--hardware", "VRAM GiB", "bandwidth GB/s", "FP16 TFLOPS", "interconnect")
    for g in known_gpus():
        table.add_row(
            g.name,
            f"{g.notation}xN",
            f"{g.vram_gib:.1f}",
            f"{g.bandwidth_gbs:.0f}",
            f"{g.fp16_tflops:.0f}",
            f"{g.interconnect.value} {g.link_gbs:.0f} GB/s",
        )
    console.print(table)


@hardware_app.command("detect")
@handle_errors
def hardware_detect_command(
    gpus: opt.Gpus = None, gpu_spec: opt.GpuSpecFile = None, as_json: opt.Json = False
) -> None:
    """Show the GPUs NVML sees and the --hardware value they map to."""
    from tuner.catalog.gpus import NoGpu
    from tuner.catalog.nvml import detect_gpus

    detected = detect_gpus(None if gpus is None else parse_gpus(gpus))
    if isinstance(detected, NoGpu):
        raise ConfigError(detected.message)
    try:
        hardware: Hardware | None = detected.hardware()
        problem = None
    except ConfigError as error:  # what was found is still worth showing, with the fix
        hardware, problem = None, str(error)
    if as_json:
        from tuner.cli.outputs import DetectedOutput

        print_json(DetectedOutput.of(detected, hardware, problem))
        return
    console.print(
        f"NVIDIA driver {detected.driver}, CUDA {detected.cuda} (through NVML)", markup=False
    )
    table = Table("GPU", "name", "memory GiB")
    for gpu in detected.gpus:
        table.add_row(str(gpu.index), gpu.name, f"{gpu.memory_gib:.2f}")
    console.print(table)
    for link in detected.links:
        console.print(f"GPU {link.gpus[0]} <-> GPU {link.gpus[1]}: {link.path}", markup=False)
    if hardware is None:
        console.print(f"catalog: no match: {problem}", markup=False)
    else:
        console.print(f"catalog: {hardware.label}, --hardware {hardware.spec}", markup=False)


@app.command("models")
def models_command(as_json: opt.Json = False) -> None:
    """List the model catalog."""
    from tuner.catalog.models import CATALOG as MODEL_CATALOG
    from tuner.cli.render import fitted_table

    if as_json:
        from tuner.cli.outputs import ModelOutput

        print_json([ModelOutput.of(m) for m in MODEL_CATALOG], list[ModelOutput])
        return

    models = list(MODEL_CATALOG)
    columns = [  # the id first and whole: it is what the user types
        ("model", [m.hf_id for m in models]),
        ("params", [f"{m.params / 1e9:.1f}B" for m in models]),
        ("quant", [m.quantization for m in models]),
        ("weights GiB", [f"{m.weight_bytes / 1024**3:.1f}" for m in models]),
        ("tokenizer", [m.tokenizer_family for m in models]),
        ("layers", [str(m.layers) for m in models]),
        ("hidden", [str(m.hidden) for m in models]),
        ("heads/kv", [f"{m.heads}/{m.kv_heads}" for m in models]),
    ]
    console.print(fitted_table(columns, console.width))
