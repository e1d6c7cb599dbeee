"""What a vLLM container sees of the host: caches, model folders, environment.

- The host's Hugging Face cache, created if missing, at the container's
  ``/root/.cache/huggingface`` (``HF_HOME`` points there): weights downloaded once, by spectune
  before the first start or by any container, are found by every later container.
- vLLM's cache folder (torch.compile and CUDA-graph caches) from a per-study host folder at
  ``/root/.cache/vllm`` (``VLLM_CACHE_ROOT``), so a restart does not compile again.
- A local model or draft folder named in the server config, read-only at the same path, so the
  argv that names it works unchanged.
- ``--docker-env`` values; secrets (``HF_TOKEN``, any key that looks like one) by name only,
  read from this process's environment at each start, never stored or printed.
  ``HF_HUB_OFFLINE`` is passed on when set, so the container does not call out either.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tuner.config.local_paths import absolute
from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError

__all__ = [
    "CONTAINER_HF_HOME",
    "CONTAINER_VLLM_CACHE",
    "ContainerFiles",
    "default_hf_cache",
    "refuse_stored_secret",
]

CONTAINER_HF_HOME = "/root/.cache/huggingface"
CONTAINER_VLLM_CACHE = "/root/.cache/vllm"
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE", re.IGNORECASE)
_PASSED_WHEN_SET = ("HF_HUB_OFFLINE",)


def default_hf_cache() -> Path:
    """The host's Hugging Face cache: ``$HF_HOME`` or ``~/.cache/huggingface``."""
    return absolute(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def refuse_stored_secret(key: str) -> None:
    """Refuses a ``--docker-env KEY=VALUE`` whose key names a secret (``HF_TOKEN``,
    ``WANDB_API_KEY``, ...): its value would be stored with the study."""
    if _SECRET.search(key):
        raise ConfigError(
            f"--docker-env {key}=...: {key} looks like a secret and would be stored with the "
            f"study; export {key} and pass --docker-env {key} (by name)"
        )


@dataclass(frozen=True)
class ContainerFiles:
    """The mounts and environment every container of a run gets.

    Attributes:
        hf_cache: the host's Hugging Face cache folder; default :func:`default_hf_cache`, read
            when the record is made.
        vllm_cache: the study's host folder for vLLM's cache; None keeps none.
        volumes: extra bind mounts, host path to ``container_path[:ro]``.
        environment: non-secret container environment.
        secrets: names read from this process's environment at each start, if set.
    """

    hf_cache: Path = field(default_factory=default_hf_cache)
    vllm_cache: Path | None = None
    volumes: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ("HF_TOKEN",)

    def __post_init__(self) -> None:
        for key in self.environment:
            refuse_stored_secret(key)
        # Docker takes a relative source for the name of a volume: every trial would fail.
        for host in (self.hf_cache, self.vllm_cache, *map(Path, self.volumes)):
            if host is not None and not host.is_absolute():
                raise ConfigError(
                    f"bind mount source {host} is a relative path, which Docker reads as a "
                    "volume name: give an absolute path"
                )

    def ensure(self) -> None:
        """Creates the cache folders (a fresh host has no Hugging Face cache yet)."""
        for folder in (self.hf_cache, self.vllm_cache):
            if folder is not None:
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as error:
                    raise ConfigError(
                        f"cannot create cache folder {folder} ({error.strerror}): set HF_HOME "
                        "to a writable folder"
                    ) from None

    def volume_specs(self, server: ServerConfig | None = None) -> list[str]:
        """Bind mounts as the docker SDK takes them (``host:container[:mode]``)."""
        specs = [f"{host}:{target}" for host, target in self.volumes.items()]
        if self.hf_cache.is_dir():
            specs.append(f"{self.hf_cache}:{CONTAINER_HF_HOME}")
        if self.vllm_cache is not None and self.vllm_cache.is_dir():
            specs.append(f"{self.vllm_cache}:{CONTAINER_VLLM_CACHE}")
        for folder in local_model_folders(server):
            if str(folder) not in self.volumes:
                specs.append(f"{folder}:{folder}:ro")
        return specs

    def container_environment(self) -> tuple[dict[str, str], tuple[str, ...]]:
        """The container's environment, read now, and the secret values in it (to redact)."""
        env = {"HF_HOME": CONTAINER_HF_HOME}
        if self.vllm_cache is not None:
            env["VLLM_CACHE_ROOT"] = CONTAINER_VLLM_CACHE
        env.update({k: os.environ[k] for k in _PASSED_WHEN_SET if os.environ.get(k)})
        env.update(self.environment)
        passed = {k: os.environ[k] for k in self.secrets if os.environ.get(k)}
        return {**env, **passed}, tuple(passed.values())


def local_model_folders(server: ServerConfig | None) -> list[Path]:
    """The target's and draft's folders on this host, when the config names folders."""
    if server is None:
        return []
    names = [server.model]
    if server.speculative is not None and server.speculative.model:
        names.append(server.speculative.model)
    return [absolute(n) for n in names if Path(n).expanduser().is_dir()]
