"""``spectune prefetch``: the models a study can start (and its vLLM image), on this host
before the first trial, so no trial's start-up clock waits for a download."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.app import app, console, handle_errors
from tuner.errors import ConfigError
from tuner.results import StartupEvent

if TYPE_CHECKING:
    from tuner.study.prefetch import PrefetchedModel

__all__ = ["prefetch_command"]


@app.command("prefetch")
@handle_errors
def prefetch_command(
    space: Annotated[
        str | None,
        typer.Option(
            "--space",
            help="Search space whose target and drafts to fetch: a shipped name or a YAML path "
            "(default: default).",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="A target to fetch instead of a space's: Hugging Face id."),
    ] = None,
    draft: Annotated[
        list[str] | None,
        typer.Option("--draft", help="With --model: a draft or head to fetch too (repeatable)."),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", help="A vLLM image to pull too (docker backend), if missing."),
    ] = None,
) -> None:
    """Download the weights of the target and every draft into the Hugging Face cache."""
    # Here, not at the top: huggingface_hub and its HTTP client cost `spectune --help` a second,
    # the search space a few tenths.
    from tuner.catalog.hub import hub_cache_dir
    from tuner.config.space import load_space
    from tuner.study.prefetch import models_to_fetch, prefetch

    if model is not None and space is not None:
        raise ConfigError("--space and --model both given: fetch a space's models or name them")
    if draft and model is None:
        raise ConfigError("--draft needs --model (a space names its own drafts): add --model ID")
    names = [model, *(draft or ())] if model is not None else models_to_fetch(load_space(space))
    if image is not None:
        _pull(image)
    fetched = prefetch(names)
    for item in fetched:
        console.print(_line(item), markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"ready: {len(fetched)} model(s){f' and image {image}' if image else ''} on this host "
        f"(Hugging Face cache {hub_cache_dir()}); trials will not wait for downloads",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _pull(image: str) -> None:
    from tuner.launch.engine import check_engine  # the docker SDK: only when pulling
    from tuner.launch.images import ensure_image

    client = check_engine()
    try:
        with console.status(f"image {image}") as status:

            def show(event: StartupEvent) -> None:
                status.update(f"image {image}: {event.phase}, {event.detail}")

            pulled = ensure_image(client, image, show)
    finally:
        client.close()
    done = "pulled" if pulled else "already on this host"
    console.print(f"image {image}: {done}", markup=False, highlight=False, soft_wrap=True)


def _line(item: PrefetchedModel) -> str:
    if item.local:
        return f"{item.name}: local folder {item.path}, mounted read-only (not downloaded)"
    fetched = f"downloaded {_size(item.downloaded_bytes)}" if item.downloaded_bytes else "cached"
    return f"{item.name}: {_size(item.size_bytes)} ({fetched}) at {item.path}"


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
