"""Prometheus parsing and the /metrics deltas, under V1 and V0 names."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import httpx
import pytest

from tests.testbed.fake_server import RunningServer
from tuner.bench.metrics import (
    ACCEPTED_PER_POSITION,
    DRAFTS,
    MetricsSnapshot,
    parse_prometheus,
    preemptions_delta,
    scrape,
    spec_decode_delta,
)

V1_BEFORE = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen"} 50.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="qwen"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 400.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen"} 200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="0"} 90
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="1"} 80
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="10"} 1
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="2"} 70
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="qwen"} 0.5
vllm:num_preemptions_total{engine="0",model_name="qwen"} 3.0
"""

V1_AFTER = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen"} 200.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="qwen"} 50.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen"} 800.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen"} 200.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen"} 600.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="0"} 180
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="1"} 160
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="10"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen",position="2"} 128
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.75
vllm:num_preemptions_total{engine="0",model_name="qwen"} 5.0
"""

V0_BEFORE = """\
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="qwen"} 0.9
vllm:spec_decode_num_accepted_tokens_total{model_name="qwen"} 10.0
vllm:spec_decode_num_draft_tokens_total{model_name="qwen"} 20.0
vllm:spec_decode_num_emitted_tokens_total{model_name="qwen"} 15.0
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.125
vllm:num_preemptions_total{model_name="qwen"} 0.0
"""

V0_AFTER = """\
vllm:spec_decode_draft_acceptance_rate{model_name="qwen"} 0.7
vllm:spec_decode_num_accepted_tokens_total{model_name="qwen"} 70.0
vllm:spec_decode_num_draft_tokens_total{model_name="qwen"} 120.0
vllm:spec_decode_num_emitted_tokens_total{model_name="qwen"} 100.0
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.5
vllm:num_preemptions_total{model_name="qwen"} 4.0
"""


def snap(text: str) -> MetricsSnapshot:
    return MetricsSnapshot.from_text(text, taken_at=0.0)


def test_parser_handles_labels_values_and_junk() -> None:
    text = (
        "# HELP x help text\n"
        "plain_metric 3\n"
        'quoted{path="a,b}",note="say \\"hi\\"\\n",empty=""} 1.5e3 1700000000000\n'
        'spaced{ a="1" , b="2" } -2\n'
        "nan_metric NaN\n"
        'inf_metric{le="+Inf"} +Inf\n'
        "garbage line here\n"
        'broken{a="1" 4\n'
        "\n"
    )
    samples = parse_prometheus(text)
    assert [s.name for s in samples] == [
        "plain_metric",
        "quoted",
        "spaced",
        "nan_metric",
        "inf_metric",
    ]
    assert samples[0].value == 3.0 and samples[0].labels == ()
    quoted = samples[1]
    assert quoted.value == 1500.0
    assert quoted.label("path") == "a,b}"
    assert quoted.label("note") == 'say "hi"\n'
    assert quoted.label("empty") == ""
    assert quoted.label("absent") is None
    assert samples[2].labels == (("a", "1"), ("b", "2")) and samples[2].value == -2.0
    assert math.isnan(samples[3].value)
    assert samples[4].value == math.inf and samples[4].label("le") == "+Inf"


def test_v1_delta_sums_engines_and_keeps_positions_in_order() -> None:
    stats = spec_decode_delta(snap(V1_BEFORE), snap(V1_AFTER))
    assert stats is not None
    assert (stats.drafts, stats.draft_tokens, stats.accepted_tokens) == (100.0, 400.0, 300.0)
    assert stats.accepted_per_position == (90.0, 80.0, 58.0, 1.0)  # positions 0, 1, 2, 10
    assert stats.acceptance_rate == pytest.approx(0.75)
    assert stats.mean_acceptance_length == pytest.approx(4.0)
    assert stats.per_position_rate == pytest.approx((0.9, 0.8, 0.58, 0.01))


def test_v1_kv_usage_and_preemptions() -> None:
    before, after = snap(V1_BEFORE), snap(V1_AFTER)
    assert before.kv_cache_usage == 0.5  # fullest engine
    assert after.kv_cache_usage == 0.75
    assert preemptions_delta(before, after) == 2.0
    assert before.total("vllm:spec_decode_num_drafts_total") == 150.0


def test_v0_delta_derives_steps_from_emitted_tokens() -> None:
    before, after = snap(V0_BEFORE), snap(V0_AFTER)
    stats = spec_decode_delta(before, after)
    assert stats is not None
    assert stats.draft_tokens == 100.0
    assert stats.accepted_tokens == 60.0
    assert stats.drafts == 25.0  # (100 - 15) emitted - (70 - 10) accepted
    assert stats.accepted_per_position == ()
    assert stats.acceptance_rate == pytest.approx(0.6)
    assert stats.mean_acceptance_length == pytest.approx(1 + 60 / 25)
    assert after.kv_cache_usage == 0.5  # from the old gauge name
    assert preemptions_delta(before, after) == 4.0


def test_no_delta_without_both_scrapes_spec_metrics_or_on_reset() -> None:
    v1 = snap(V1_AFTER)
    assert spec_decode_delta(None, v1) is None
    assert spec_decode_delta(v1, None) is None
    plain = snap("vllm:num_preemptions_total 1\nvllm:kv_cache_usage_perc 0.1\n")
    assert spec_decode_delta(plain, plain) is None
    assert spec_decode_delta(snap(V1_AFTER), snap(V1_BEFORE)) is None  # counters went back
    assert preemptions_delta(snap(V1_AFTER), snap(V1_BEFORE)) is None
    assert preemptions_delta(None, v1) is None
    assert snap("").kv_cache_usage is None


def test_first_scrape_without_counters_counts_from_zero() -> None:
    stats = spec_decode_delta(snap(""), snap(V1_AFTER))
    assert stats is not None and stats.drafts == 250.0


async def _scrape(
    url: str, transport: httpx.AsyncBaseTransport | None = None
) -> MetricsSnapshot | None:
    async with httpx.AsyncClient(transport=transport) as client:
        return await scrape(client, url)


def test_scrape_reads_a_real_endpoint(server: RunningServer) -> None:
    snapshot = asyncio.run(_scrape(server.base_url + "/"))
    assert snapshot is not None
    assert snapshot.total("vllm:spec_decode_num_drafts_total") is not None
    assert snapshot.kv_cache_usage == 0.0  # idle


def test_scrape_is_none_when_metrics_are_missing_or_unreachable(closed_port: int) -> None:
    missing = httpx.MockTransport(lambda request: httpx.Response(404))
    assert asyncio.run(_scrape("http://server", missing)) is None
    assert asyncio.run(_scrape(f"http://127.0.0.1:{closed_port}")) is None


SCRAPES = Path(__file__).parents[1] / "testbed" / "scrapes"


def _real(name: str) -> str:
    return (SCRAPES / f"vllm-0.32-cpu-{name}.txt").read_text()


def test_every_sample_of_real_vllm_parses() -> None:
    text = _real("after")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    samples = parse_prometheus(text)
    assert len(samples) == len(lines) == 432
    assert [s.name for s in samples] == [line.split("{")[0].split(" ")[0] for line in lines]
    position = next(s for s in samples if s.name == ACCEPTED_PER_POSITION)
    assert position.labels == (("engine", "0"), ("model_name", "tiny-qwen"), ("position", "0"))


def test_real_vllm_counters_over_three_requests() -> None:
    before, after = snap(_real("before")), snap(_real("after"))
    assert before.has_spec_decode  # the counters exist, at zero, before the first request
    stats = spec_decode_delta(before, after)
    assert stats is not None
    # K=3, greedy on a random model that repeats itself: every draft token was accepted.
    assert (stats.drafts, stats.draft_tokens, stats.accepted_tokens) == (36.0, 108.0, 108.0)
    assert stats.accepted_per_position == (36.0, 36.0, 36.0)
    assert stats.mean_acceptance_length == pytest.approx(4.0)
    # The _created samples (start-up timestamps, some 1.8e9) are never added to a counter.
    assert after.total(DRAFTS) == 36.0
    assert after.total("vllm:generation_tokens_total") == 3 * 48
    assert after.by_label("vllm:request_success_total", "finished_reason")["length"] == 3.0
    assert after.kv_cache_usage == 0.0  # idle again
    assert preemptions_delta(before, after) == 0.0


def test_a_rejected_line_costs_only_itself_and_names_stay_as_written() -> None:
    text = (
        "# TYPE done counter\n"
        "done 2\n"  # a counter without _total: the library alone would call it done_total
        'cut{a="1" 5\n'
        'after{a="x\\\\y"} 7\n'
        "# TYPE x_total counter\n"
        "x_total 1\n"
        "x_created 1.7e9\n"
    )
    samples = parse_prometheus(text)
    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("done", (), 2.0),
        ("after", (("a", "x\\y"),), 7.0),
        ("x_total", (), 1.0),
        ("x_created", (), 1.7e9),
    ]
    assert snap(text).total("x_total") == 1.0
