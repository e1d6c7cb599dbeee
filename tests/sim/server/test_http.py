"""The fake server's wire: /metrics shaped as real vLLM 0.32's, slow readers, cut streams."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.testbed.fake_server import SPEC, TARGET, RunningServer, StartServer
from tuner.bench.metrics import MetricsSnapshot

REAL_SCRAPE = Path(__file__).parents[2] / "testbed" / "scrapes" / "vllm-0.32-cpu-after.txt"
Shape = tuple[str, frozenset[tuple[str, tuple[str, ...]]]]


def _shapes(text: str) -> dict[str, Shape]:
    """Each family's type and its samples' names and label names."""
    return {
        family.name: (
            family.type,
            frozenset((s.name, tuple(sorted(s.labels))) for s in family.samples),
        )
        for family in text_string_to_metric_families(text)
    }


def test_metrics_have_real_vllm_names_types_and_labels(start_server: StartServer) -> None:
    server = start_server("--speculative-config", SPEC)
    response = httpx.get(f"{server.base_url}/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=")
    fake = _shapes(response.text)
    real = _shapes(REAL_SCRAPE.read_text())
    ours = {name for name in fake if name.startswith("spectune_sim_")}
    # Chunks, and what the simulated GPU draws (for the tests' NVML stand-in).
    assert ours == {
        "spectune_sim_stream_chunks",
        "spectune_sim_stream_chunks_created",
        "spectune_sim_gpu_power_watts",
        "spectune_sim_gpu_energy_joules",
        "spectune_sim_gpu_energy_joules_created",
    }
    assert fake.keys() - ours <= real.keys()
    assert {name: fake[name] for name in fake.keys() - ours} == {
        name: real[name] for name in fake.keys() - ours
    }
    # Counters and their start times, as prometheus_client writes them for vLLM.
    assert fake["vllm:spec_decode_num_drafts"][0] == "counter"
    assert fake["vllm:spec_decode_num_drafts_created"][0] == "gauge"


def _settled_tokens(server: RunningServer) -> float:
    """``vllm:generation_tokens_total`` once it stops moving between two scrapes."""
    last = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = httpx.get(f"{server.base_url}/metrics").text
        now = MetricsSnapshot.from_text(text).total("vllm:generation_tokens_total")
        if now and now == last:
            return now
        last = now
        time.sleep(0.3)
    raise AssertionError(f"the token counter never settled (last {last})")


def test_a_reader_that_stops_holds_a_fast_engine_then_gets_every_token(
    start_server: StartServer,
) -> None:
    server = start_server("--sim-speed", "inf")
    tokens = 30000  # some 6 MB of events: more than any buffer on the way holds
    body = json.dumps(
        {
            "model": TARGET,
            "prompt": "hi",
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(head + body)
        held = _settled_tokens(server)  # nothing read yet
        assert 0 < held < tokens
        received = bytearray()
        while not received.endswith(b"\r\n0\r\n\r\n"):
            piece = sock.recv(1 << 16)
            assert piece, "the server closed the stream early"
            received += piece
    events = [line for line in received.split(b"\n") if line.startswith(b"data: {")]
    usage = json.loads(events[-1][6:])["usage"]
    assert usage["completion_tokens"] == tokens
    assert b"data: [DONE]" in received


def test_a_signal_cuts_the_streams_in_flight(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "hang-after=4")
    body = {"model": TARGET, "prompt": "hi", "max_tokens": 16, "stream": True}
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=10) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: {")  # a token came, then the engine hung
        assert server.stop() < 2.0 and server.proc.returncode == 0
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            for _ in lines:
                pass
