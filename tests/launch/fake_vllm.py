"""A stand-in for ``vllm serve`` that launcher tests can steer: ``python fake_vllm.py serve ...``.

It parses the flags spectune emits like vLLM does (argparse, so an unknown flag exits 2 with
"unrecognized arguments"), serves ``/health`` and ``/v1/models``, and misbehaves on request:

  --fake-delay S           wait S seconds before listening
  --fake-exit CODE         print --fake-message (and a traceback-like line) and exit with CODE
  --fake-sigkill-self      die by SIGKILL, as the kernel's OOM killer would kill it
  --fake-never-ready       listen, but answer /health with 503 forever
  --fake-ignore-sigterm    ignore SIGTERM (so only SIGKILL ends it), children too
  --fake-child PIDFILE     start a grandchild that sleeps, write its PID to PIDFILE
  --fake-port-taken-once MARKER   fail like a port clash if MARKER does not exist (then create it)
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model", nargs="?")
    parser.add_argument("--config")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    for flag in (
        "--tensor-parallel-size",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-batched-tokens",
        "--quantization",
        "--speculative-config",
    ):
        parser.add_argument(flag)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    parser.add_argument("--fake-delay", type=float, default=0.0)
    parser.add_argument("--fake-exit", type=int)
    parser.add_argument("--fake-message", default="RuntimeError: fake failure")
    parser.add_argument("--fake-sigkill-self", action="store_true")
    parser.add_argument("--fake-never-ready", action="store_true")
    parser.add_argument("--fake-ignore-sigterm", action="store_true")
    parser.add_argument("--fake-child")
    parser.add_argument("--fake-port-taken-once")
    args = parser.parse_args(argv)
    if args.config:  # vLLM reads the file's keys as flags; do the same for the ones we know
        config = yaml.safe_load(Path(args.config).read_text())
        args.model = args.model or config.get("model")
        args.served_model_name = args.served_model_name or config.get("served-model-name")
    return args


def serve(args: argparse.Namespace) -> None:
    served = args.served_model_name or args.model
    ready = not args.fake_never_ready

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200 if ready else 503)
                self.end_headers()
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": served}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            print("INFO", format % args, flush=True)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in args.host else socket.AF_INET

    server = Server((args.host, args.port), Handler)
    print(f"INFO: serving {served} on http://{args.host}:{args.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.fake_ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.serve_forever()


def main(argv: list[str]) -> None:
    if argv == ["--version"]:
        print("WARNING some import noise\n0.32.0+cpu", flush=True)
        return
    if not argv or argv[0] != "serve":
        sys.exit("usage: fake_vllm.py serve MODEL [flags]")
    args = parse(argv[1:])
    # vLLM's own format, which the classifier knows to be informational.
    print(f"INFO 01-01 00:00:00 [fake_vllm.py:1] non-default args: {vars(args)}", flush=True)
    if args.fake_ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild
    if args.fake_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(args.fake_child).write_text(str(child.pid))
    time.sleep(args.fake_delay)
    if args.fake_port_taken_once and not Path(args.fake_port_taken_once).exists():
        Path(args.fake_port_taken_once).touch()
        print("ERROR: [Errno 98] error while attempting to bind: Address already in use")
        sys.exit(1)
    if args.fake_sigkill_self:
        print("INFO: loading weights", flush=True)
        signal.raise_signal(signal.SIGKILL)
    if args.fake_exit is not None:
        print("Traceback (most recent call last):", flush=True)
        print('  File "fake_vllm.py", line 1, in <module>', flush=True)
        print(args.fake_message, flush=True)
        sys.exit(args.fake_exit)
    serve(args)


if __name__ == "__main__":
    main(sys.argv[1:])
