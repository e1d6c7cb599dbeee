"""What ``spectune optimize`` is asked to run, and the checks on its arguments alone.

The checks that read the storage or the host (the space against the study it resumes, the
GPUs, vLLM's program) are the run's: :meth:`tuner.study.run.StudyRun.open`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from tuner.config.limits import MAX_SEED
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.search.plan import Confirmation
from tuner.study.cluster.driver import RayOptions, check_ray_options
from tuner.study.paths import check_study_name, default_storage
from tuner.study.storage import check_parallel_storage, check_storage_url, check_writable
from tuner.study.study import make_sampler
from tuner.trial.backends import BackendOptions, backend_factory
from tuner.trial.backends.kinds import BackendKind

__all__ = ["OptimizeRequest", "check_request"]


@dataclass(frozen=True)
class OptimizeRequest:
    study: str
    space: SearchSpace | None  # None: resume with the stored space
    backend: str
    trials: int
    studies_dir: Path
    storage: str | None = None
    sampler: str = "spectune"
    seed: int = 0
    workers: int = 1
    gpus_per_trial: int | None = None  # default: the GPU count of the space's hardware
    confirm_top: int = 3  # configs measured again on fresh servers before export (0: none)
    confirm_repeats: int = 3
    confirm_k_table: bool = True  # the K table's own runs too (False: a budget left no time)
    # Backend settings beyond study, seed and GPUs (which optimize fills in per worker).
    backend_options: BackendOptions = field(default_factory=lambda: BackendOptions(study=""))
    ray: RayOptions | None = None  # trials on a Ray cluster's nodes instead of this host
    # Download the space's weights into the host's Hugging Face cache before the first start
    # (measured backends on this host); off where vLLM gets them itself, or needs none.
    prefetch: bool = True
    time_budget_s: float | None = None  # trials stop in time to confirm within it
    # Pairs in rounds against the incumbent, losing trials pruned (tuner.trial.rounds); one
    # worker on this host only: other workers measure the fixed count.
    rounds: bool = False
    # ``space`` is a default nobody chose (the CLI got no space option): a stored study of
    # this name resumes with its own space instead.
    resume_stored: bool = False
    # The space's hardware is the GPUs NVML sees here (tuner.study.host.on_this_host): the
    # CLI asks for it when --hardware and --ray are not given.
    detect_hardware: bool = False
    # The space may search the GPUs' power limit (``--allow-power-limit``): spectune sets it
    # per trial and restores it (tuner.study.power_limit); without it such a space is refused.
    allow_power_limit: bool = False

    @property
    def confirmation(self) -> Confirmation:
        return Confirmation(self.confirm_top, self.confirm_repeats, self.confirm_k_table)

    def confirming(self, confirmation: Confirmation) -> OptimizeRequest:
        """This request with ``confirmation`` instead of its own (a time budget cuts it)."""
        return replace(
            self,
            confirm_top=confirmation.top,
            confirm_repeats=confirmation.repeats,
            confirm_k_table=confirmation.k_table,
        )

    @property
    def storage_url(self) -> str:
        return self.storage or default_storage(self.study, self.studies_dir)


def check_request(request: OptimizeRequest) -> None:
    """Refuses bad arguments before anything runs; reads no storage (``--plan`` calls it).

    Raises:
        ConfigError: a study name that cannot name a folder, no trials or workers, an
            unknown sampler or backend, a malformed storage URL, several workers on SQLite, or
            a studies folder that cannot be written.
    """
    check_study_name(request.study)  # first: the CLI once refused it as it named the storage
    if request.trials < 1:
        raise ConfigError(f"--trials {request.trials}: ask for at least 1 trial")
    if request.workers < 1:
        raise ConfigError(f"--workers {request.workers}: use at least 1 worker")
    highest = MAX_SEED - request.workers + 1  # worker i samples with seed + i
    if request.seed > highest:
        raise ConfigError(
            f"--seed {request.seed}: with {request.workers} workers the last one's seed passes "
            f"{MAX_SEED}, the largest Optuna takes; use a seed up to {highest}"
        )
    make_sampler(request.sampler, request.seed)
    settings = request.backend_options.settings
    if settings is not None and settings.backend != request.backend:
        raise ConfigError(
            f"--backend {request.backend} with {settings.backend} backend settings: build "
            f"them for --backend {request.backend}, or run --backend {settings.backend}"
        )
    backend_factory(request.backend)
    _check_energy(request)
    if request.ray is not None:
        check_ray_options(request.ray, request.workers)
    if request.time_budget_s is not None and (request.workers > 1 or request.ray is not None):
        raise ConfigError(
            "--time-budget runs trials in one worker on this host: drop --workers or --ray, "
            "or drop --time-budget"
        )
    check_storage_url(request.storage_url)  # its form: --plan opens no storage
    check_parallel_storage(request.storage_url, request.workers)
    check_writable(request.studies_dir)  # logs and exports go there whatever the storage


def _check_energy(request: OptimizeRequest) -> None:
    """Refuses an energy preference on a study that can never know the GPUs' energy: the
    simulator's power model needs the GPU's board power, a measured study GPUs to read."""
    prefer = request.space.prefer if request.space is not None else None
    if prefer is None or not prefer.energy or request.space is None:
        return
    if not BackendKind.parse(request.backend).on_gpus:
        gpu = request.space.hardware.gpu
        if gpu.board_w is None:
            raise ConfigError(
                f"--objective {prefer} (slo.prefer): the sim backend models no energy for "
                f"{gpu.name} (no board power in the GPU catalog); use --objective throughput, "
                "or give board_w in its --gpu-spec file"
            )
        return
    if request.backend_options.gpus == ():
        raise ConfigError(
            f"--objective {prefer} (slo.prefer) with --gpus none: no GPU is read, so no energy; "
            "use --objective throughput, or name the GPUs"
        )
