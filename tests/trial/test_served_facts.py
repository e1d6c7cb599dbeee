"""What vLLM ran, as each server's log states it: stored with the trial, said in the export and
the report, and a slower path warned about (the fake server plays a driver too old for
FlashAttention)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trial.traffic_support import fake_request, small_space
from tuner.export.vllm import export
from tuner.report.page import write_report
from tuner.study.optimize import optimize
from tuner.trial.record import records

pytestmark = pytest.mark.usefixtures("fast_fake_server")

FALLBACK = "vLLM fell back to the TRITON_ATTN attention backend"


@pytest.mark.parametrize("fault", ["", "attention-fallback"])
def test_each_trial_stores_what_its_server_ran_and_a_fallback_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", fault)
    space = small_space(tmp_path, workload={"concurrency": [1], "temperature": 0.2})
    result = optimize(fake_request(tmp_path, space, 1))
    (record,) = records(result.handle.get_trials())
    served = record.served
    assert served is not None
    assert (served.device, served.chunked_prefill, served.cuda_graphs) == (
        "cuda",
        True,
        "FULL_AND_PIECEWISE",
    )
    assert served.kv_cache_tokens is not None and served.kv_cache_tokens >= 8192
    assert served.attention_backend == ("TRITON_ATTN" if fault else "FLASH_ATTN")
    assert [FALLBACK in w for w in served.warnings] == ([True] if fault else [])

    header = export(result.handle, space, "vllm").text.splitlines()
    ran = next(line for line in header if line.startswith("# vLLM ran: "))
    assert f"attention {served.attention_backend}, CUDA graphs FULL_AND_PIECEWISE" in ran
    assert any(FALLBACK in line and "WARNING" in line for line in header) == bool(fault)
    page = write_report(result.handle, space, tmp_path / "report").html.read_text()
    assert f"vLLM ran trial {record.number} with attention {served.attention_backend}" in page
    assert (FALLBACK in page) == bool(fault)
