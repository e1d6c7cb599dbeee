"""README's GPU-host quick start, as written, on the real Docker Engine with real vLLM.

The commands are README's, run one after the other in a fresh folder with the installed
``spectune`` and the default relative studies folder. What a host without a GPU must add comes
from the environment, through the rule every option follows (docs/reference/cli.md):
``SPECTUNE_<COMMAND>_<OPTION>``. There:

- the space: the tiny random model (:mod:`testbed`) with vLLM's CPU flags, not README's 2026
  space for Qwen3-Coder-30B. README names that space on the command line, which outranks a
  variable, so the one argument ``--space SHIPPED`` is swapped for the CPU space's file on the
  lines that run it (``space check`` runs as written: it needs no GPU);
- the image: the empty test image, with the host's system and the vLLM CPU venv bind-mounted
  (``--docker-volume``) and that venv's ``vllm`` as ``--docker-entrypoint``; ``--gpus none``;
- the budget: 2 trials and one confirmation run, not 30 and 3 x 3 (each start is about 30 s);
- the dashboard's port: a free one, not 8080 (other runs on a shared machine may hold it).

Nothing else differs from what a user types; the command lines themselves are README's.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from tests.testbed import CPU_MAX_MODEL_LEN, TinyModels, vllm_venv
from tests.testbed.docker_host import docker_or_skip, empty_image, host_volumes
from tests.userpath.readme_blocks import tagged_block
from tests.userpath.userpath_support import User, recommended
from tuner.export.vllm import FORMATS
from tuner.launch.docker import LABEL_STUDY

pytestmark = [pytest.mark.userpath, pytest.mark.docker, pytest.mark.vllm]

STUDY = "first"  # README's quick start names its study
SHIPPED = "qwen3-coder-30b-fp8-4090x2-2026"  # README's space: Qwen3-Coder-30B on two 4090s


def _cpu_space(models: TinyModels) -> dict[str, Any]:
    return {
        "name": "tiny-cpu",
        "hardware": "4090x1",  # the pre-screen sizes the tiny model against one 4090
        "target": str(models.target),
        "server": {
            "max_model_len": CPU_MAX_MODEL_LEN,
            "extra_flags": {"enforce-eager": True, "kv-cache-memory-bytes": "64M"},
        },
        "vllm": {"version": "0.32.0"},  # the empty image has no tag to read it from
        "slo": {"ttft_ms": 60000},
        "workload": {
            "input_tokens": 32,
            "output_tokens": 16,
            "concurrency": [1],
            "temperature": 0.0,
            "requests": 4,
            "warmup": 1,
        },
        "search": {
            "methods": ["none", {"method": "ngram", "num_speculative_tokens": 2}],
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [512],
        },
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cpu_host(user: User, models: TinyModels, image: str, host: Path) -> Path:
    """What a host without a GPU adds, as SPECTUNE_<COMMAND>_<OPTION> variables; returns the
    CPU space that stands in for README's."""
    host.mkdir()
    space = host / "cpu-host-space.yaml"
    space.write_text(yaml.safe_dump(_cpu_space(models)))
    mounts = host_volumes(host / "container-tmp", vllm_venv().resolve(), models.target.parent)
    container_env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # see testbed.vllm_env
    }
    user.env.update(
        SPECTUNE_OPTIMIZE_IMAGE=image,
        SPECTUNE_OPTIMIZE_GPUS="none",
        SPECTUNE_OPTIMIZE_DOCKER_VOLUME=" ".join(f"{h}:{c}" for h, c in mounts.items()),
        SPECTUNE_OPTIMIZE_DOCKER_ENTRYPOINT=str(vllm_venv() / "bin" / "vllm"),
        SPECTUNE_OPTIMIZE_DOCKER_ENV=" ".join(f"{k}={v}" for k, v in container_env.items()),
        SPECTUNE_OPTIMIZE_TRIALS="2",
        SPECTUNE_OPTIMIZE_CONFIRM_TOP="1",
        SPECTUNE_OPTIMIZE_CONFIRM_REPEATS="1",
        SPECTUNE_DASHBOARD_PORT=str(_free_port()),
    )
    return space


def _live_row(output: str, trial: int) -> tuple[float, float]:
    """tok/s and TTFT of ``trial``'s row in optimize's live table (its single measurement)."""
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] == str(trial) and len(cells) >= 11 and cells[-1] == "ok":
            return float(cells[6]), float(cells[7])
    raise AssertionError(f"no live-table row for trial {trial}:\n{output[-3000:]}")


def assert_report_leads_with_the_answer(html: str, trial: int, throughput: float) -> None:
    """What the report must show of the recommendation: the "Recommended" section first, with
    the recommended trial, the command that serves it, and the study's measured numbers."""
    assert "measured" in html and STUDY in html
    headline = html.index("<section id='recommended'>")
    assert html.index("<h2>") > headline  # no section comes before it
    top = html[headline : html.index("</section>", headline)]
    assert "<h2>Recommended: " in top
    assert f"Trial {trial}," in top
    assert re.search(r"vllm serve \S* ?--config best\.yaml", top), top
    assert f"{throughput:.1f}" in html


