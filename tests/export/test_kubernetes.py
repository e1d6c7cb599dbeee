"""``--format kubernetes``: a Deployment and Service read back by the kubernetes client's models.

The client's deserializer drops keys it does not know, so each manifest is also serialized back
from the model objects and compared with what was written: a misspelt field would vanish there.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testbed.results import SPACE, StudyCopy, build_study
from tuner.analysis.picks import recommend
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import server_argv
from tuner.export.kubernetes import kubernetes_manifests
from tuner.export.vllm import export

kubernetes = pytest.importorskip("kubernetes", reason="pip install -e '.[dev]'")
from kubernetes.client import ApiClient  # noqa: E402

TODAY = dt.date(2026, 1, 2)
SECRET = "hf_spectune-test-secret-0123456789"


def _models(text: str) -> tuple[Any, Any, list[dict[str, Any]]]:
    # Any, not V1Deployment and V1Service: every field of the models is optional, and the tests
    # assert what is there; the deserializer is the client's private (untyped) one.
    documents = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    client: Any = ApiClient()
    deployment = client._ApiClient__deserialize(documents[0], "V1Deployment")
    service = client._ApiClient__deserialize(documents[1], "V1Service")
    for model, written in zip((deployment, service), documents, strict=True):
        assert client.sanitize_for_serialization(model) == written  # no unknown field
    return deployment, service, documents


def test_the_kubernetes_export_is_a_deployment_and_service_the_client_reads(
    levels: StudyCopy,
) -> None:
    study, space = levels.open()
    exported = export(study, space, "kubernetes", today=TODAY)
    deployment, service, _ = _models(exported.text)
    chosen = recommend(study)
    assert chosen is not None
    header = [line[2:] for line in exported.text.splitlines() if line.startswith("# ")]
    assert header[0].startswith(f"spectune export: study levels, trial {chosen.number}")
    assert "use: kubectl apply -f FILE" in header

    assert deployment.spec.replicas == 1 and deployment.spec.strategy.type == "Recreate"
    labels = deployment.spec.selector.match_labels
    assert deployment.spec.template.metadata.labels == labels == service.spec.selector
    pod = deployment.spec.template.spec
    (container,) = pod.containers
    assert container.image == "vllm/vllm-openai:v0.32.0"
    assert container.command == ["vllm", "serve"]
    # The args are the compose file's command: the study's vLLM dialect, the per-level table.
    compose = yaml.safe_load(export(study, space, "compose", today=TODAY).text)
    assert container.args == compose["services"]["vllm"]["command"]
    expected = server_argv(chosen.record.server, space.version, host="0.0.0.0", port=8000)
    assert container.args[0] == expected[0] == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert container.args[container.args.index("--port") + 1] == "8000"
    # One GPU per tensor-parallel rank.
    assert chosen.record.server.tensor_parallel_size == 2
    assert container.resources.limits == {"nvidia.com/gpu": "2"}
    (port,) = container.ports
    assert (port.name, port.container_port) == ("http", 8000)

    (token,) = container.env
    assert token.name == "HF_TOKEN" and token.value is None
    assert (token.value_from.secret_key_ref.name, token.value_from.secret_key_ref.key) == (
        "hf-token",
        "HF_TOKEN",
    )
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["dshm"].empty_dir.medium == "Memory"
    assert volumes["hf-cache"].persistent_volume_claim.claim_name == "vllm-hf-cache"
    mounts = {m.mount_path: m.name for m in container.volume_mounts}
    assert mounts == {"/dev/shm": "dshm", "/root/.cache/huggingface": "hf-cache"}
    for probe in (container.readiness_probe, container.liveness_probe, container.startup_probe):
        assert (probe.http_get.path, probe.http_get.port) == ("/health", "http")
    # Liveness waits for the model to load: the start-up probe allows minutes.
    startup = container.startup_probe
    assert startup.failure_threshold * startup.period_seconds >= 600

    assert service.spec.type == "ClusterIP"
    (exposed,) = service.spec.ports
    assert (exposed.port, exposed.target_port) == (8000, "http")


def test_local_model_folders_are_mounted_read_only_from_the_node() -> None:
    server = ServerConfig(
        model="/models/target",
        tensor_parallel_size=1,
        max_model_len=4096,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, 3, "/models/draft"),
    )
    text = kubernetes_manifests(
        ["/models/target", "--port", "8000"],
        image="vllm/vllm-openai:v0.32.0",
        server=server,
        env=["HF_TOKEN", "VLLM_API_KEY"],
        header=["spectune export: a test"],
    )
    deployment, _, _ = _models(text)
    pod = deployment.spec.template.spec
    (container,) = pod.containers
    assert container.resources.limits == {"nvidia.com/gpu": "1"}
    host_paths = {v.name: v.host_path.path for v in pod.volumes if v.host_path}
    read_only = {m.mount_path: m.read_only for m in container.volume_mounts if m.read_only}
    assert sorted(host_paths.values()) == ["/models/draft", "/models/target"]
    assert read_only == {"/models/target": True, "/models/draft": True}
    keys = [e.value_from.secret_key_ref.key for e in container.env]
    assert keys == ["HF_TOKEN", "VLLM_API_KEY"]
    assert "needs: Secret hf-token with key(s) HF_TOKEN, VLLM_API_KEY" in text


def test_no_secret_value_reaches_the_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("VLLM_API_KEY", SECRET)
    space = {
        **SPACE,
        "name": "secret",
        "workload": {**SPACE["workload"], "concurrency": [1], "requests": 4},
    }
    build_study(tmp_path, space, trials=4)
    study, stored = StudyCopy(tmp_path, "secret").open()
    text = export(study, stored, "kubernetes").text
    assert SECRET not in text
    *_, documents = _models(text)
    env = documents[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert all("value" not in entry for entry in env)  # by reference only
