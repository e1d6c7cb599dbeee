"""Readiness polling against a real local HTTP server whose answers the test controls."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tuner.errors import FailureKind, StartupFailure
from tuner.launch.readiness import wait_until_ready


@dataclass
class Behaviour:
    health: int = 200
    models: list[str] = field(default_factory=lambda: ["tiny"])
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            behaviour.requests.append(self.path)
            if self.path == "/health":
                self.send_response(behaviour.health)
                self.end_headers()
                return
            body = json.dumps({"data": [{"id": m} for m in behaviour.models]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", behaviour
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _alive() -> None:
    return None


def test_ready_when_health_and_model_answer(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    wait_until_ready(url, timeout_s=5, exited=_alive, log_tail=lambda: "", model="tiny")
    assert behaviour.requests == ["/health", "/v1/models"]


def test_any_model_when_none_is_asked_for(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.models = ["other"]
    wait_until_ready(url, timeout_s=5, exited=_alive, log_tail=lambda: "", model=None)


def test_becomes_ready_later(server: tuple[str, Behaviour]) -> None:
    url, behaviour = server
    behaviour.health = 503
    threading.Timer(0.3, lambda: setattr(behaviour, "health", 200)).start()
    wait_until_ready(url, timeout_s=5, exited=_alive, log_tail=lambda: "", poll_s=0.05)
    assert behaviour.requests.count("/health") > 1


def test_model_never_listed_times_out_saying_what_was_listed(
    server: tuple[str, Behaviour],
) -> None:
    url, behaviour = server
    behaviour.models = ["other"]
    with pytest.raises(StartupFailure) as caught:
        wait_until_ready(
            url,
            timeout_s=0.3,
            exited=_alive,
            log_tail=lambda: "INFO up",
            poll_s=0.05,
            model="tiny",
        )
    assert caught.value.kind is FailureKind.TIMEOUT
    assert caught.value.exit_code is None
    assert "still not ready after 0.3 s" in str(caught.value)
    assert "last probe: /v1/models answered 200, listing ['other']" in str(caught.value)


def test_nothing_listening_times_out() -> None:
    started = time.monotonic()
    with pytest.raises(StartupFailure) as caught:
        wait_until_ready(
            "http://127.0.0.1:9", timeout_s=0.5, exited=_alive, log_tail=lambda: "", poll_s=0.1
        )
    assert 0.5 <= time.monotonic() - started < 3
    assert caught.value.kind is FailureKind.TIMEOUT
    assert "last probe: ConnectError" in str(caught.value)


def test_exit_is_noticed_at_once_and_classified() -> None:
    calls = []

    def exited() -> int | None:
        calls.append(time.monotonic())
        return 1 if len(calls) >= 2 else None

    started = time.monotonic()
    with pytest.raises(StartupFailure) as caught:
        wait_until_ready(
            "http://127.0.0.1:9",
            timeout_s=60,
            exited=exited,
            log_tail=lambda: "torch.OutOfMemoryError: CUDA out of memory.",
            poll_s=0.1,
        )
    assert time.monotonic() - started < 2
    assert caught.value.kind is FailureKind.OOM
    assert caught.value.exit_code == 1
    assert caught.value.log_tail == "torch.OutOfMemoryError: CUDA out of memory."


def test_a_timeout_with_an_oom_in_the_log_is_an_oom() -> None:
    with pytest.raises(StartupFailure) as caught:
        wait_until_ready(
            "http://127.0.0.1:9",
            timeout_s=0.2,
            exited=_alive,
            log_tail=lambda: "ERROR torch.OutOfMemoryError: CUDA out of memory.",
            poll_s=0.05,
        )
    assert caught.value.kind is FailureKind.OOM


def test_the_runtime_can_report_the_oom_killer() -> None:
    with pytest.raises(StartupFailure) as caught:
        wait_until_ready(
            "http://127.0.0.1:9",
            timeout_s=5,
            exited=lambda: 137,
            log_tail=lambda: "",
            oom_killed=lambda: True,
        )
    assert caught.value.kind is FailureKind.OOM
    assert "OOM-killed" in str(caught.value)
