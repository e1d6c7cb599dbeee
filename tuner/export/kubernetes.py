"""A Kubernetes Deployment and Service for an exported config (``--format kubernetes``).

The manifests follow vLLM's own Kubernetes guide: the ``vllm/vllm-openai`` image with its
entrypoint replaced by ``vllm serve`` (as the compose file does), one ``nvidia.com/gpu`` per
tensor-parallel rank (the NVIDIA device plugin hands out whole GPUs), ``/dev/shm`` as a
memory-backed emptyDir (a pod has no ``--ipc=host``, and multi-GPU runs die with bus errors on the
default 64 MB), the Hugging Face cache on a PersistentVolumeClaim so a restarted pod does not
download the weights again, and probes on ``/health``. A start-up probe gives the model its
minutes to load before the liveness probe may restart the pod.

Secrets pass by name only: ``HF_TOKEN`` comes from a Secret's key (``secretKeyRef``), so the
value lives in the cluster, never in this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from tuner.config.trial import ServerConfig
from tuner.export.deploy import PORT, local_paths

__all__ = ["HF_CACHE_CLAIM", "SECRET_NAME", "kubernetes_manifests"]

NAME = "vllm"
SECRET_NAME = "hf-token"  # kubectl create secret generic hf-token --from-literal=HF_TOKEN=...
HF_CACHE_CLAIM = "vllm-hf-cache"
_HF_CACHE = "/root/.cache/huggingface"
_SHM_LIMIT = "2Gi"  # vLLM's Kubernetes guide; NCCL's buffers between ranks live there
_LABELS = {"app.kubernetes.io/name": NAME}
# Model loading takes tens of seconds to minutes: up to 15 minutes before liveness counts.
_STARTUP_PERIOD_S = 10
_STARTUP_FAILURES = 90


def kubernetes_manifests(
    argv: Sequence[str],
    *,
    image: str,
    server: ServerConfig,
    env: Sequence[str],
    header: Sequence[str],
) -> str:
    """Two YAML documents, a Deployment and a ClusterIP Service, named ``vllm``.

    Args:
        argv: what follows ``vllm serve`` (model first, host 0.0.0.0, port 8000).
        image: the vLLM image.
        server: the config (its tensor-parallel size and local model folders).
        env: variable names read from the Secret ``hf-token`` (key = the name).
        header: provenance lines, written as comments.
    """
    documents = [_deployment(argv, image, server, env), _service()]
    body = yaml.safe_dump_all(documents, sort_keys=False, width=1000)
    usage = [
        *header,
        f"needs: Secret {SECRET_NAME} with key(s) {', '.join(env)} "
        f"(kubectl create secret generic {SECRET_NAME} --from-literal={env[0]}=...), "
        f"PersistentVolumeClaim {HF_CACHE_CLAIM} for the Hugging Face cache",
        "use: kubectl apply -f FILE",
    ]
    return "".join(f"# {line}\n" for line in usage) + body


def _deployment(
    argv: Sequence[str], image: str, server: ServerConfig, env: Sequence[str]
) -> dict[str, Any]:
    health = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": _STARTUP_PERIOD_S}
    folders = local_paths(server)
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": _HF_CACHE},
        *({"name": f"model-{i}", "mountPath": p, "readOnly": True} for i, p in enumerate(folders)),
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _SHM_LIMIT}},
        {"name": "hf-cache", "persistentVolumeClaim": {"claimName": HF_CACHE_CLAIM}},
        # A local folder the study read: the node must hold it at the same path.
        *(
            {"name": f"model-{i}", "hostPath": {"path": p, "type": "Directory"}}
            for i, p in enumerate(folders)
        ),
    ]
    gpus = str(server.tensor_parallel_size)  # a quantity: Kubernetes writes it as a string
    container = {
        "name": NAME,
        "image": image,
        "command": ["vllm", "serve"],
        "args": list(argv),
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": SECRET_NAME, "key": name}}}
            for name in env
        ],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
        "volumeMounts": mounts,
        "startupProbe": {**health, "failureThreshold": _STARTUP_FAILURES},
        "readinessProbe": {**health, "failureThreshold": 3},
        "livenessProbe": {**health, "failureThreshold": 3},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "labels": dict(_LABELS)},
        "spec": {
            "replicas": 1,
            # A rolling update would start the new pod beside the old one: twice the GPUs.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(_LABELS)},
            "template": {
                "metadata": {"labels": dict(_LABELS)},
                "spec": {"containers": [container], "volumes": volumes},
            },
        },
    }


def _service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "labels": dict(_LABELS)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(_LABELS),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
