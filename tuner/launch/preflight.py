"""The pre-flight: the vLLM inside the study's image judges every config the space can propose.

Before the first trial, :func:`preflight` runs one short-lived container of the study's image
(no GPU, no network, the Hugging Face cache read-only, ``HF_HUB_OFFLINE``) whose own Python runs
:mod:`tuner.launch.preflight_script`: each candidate's ``vllm serve`` argv goes through vLLM's
own parser and ``create_engine_config()`` on the models' ``config.json`` (no weights; seconds).
It answers the image's vLLM version and one :class:`Verdict` per candidate: accepted, with the
model runner vLLM picked where it can tell, or refused with vLLM's own message.

:func:`space_candidates` turns a space into the candidates to judge. A config's validity turns
on its method, the method's settings and K, not on memory or batch size, so each speculation
choice is judged at its lowest K (its settings at their low ends) and its highest K (their high
ends), under every combination of the options it searches, at one memory utilization and one
batched-token count: a few dozen configs for a shipped space.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from tuner.config.choices import OPTION_ORDER, Option, SpecChoice
from tuner.config.space import SearchSpace
from tuner.config.trial import SpecMethod
from tuner.config.vllm_args import VllmVersion, server_argv
from tuner.errors import ConfigError, LaunchError
from tuner.launch.container_spec import VllmImage
from tuner.launch.containers import read_log, remove_container
from tuner.launch.engine import RunOwner, engine_calls
from tuner.launch.exit_hooks import signals_held
from tuner.launch.mounts import CONTAINER_HF_HOME, local_model_folders

__all__ = [
    "PREFLIGHT_TIMEOUT_S",
    "Candidate",
    "Preflight",
    "Verdict",
    "parse_answers",
    "preflight",
    "space_candidates",
]

# Importing vLLM takes 10-15 s, a config 20-100 ms; a cold image disk takes longer.
PREFLIGHT_TIMEOUT_S = 300.0
_SCRIPT = Path(__file__).with_name("preflight_script.py")
_MARK = "SPECTUNE-PREFLIGHT "  # the script's MARK
# Set by the container: offline, nothing reported home; HF_HOME where the cache is mounted.
_ENVIRONMENT = {
    "HF_HOME": CONTAINER_HF_HOME,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
_POLL_S = 0.25
# The engine's and the image's words for a Python that is not there, and for a missing vLLM.
_NO_PYTHON = ("executable file not found", "no such file or directory")
_NO_VLLM = "No module named 'vllm'"


@dataclass(frozen=True)
class Candidate:
    """One config to judge: its label and the argv after ``vllm serve``.

    Attributes:
        label: what a report names it by, e.g. ``eagle3:HEAD K=10 parallel_drafting=True``.
        argv: the model and flags, as spectune would start it.
        draft: the space's choice (the ``draft`` parameter); None outside a space.
        k: its K (0 without speculation).
        options: the option values it was judged with.
        folders: local model folders it names, mounted read-only at the same path.
    """

    label: str
    argv: tuple[str, ...]
    draft: str | None = None
    k: int = 0
    options: tuple[tuple[str, Option], ...] = ()
    folders: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """vLLM's answer on one candidate.

    Attributes:
        candidate: what was judged.
        ok: whether vLLM accepts it.
        message: vLLM's own reason when refused (the last line of its exception or of
            argparse's complaint).
        stage: where vLLM refused it: ``argparse`` or ``engine`` (the config classes).
        runner: the GPU model runner vLLM picked (``V1``/``V2``); None where it cannot tell.
    """

    candidate: Candidate
    ok: bool
    message: str | None = None
    stage: str | None = None
    runner: str | None = None

    @property
    def label(self) -> str:
        return self.candidate.label


@dataclass(frozen=True)
class Preflight:
    """The image's vLLM version as it reports it, and a verdict per candidate, in order."""

    version: str
    verdicts: tuple[Verdict, ...]

    @property
    def refused(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.ok)


def image_python(entrypoint: Sequence[str]) -> tuple[str, ...]:
    """The Python beside the image's vLLM: the ``python`` next to an entrypoint that names a
    ``vllm`` program (a virtual environment's), else the image's ``python3``
    (``vllm/vllm-openai``'s)."""
    if entrypoint and Path(entrypoint[0]).name == "vllm" and "/" in entrypoint[0]:
        return (str(Path(entrypoint[0]).with_name("python")),)
    return ("python3",)


