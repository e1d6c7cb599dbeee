"""The docker launcher running the simulator's vLLM-compatible server (``tuner.sim.server``).

The fake server takes vLLM's own flags in the newest dialect, so this checks the argv the
launcher writes end to end, and its start-up failures speak vLLM's messages.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tuner.config.trial import LaunchContext, ServerConfig, SpeculativeConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.errors import FailureKind, StartupFailure
from tuner.launch.docker import DockerLauncher
from tuner.sim.server.app import SIMULATED_BANNER

pytestmark = pytest.mark.docker

LauncherFactory = Callable[..., DockerLauncher]
TARGET = "Qwen/Qwen2.5-14B-Instruct-AWQ"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"


def _sim_launcher(
    fake_launcher: LauncherFactory, python: str, hardware: str = "4090x1", fault: str = ""
) -> DockerLauncher:
    return fake_launcher(
        entrypoint=(python, "-m", "tuner.sim.server"),
        subcommand=("serve",),
        version=NEWEST_KNOWN,
        env={"SPECTUNE_SIM_HARDWARE": hardware, "SPECTUNE_SIM_FAULT": fault},
    )


def _server(model: str = TARGET, speculative: SpeculativeConfig | None = None) -> ServerConfig:
    return ServerConfig(
        model=model,
        tensor_parallel_size=1,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        speculative=speculative,
        quantization="awq" if model.endswith("AWQ") else None,
        served_model_name="qwen",
    )


def test_the_simulated_server_starts_from_the_launchers_argv(
    fake_launcher: LauncherFactory, project_python: str, context: LaunchContext
) -> None:
    launcher = _sim_launcher(fake_launcher, project_python)
    server = _server(speculative=SpeculativeConfig("draft_model", 4, model=DRAFT))

    endpoint = launcher.start(server, context)

    with httpx.Client(base_url=endpoint.base_url, trust_env=False, timeout=30) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["qwen"]
        body = {"model": "qwen", "prompt": "def f(x):", "max_tokens": 4, "temperature": 0}
        assert client.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] == 4
    launcher.stop()
    assert endpoint.log_path is not None
    assert SIMULATED_BANNER in endpoint.log_path.read_text()


@pytest.mark.parametrize(
    ("model", "fault"),
    [(TARGET, "oom-at-start"), ("Qwen/Qwen2.5-32B-Instruct", "")],  # injected; does not fit
    ids=["injected", "too-big"],
)
def test_the_simulated_out_of_memory_start_is_classified_oom(
    fake_launcher: LauncherFactory,
    project_python: str,
    context: LaunchContext,
    model: str,
    fault: str,
) -> None:
    launcher = _sim_launcher(fake_launcher, project_python, fault=fault)

    with pytest.raises(StartupFailure) as failure:
        launcher.start(_server(model), context)

    assert failure.value.kind is FailureKind.OOM
    assert failure.value.exit_code == 1
