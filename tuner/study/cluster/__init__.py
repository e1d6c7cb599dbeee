"""Trials placed on the GPU nodes of a Ray cluster (``spectune optimize --ray ADDRESS``).

The driver (this host) keeps the study: it alone writes the database, so SQLite is enough. It
asks Optuna for trials and hands each to a *slot*, a Ray actor that holds as many GPUs as the
study's tensor-parallel size on one node (:mod:`.slot`). A slot keeps its TrialRunner, so a
node keeps its server while only request-side settings change, as a single host does; it
starts vLLM (docker or process backend) on exactly the GPUs Ray assigned and measures it over
that node's loopback. Up to ``--parallel`` slots run at once.

Slots are placed only on nodes whose GPUs match the study's hardware (:mod:`.nodes`): a node
declares them as a Ray resource (``spectune_gpu_4090: 2``) or NVML names them there. A slot
whose node is lost fails its trial, which is retried once on another node; Ctrl-C or SIGTERM
on the driver cancels every slot, and each removes its servers (:mod:`.driver`).

Ray is an optional extra (``pip install 'spectune[ray]'``), imported only when ``--ray`` is
given (:mod:`.connect`).
"""

from tuner.study.cluster.driver import RayOptions, check_cluster, check_ray_options, run_on_ray
from tuner.study.cluster.remote import ray_backend_factory

__all__ = ["RayOptions", "check_cluster", "check_ray_options", "ray_backend_factory", "run_on_ray"]