def space_candidates(space: SearchSpace, version: VllmVersion | None = None) -> list[Candidate]:
    """The configs of ``space`` to judge, each argv once, in the order of its choices.

    Args:
        space: the search space.
        version: the flag dialect to spell them in; default the space's.
    """
    version = version or space.version
    util = space.gpu_memory_utilization.high
    batched = max(space.max_num_batched_tokens)
    temperature = (
        space.trial_temperature
        if isinstance(space.trial_temperature, float)
        else space.trial_temperature.low
    )
    found: dict[tuple[str, ...], Candidate] = {}
    for choice in space.choices:
        for k, settings in _k_ends(choice):
            for options in _option_sets(choice):
                spec = choice.speculative(k, {**settings, **options})
                server = space.config(spec, util, batched, temperature).server
                argv = tuple(server_argv(server, version, host="0.0.0.0", port=8000))
                found.setdefault(
                    argv,
                    Candidate(
                        _label(choice, k, settings, options),
                        argv,
                        choice.label,
                        k,
                        tuple(options.items()),
                        tuple(local_model_folders(server)),
                    ),
                )
    return list(found.values())


def _k_ends(choice: SpecChoice) -> Iterator[tuple[int, dict[str, float]]]:
    """The lowest K with the settings' low ends, the highest with their high ends; a window's
    max never below its min, as :meth:`SpecChoice.suggest` asks it."""
    if choice.method is SpecMethod.NONE:
        yield 0, {}
        return
    for k, high in ((choice.k.low, False), (choice.k.high, True)):
        values = {name: r.high if high else r.low for name, r in choice.settings}
        if not high and "prompt_lookup_max" in values:
            values["prompt_lookup_max"] = max(
                values["prompt_lookup_max"], values.get("prompt_lookup_min", 0.0)
            )
        yield int(k), values


def _option_sets(choice: SpecChoice) -> list[dict[str, Option]]:
    """Every combination of the options ``choice`` searches, as it can propose them (a
    P-EAGLE variant keeps the V1 values), each once."""
    names = [name for name in OPTION_ORDER if name in dict(choice.options)]
    found: list[dict[str, Option]] = []
    for values in itertools.product(*(choice.allowed(name) for name in names)):
        fitted = choice.fitted(dict(zip(names, values, strict=True)))
        if fitted not in found:
            found.append(fitted)
    return found


def _label(
    choice: SpecChoice, k: int, settings: Mapping[str, float], options: Mapping[str, Option]
) -> str:
    """The choice, K and the values of what it searches, e.g. ``ngram K=1 prompt_lookup_min=1``."""
    if choice.method is SpecMethod.NONE:
        return choice.label
    tuned = set(choice.tuned)
    shown = {**{n: int(v) if v == int(v) else v for n, v in settings.items()}, **options}
    parts = [f"{name}={value}" for name, value in shown.items() if name in tuned]
    return " ".join([choice.label, f"K={k}", *parts])


