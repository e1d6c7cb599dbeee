"""Serves optuna-dashboard until the first SIGINT, SIGTERM or SIGHUP.

optuna-dashboard's own ``run_server`` serves from the main thread through bottle, which
catches ``KeyboardInterrupt`` (spectune's SIGTERM and SIGHUP are one: see
:mod:`tuner.launch.exit_hooks`) and returns as if nothing happened, and a signal that lands
inside a request handler is caught there. Here the server answers from a daemon thread and
the main thread only waits, so the signal's exception reaches the caller at once and the
command exits with the status a shell expects (130, 143, 129). The dashboard only reads the
study and writes through Optuna's transactions, so a request cut short loses nothing.
"""

from __future__ import annotations

import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from optuna.artifacts import FileSystemArtifactStore

__all__ = ["serve"]

_JOIN_S = 0.5  # how often the waiting main thread wakes (signals are handled at once anyway)


class _ThreadServer(WSGIServer):
    daemon_threads = True


class _Server6(_ThreadServer):
    address_family = socket.AF_INET6


def serve(storage_url: str, store: FileSystemArtifactStore, host: str, port: int) -> None:
    """Runs the dashboard on ``host:port`` until a signal's exception ends the wait."""
    from optuna_dashboard import wsgi  # type: ignore[import-untyped]

    app = wsgi(storage_url, artifact_store=store)
    server_class = _Server6 if ":" in host else _ThreadServer
    server = make_server(host, port, app, server_class, WSGIRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(_JOIN_S)
    finally:
        server.socket.close()  # no new connections; a request being answered is dropped