def _dashboard(user: User, line: str) -> dict[str, Any]:
    """Starts README's dashboard line, reads the recommended study's trials from its API, and
    stops it with Ctrl-C (SIGINT)."""
    server = user.start(line)
    port = user.env["SPECTUNE_DASHBOARD_PORT"]
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=10) as api:
        while True:
            assert server.poll() is None, server.communicate()
            try:
                (study,) = api.get("/api/studies").json()["study_summaries"]
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the dashboard did not answer in 60 s"
                time.sleep(0.5)
        detail: dict[str, Any] = api.get(f"/api/studies/{study['study_id']}").json()
    server.send_signal(signal.SIGINT)
    out, _ = server.communicate(timeout=30)
    assert f"optuna-dashboard for study {STUDY}: http://127.0.0.1:{port}/dashboard" in out
    return detail


@pytest.mark.timeout(1200)  # measured below; pytest.ini's 600 s fits one test of two starts
def test_the_gpu_host_quick_start_runs_as_written_on_docker_with_real_vllm(
    user: User, tiny_models: TinyModels, tmp_path: Path
) -> None:
    client = docker_or_skip()
    try:
        space = _cpu_host(user, tiny_models, empty_image(client), tmp_path / "host")
        _walk_the_quick_start(user, client, tiny_models, space)
    finally:
        for left in client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={STUDY}"}
        ):
            left.remove(force=True)
        client.close()


def _walk_the_quick_start(
    user: User, client: docker.DockerClient, models: TinyModels, space: Path
) -> None:
    lines = tagged_block("gpu-quick-start")
    assert lines[0] == "pip install ."  # what the `installed` fixture ran, offline
    ran: dict[str, str] = {}
    dashboard: dict[str, Any] | None = None
    for line in lines[1:]:
        if line.startswith("spectune dashboard"):
            dashboard = _dashboard(user, line)
            continue
        word = line.split()[1]
        if word in ("prefetch", "optimize"):
            assert f"--space {SHIPPED}" in line, line
            line = line.replace(f"--space {SHIPPED}", f"--space {space}")
        done = user.run(line)
        if word == "hardware":  # a CPU host has no NVIDIA driver: README's one line, exit 2
            found = done.returncode == 0 and "catalog: " in done.stdout
            missing = done.returncode == 2 and "no NVIDIA GPU detected" in done.stderr
            assert found or missing, done
            continue
        assert done.returncode == 0, f"{line}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        ran[word] = done.stdout

    # README's space, checked as written: each config's runner (V2 on 0.34), the memory flag.
    assert "model runner on vLLM v0.34.0" in ran["space"] and "dflash:" in ran["space"]
    assert "V1" not in ran["space"] and "gpu_memory_utilization: left unset" in ran["space"]
    assert "local folder" in ran["prefetch"] and "ready: 1 model(s)" in ran["prefetch"]
    studies = user.home / "studies"  # the default, relative to the folder the user is in
    trial, source, throughput = recommended(ran["optimize"])
    assert source == "measured" and f"study {STUDY}: measured trials" in ran["optimize"]
    assert f"Wrote {studies / STUDY / 'best.yaml'}" in ran["optimize"]
    assert (studies / STUDY / "vllm-cache").is_dir()  # mounted: what issue 23 found broken
    logs = studies / STUDY / "logs"
    assert f"$ {vllm_venv() / 'bin' / 'vllm'} serve" in (logs / "trial-0.log").read_text()
    assert (
        client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={STUDY}"}
        )
        == []
    )
    assert re.search(rf"│ {STUDY} +│ finished +│ 2 of 2 ", ran["studies"]), ran["studies"]
    html = (studies / STUDY / "report" / "report.html").read_text()
    assert_report_leads_with_the_answer(html, trial, throughput)
    compose = yaml.safe_load((user.home / "docker-compose.yml").read_text())
    command = compose["services"]["vllm"]["command"]
    assert command[0] == str(models.target) and "--max-model-len" in command
    assert command[command.index("--max-model-len") + 1] == str(CPU_MAX_MODEL_LEN)

    # One number, everywhere it is printed: optimize's lines, best.yaml, every export format,
    # `spectune studies`; the live table and the dashboard show the trial's single run.
    assert f"# measured: output {throughput:.1f}" in (studies / STUDY / "best.yaml").read_text()
    for fmt in FORMATS:
        exported = json.loads(user.run(f"spectune export {STUDY} --format {fmt} --json").stdout)
        assert (exported["trial"], exported["source"]) == (trial, "measured"), fmt
        assert round(exported["output_tok_s"], 1) == throughput, fmt
    (listed,) = json.loads(user.run("spectune studies --json").stdout)
    assert listed["best"]["trial"] == trial and round(listed["best"]["throughput"], 1) == throughput
    single, ttft = _live_row(ran["optimize"], trial)
    assert dashboard is not None, "README's quick start starts the dashboard"
    shown = {t["number"]: t for t in dashboard["trials"]}[trial]
    assert round(shown["values"][0], 1) == single and round(shown["values"][1]) == round(ttft)
