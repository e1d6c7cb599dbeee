"""A stand-in for ``vllm serve`` that runs inside the test container (standard library only).

It accepts the argv spectune builds (model first, then vLLM flags; unknown flags are ignored),
answers ``--version`` with ``FAKE_VLLM_VERSION`` (default 0.32.0), and otherwise behaves as
``FAKE_VLLM_MODE`` says:

- ``serve`` (default): after ``FAKE_VLLM_DELAY_S`` seconds, answers ``/health`` and
  ``/v1/models`` on ``--host``/``--port`` until SIGTERM.
- ``oom``: prints vLLM's CUDA out-of-memory start-up failure and exits 1.
- ``crash``: prints an unrelated Python error and exits 1.
- ``hang``: never listens (a start-up that never ends).
- ``memhog``: allocates memory until the container's memory limit kills it.
- ``leak``: prints ``HF_TOKEN``'s value (a server that logs its secrets), then serves.

At start it prints a SHA-256 of ``HF_TOKEN`` (never the value), so tests can check the token
arrived without the value reaching the log.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

OOM_LOG = """\
INFO 01-01 00:00:00 [gpu_model_runner.py:1] Loading model weights took 9.52 GiB
ERROR 01-01 00:00:01 [core.py:1] EngineCore failed to start.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1, in run
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 23.55 GiB of which 1.02 GiB is free.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def _log(line: str) -> None:
    print(line, flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    # PID 1 in a container ignores SIGTERM unless it handles it; vLLM does, so must we.
    del signum, frame
    _log("INFO shutting down")
    sys.exit(0)


def _serve(host: str, port: int, model: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, b"")
            elif self.path == "/v1/models":
                body = {"object": "list", "data": [{"id": model, "object": "model"}]}
                self._reply(200, json.dumps(body).encode())
            else:
                self._reply(404, b'{"error": "not found"}')

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            _log("INFO request " + format % args)

    server = ThreadingHTTPServer((host, port), Handler)
    _log(f"INFO Started server process on http://{host}:{port}")
    server.serve_forever()


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        _log(os.environ.get("FAKE_VLLM_VERSION", "0.32.0"))
        return
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    args, unknown = parser.parse_known_args()
    _log(f"INFO fake vllm serve {args.model} (ignoring {len(unknown)} other arguments)")
    token = os.environ.get("HF_TOKEN")
    if token:
        _log(f"INFO hf_token_sha256={hashlib.sha256(token.encode()).hexdigest()}")
    mode = os.environ.get("FAKE_VLLM_MODE", "serve")
    if mode == "oom":
        sys.stdout.write(OOM_LOG)
        sys.exit(1)
    if mode == "crash":
        _log("ValueError: something unrelated to memory went wrong")
        sys.exit(1)
    if mode == "hang":
        while True:
            time.sleep(60)
    if mode == "memhog":
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))  # bytearray pages are touched: real RSS
            _log(f"INFO allocated {len(hog) * 16} MiB")
    if mode == "leak":
        _log(f"DEBUG environment HF_TOKEN={token}")
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY_S", "0")))
    _serve(args.host, args.port, args.served_model_name or args.model)


if __name__ == "__main__":
    main()