def preflight(  # noqa: PLR0913  (the image, the candidates and the container's settings)
    client: docker.DockerClient,
    image: VllmImage | str,
    candidates: Sequence[Candidate],
    *,
    hf_cache: Path,
    python: Sequence[str] = ("python3",),
    gpus: int = 1,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    volumes: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Preflight:
    """Asks the vLLM in ``image`` to judge each candidate, in one container that is removed.

    Args:
        client: the engine.
        image: the study's image (present on this host: :func:`~tuner.launch.images.ensure_image`
            first).
        candidates: what to judge (:func:`space_candidates`).
        hf_cache: the host's Hugging Face cache (``HF_HOME``) holding the models' config.json.
        python: the image's Python that imports vLLM.
        gpus: the GPUs vLLM is to count (its world-size check) when it sees none.
        timeout_s: how long the container may take.
        volumes: extra bind mounts, host path to ``container_path[:mode]``.
        environment: extra container environment.
        labels: extra container labels (the study's, so a later run removes a leftover).

    Raises:
        ConfigError: the image is not on this host, has no ``python`` or no vLLM for it.
        LaunchError: the engine refused the container, or the judge crashed or took too long.
        EngineUnavailable: the engine went away.
    """
    name = image.name if isinstance(image, VllmImage) else image
    request = {"gpus": gpus, "candidates": [{"label": c.label, "argv": c.argv} for c in candidates]}
    mounts = [f"{hf_cache}:{CONTAINER_HF_HOME}:ro"]
    mounts += [f"{host}:{target}" for host, target in (volumes or {}).items()]
    folders = dict.fromkeys(f for c in candidates for f in c.folders)
    mounts += [f"{folder}:{folder}:ro" for folder in folders if str(folder) not in (volumes or {})]
    container: Container | None = None
    try:
        # Held: the engine finishes a create the client gave up on, and it is removed below.
        with signals_held(), engine_calls(f"creating the pre-flight container of {name}"):
            container = client.containers.create(
                name,
                ["-c", _SCRIPT.read_text(encoding="utf-8"), json.dumps(request)],
                name=f"spectune-preflight-{uuid.uuid4().hex[:8]}",
                entrypoint=list(python),
                environment={**_ENVIRONMENT, **(environment or {})},
                volumes=mounts,
                labels={**RunOwner.current().labels(), **(labels or {})},
                network_disabled=True,
                detach=True,
            )
        with engine_calls(f"running the pre-flight in {name}"):
            container.start()
        _wait(container, name, timeout_s)
        log = read_log(container)
    except docker.errors.ImageNotFound as error:
        raise ConfigError(
            f"image {name} is not on this host, so its vLLM cannot judge the space: pull it "
            f"(docker pull {name}) or pass another --image"
        ) from error
    except docker.errors.APIError as error:
        raise _refusal(name, python, str(error.explanation or error)) from error
    finally:
        if container is not None:
            remove_container(container)
    return parse_answers(log, candidates, image=name, python=python)


def _wait(container: Container, image: str, timeout_s: float) -> None:
    """Until the container exits; a :class:`LaunchError` past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with engine_calls(f"waiting for the pre-flight in {image}"):
            container.reload()
        if container.status in ("exited", "dead"):
            return
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"the pre-flight in image {image} gave no answer within {timeout_s:.0f} s: "
                "check that the image's disk and CPU are not starved, or raise its timeout"
            )
        time.sleep(_POLL_S)


def _refusal(image: str, python: Sequence[str], reason: str) -> ConfigError | LaunchError:
    """The engine's refusal to create or start the container, as one line."""
    reason = " ".join(reason.split())
    if any(words in reason.lower() for words in _NO_PYTHON):
        return ConfigError(
            f"image {image} has no {python[0]} to run the pre-flight with ({reason}): name the "
            "image's Python that imports vLLM"
        )
    return LaunchError(f"docker could not run the pre-flight in image {image}: {reason}")


def parse_answers(
    log: str, candidates: Sequence[Candidate], *, image: str, python: Sequence[str] = ("python3",)
) -> Preflight:
    """The version and one verdict per candidate from the judge's output.

    Args:
        log: the container's output (vLLM's log lines among the answers).
        candidates: what was asked, in order.
        image: the image, for messages.
        python: the Python that ran the judge, for messages.

    Raises:
        ConfigError: the image's Python has no vLLM.
        LaunchError: the judge ended before answering for every candidate.
    """
    answers: list[dict[str, Any]] = []
    for line in log.splitlines():
        if line.startswith(_MARK):
            answers.append(json.loads(line.removeprefix(_MARK)))
    versions = [a["version"] for a in answers if "version" in a]
    verdicts = [a["verdict"] for a in answers if "verdict" in a]
    if not versions:
        if _NO_VLLM in log:
            raise ConfigError(
                f"image {image} has no vLLM for {python[0]}, so it cannot judge the space: use "
                "a vLLM image, or name the image's Python that imports vLLM"
            )
        raise LaunchError(f"the pre-flight in image {image} crashed: {_last_line(log)}")
    if len(verdicts) != len(candidates):
        raise LaunchError(
            f"the pre-flight in image {image} (vLLM {versions[0]}) ended after "
            f"{len(verdicts)} of {len(candidates)} configs: {_last_line(log)}"
        )
    return Preflight(
        versions[0],
        tuple(
            Verdict(
                candidate,
                ok=bool(answer["ok"]),
                message=answer.get("error"),
                stage=answer.get("stage"),
                runner=answer.get("runner"),
            )
            for candidate, answer in zip(candidates, verdicts, strict=True)
        ),
    )


def _last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
