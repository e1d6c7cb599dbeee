"""Credentials in extra vLLM flags are recognised however a space spells them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.redact import Redactor
from tuner.config.trial import is_secret_flag
from tuner.launch.logpump import LogPump


@pytest.mark.parametrize(
    "flag",
    [
        "api-key",
        "--api-key",
        "api_key",
        "API-KEY",
        "hf-token",
        "api-key=sk-123",  # the value glued to the name
        "--hf-token=hf_abc",
        "api",  # vLLM's parser takes unambiguous prefixes: --api reaches --api-key
        "api-k",
        "hf-tok",
        "s3-secret",
        "ssl-keyfile-password",
    ],
)
def test_credential_flags_are_secret(flag: str) -> None:
    assert is_secret_flag(flag)


@pytest.mark.parametrize(
    "flag",
    [
        "tokenizer",
        "max-num-batched-tokens",
        "enforce-eager",
        "kv-cache-memory-bytes",
        "api-server-count",
        "max-model-len",
        "a",
    ],
)
def test_ordinary_flags_are_not(flag: str) -> None:
    assert not is_secret_flag(flag)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("environment HF_TOKEN=hf_env_value_123", "environment HF_TOKEN=[redacted]"),
        ("token in prose: hf_env_value_123.", "token in prose: [redacted]."),
        (
            "cannot reach http://bob:pa55word@10.0.0.1:8000/v1",
            "cannot reach http://[redacted]@10.0.0.1:8000/v1",
        ),
        (
            "vllm serve m --api-key sk-1 --tokenizer t",
            "vllm serve m --api-key [redacted] --tokenizer t",
        ),
        (
            "non-default args: {'api_key': 'sk-1', 'model': 'm'}",
            "non-default args: {'api_key': '[redacted]', 'model': 'm'}",
        ),
        ("`api-key=sk-1` carries a secret", "`api-key=[redacted]` carries a secret"),
        ("--max-num-batched-tokens 512 tokenizer=t", "--max-num-batched-tokens 512 tokenizer=t"),
    ],
)
def test_the_redactor_removes_known_values_and_secret_shapes(text: str, kept: str) -> None:
    redactor = Redactor.from_environment({"HF_TOKEN": "hf_env_value_123", "SHORT_KEY": "1"})
    assert redactor.redact(text) == kept


def test_short_values_of_secret_looking_variables_are_not_blanked() -> None:
    redactor = Redactor.from_environment({"SOME_KEY": "true", "PATH": "/usr/local/bin/xyz1"})
    assert redactor.redact("true at /usr/local/bin/xyz1") == "true at /usr/local/bin/xyz1"


def test_the_log_pump_writes_every_line_redacted(tmp_path: Path) -> None:
    log = tmp_path / "trial-0.log"
    pump = LogPump(log, Redactor(["s3cr3t-value"]), "$ server\n", append=False)
    script = (
        "import sys; [print('line', i, 's3cr3t-value') for i in range(3000)]; "
        "sys.stdout.write('end')"
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=pump.write_fd) as proc:
        pump.start()
        proc.wait(timeout=30)
    pump.sync()  # what the server wrote before it exited is in the file now
    text = log.read_text()
    pump.close()
    assert text.startswith("$ server\nline 0 [redacted]\n") and text.endswith(
        "line 2999 [redacted]\nend"
    )
    assert "s3cr3t" not in text


def test_an_error_line_never_prints_url_credentials(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "--url", "http://bob:pa55word@127.0.0.1:9", "--model", "m", "--requests", "1"],
    )
    assert result.exit_code == 2, result.output
    assert "pa55word" not in result.output and "[redacted]@127.0.0.1:9" in result.output
