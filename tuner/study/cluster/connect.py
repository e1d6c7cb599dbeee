"""Ray, imported only when asked for, and the connection to a cluster.

Ray is an optional extra that takes seconds to import: the CLI never imports it at start-up,
and this module hands it out as ``Any`` so that type checking does not need it installed.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
import warnings
from typing import Any

from tuner.errors import ConfigError

__all__ = ["connect", "ray_module"]


def ray_module() -> Any:
    """The ``ray`` package.

    Raises:
        ConfigError: Ray is not installed.
    """
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError("--ray needs Ray on this host: pip install 'spectune[ray]'") from None


def connect(address: str) -> Any:
    """Connects this process to the cluster at ``address`` (once) and returns ``ray``.

    Args:
        address: ``ray://HEAD:10001`` (Ray Client), ``HEAD:6379`` from a node's network, or
            ``auto`` for the cluster this host belongs to.

    Raises:
        ConfigError: Ray is missing or the cluster cannot be reached.
    """
    ray = ray_module()
    if ray.is_initialized():
        return ray
    # Ray Client forwards the cluster's log lines, among them one about SIGTERM that its
    # server side writes on every connection.
    logging.getLogger("ray.util.client.logsclient").addFilter(_not_about_sigterm)
    # ray.init makes SIGTERM a sys.exit(15) in the driver; whoever handled it before (the
    # CLI's Terminated: unwind like Ctrl-C, exit 143) keeps it.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        with warnings.catch_warnings():  # its timeout warning repeats the error below
            warnings.simplefilter("ignore", UserWarning)
            _init(ray, address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(
            f"cannot reach the Ray cluster at --ray {address}: {reason} (give ray://HEAD:10001 "
            "for Ray Client, or auto on a node of the cluster)"
        ) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return ray


def _not_about_sigterm(record: logging.LogRecord) -> bool:
    """Drops the Ray Client server's note that it did not take SIGTERM (in its own process):
    nothing to act on, and a second line beside a one-line error."""
    return "SIGTERM handler is not set" not in record.getMessage()


def _init(ray: Any, address: str) -> None:
    for attempt in (1, 2):
        try:
            # Node logs stay on the nodes: the driver's terminal shows the live trial table.
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            return
        except ConnectionError as exc:
            # The Ray Client server starts a process for each connection; on a busy head that
            # start can time out ("Initialization failure from server"): one more try.
            if attempt == 2 or "Initialization failure" not in str(exc):
                raise
            ray.shutdown()  # what the failed attempt set up
