"""The OpenAI side of the fake server: reading request bodies, writing vLLM-shaped answers.

Prompts are not tokenized: a prompt counts ``ceil(characters / 4)`` tokens
(:data:`~tuner.config.workload.CHARS_PER_TOKEN`, the ratio spectune's own prompt sets are built
with), and chat messages count their text only, no template tokens. The workload kind that drives
the simulated acceptance is guessed from markers that spectune's built-in prompt sets carry
(:func:`prompt_set_of`); anything else counts as ``chat``. The simulator has no end of
sequence: every request runs to its ``max_tokens`` (as with ``ignore_eos``), and without one to
the end of the context (chat) or 16 tokens (completions), as vLLM does. Generated text is a
fixed cycle of words, one word per token.

The JSON shapes follow vLLM's OpenAI server: ``chat.completion.chunk`` / ``text_completion``
chunks with the finish reason on the last token's chunk, then (with
``stream_options.include_usage``) a chunk with empty ``choices`` and the ``usage``, then
``data: [DONE]``. Errors are ``{"error": {"message", "type", "param", "code"}}``.

Per-request ``metrics`` as vLLM sends them (:func:`request_metrics`): only when the server was
started with ``--enable-per-request-metrics``, which releases from
:data:`~tuner.config.vllm_args.PER_REQUEST_METRICS_SINCE` (``--sim-vllm-version``) take.
spectune's launchers add it to every measured server. They ride on the streamed usage
chunk (vLLM 0.34 ``vllm/entrypoints/openai/chat_completion/serving.py`` and
``completion/serving.py``: "metrics ride on this final usage chunk"), with the unknown fields
left out, and on the non-streamed answer, which writes ``"metrics": null`` when they are off.
Older imitated releases send no ``metrics`` key at all.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from tuner.config.workload import CHARS_PER_TOKEN

__all__ = [
    "DONE_EVENT",
    "CompletionParams",
    "RequestError",
    "StreamFormat",
    "completion_body",
    "error_body",
    "parse_completion",
    "prompt_set_of",
    "request_metrics",
    "token_text",
    "token_words",
]

DONE_EVENT = b"data: [DONE]\n\n"
# vLLM's /v1/completions answers 16 tokens when max_tokens is absent (the OpenAI default).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
_TEXT = (
    "the quick brown fox jumps over a lazy dog while simulated tokens stream out of an "
    "engine that never touched a GPU and only pretends to decode text at the speed of "
    "vLLM on the hardware it was told about"
)
_WORDS = tuple(f" {word}" for word in _TEXT.split(" "))
# Markers of spectune's built-in prompt sets (tuner.config.workload), most specific first.
_MARKERS = (
    ("long-context", "Read the report below"),
    ("code", "```python"),
    ("creative", "short story"),
)


class RequestError(Exception):
    """A request vLLM would refuse; answered with ``status`` and vLLM's error JSON.

    Attributes:
        status: the HTTP status.
        kind: the error ``type`` (``BadRequestError``, ``NotFoundError``, ...).
        param: the offending request field, if one.
    """

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


def error_body(status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True)
class CompletionParams:
    """What the simulator needs from one completion request.

    Attributes:
        chat: ``/v1/chat/completions`` (else ``/v1/completions``).
        model: the model name the request asked for; None when it did not say.
        prompt_tokens: estimated prompt length.
        max_tokens: tokens to generate; None lets the server fill the context (chat's default).
        temperature: sampling temperature (vLLM's default 1.0 when absent).
        prompt_set: the workload kind guessed from the prompt.
        prompt: the prompt's text (a lossy verifier's answer is drawn from it).
        stream: stream server-sent events.
        include_usage: end the stream with a usage chunk.
    """

    chat: bool
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    temperature: float
    prompt_set: str
    prompt: str
    stream: bool
    include_usage: bool


def _bad(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, "BadRequestError", message, param)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _prompt(payload: dict[str, Any], chat: bool) -> tuple[str, int | None]:
    """The prompt text, and its token count when the client sent token ids."""
    if chat:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _bad("'messages' must be a non-empty list", "messages")
        return "\n".join(
            _message_text(m.get("content")) for m in messages if isinstance(m, dict)
        ), None
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return "", len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return "".join(prompt), None
    raise _bad("'prompt' must be a string, a list of strings or a list of token ids", "prompt")


def prompt_set_of(text: str) -> str:
    """The workload kind of a prompt, from the markers of spectune's built-in prompt sets."""
    for name, marker in _MARKERS:
        if marker in text:
            return name
    return "chat"


def _positive_int(value: Any, param: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(f"{param} must be at least 1, got {value!r}", param)
    return value


def parse_completion(body: bytes, chat: bool) -> CompletionParams:
    """Reads a completion request body.

    Raises:
        RequestError: invalid JSON or fields vLLM would reject (HTTP 400).
    """
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(f"JSON decode error: {exc}") from None
    if not isinstance(payload, dict):
        raise _bad("the request body must be a JSON object")
    text, token_count = _prompt(payload, chat)
    prompt_tokens = token_count or max(1, math.ceil(len(text) / CHARS_PER_TOKEN))
    raw_max = payload.get("max_completion_tokens") if chat else None
    if raw_max is None:
        raw_max = payload.get("max_tokens")
    max_tokens = None
    if raw_max is not None:
        max_tokens = _positive_int(raw_max, "max_tokens")
    elif not chat:
        max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
    temperature = payload.get("temperature")
    if temperature is None:
        temperature = 1.0
    if not isinstance(temperature, int | float) or isinstance(temperature, bool) or temperature < 0:
        raise _bad(f"temperature must be a non-negative number, got {temperature!r}", "temperature")
    options = payload.get("stream_options")
    model = payload.get("model")
    return CompletionParams(
        chat=chat,
        model=str(model) if model is not None else None,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        temperature=float(temperature),
        prompt_set=prompt_set_of(text),
        prompt=text,
        stream=bool(payload.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
    )


def token_words(start: int, count: int) -> list[str]:
    """The words of tokens ``start`` to ``start + count`` of a lossless completion."""
    return [_WORDS[(start + i) % len(_WORDS)] for i in range(count)]


def token_text(start: int, count: int) -> str:
    """The text of tokens ``start`` to ``start + count`` of a lossless completion."""
    return "".join(token_words(start, count))


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class StreamFormat:
    """Pre-rendered SSE events of one streamed completion (the hot path of the server).

    Only the text and the finish reason change between chunks, so each event is the fixed
    prefix, the JSON-encoded text and a fixed suffix.

    Args:
        params: the request.
        request_id: vLLM-style id (``chatcmpl-...`` or ``cmpl-...``).
        model: the model name echoed back.
    """

    def __init__(self, params: CompletionParams, request_id: str, model: str) -> None:
        self.chat = params.chat
        self._created = int(time.time())
        self._id = request_id
        self._model = model
        self._head = json.dumps(
            {
                "id": request_id,
                "object": "chat.completion.chunk" if params.chat else "text_completion",
                "created": self._created,
                "model": model,
            },
            separators=(",", ":"),
        )[:-1]
        if params.chat:
            self._open = self._head + ',"choices":[{"index":0,"delta":{"content":'
            self._close = '},"logprobs":null,"finish_reason":%s}]}'
        else:
            self._open = self._head + ',"choices":[{"index":0,"text":'
            self._close = ',"logprobs":null,"finish_reason":%s,"stop_reason":null}]}'

    def role_event(self) -> bytes:
        """The first chat event: the assistant role and no text, as vLLM sends it."""
        choice = (
            '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            '"finish_reason":null}]'
        )
        return f'data: {self._head},"choices":{choice}}}\n\n'.encode()

    def token_event(self, text: str, finished: bool) -> bytes:
        """An event carrying ``text``; the last one names the finish reason ``length``."""
        close = self._close % ('"length"' if finished else "null")
        return f"data: {self._open}{json.dumps(text)}{close}\n\n".encode()

    def usage_event(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        metrics: dict[str, float | None] | None = None,
    ) -> bytes:
        """The usage event (``stream_options.include_usage``): empty ``choices``, and the
        request's ``metrics`` when given (vLLM drops the None fields from this chunk)."""
        usage = json.dumps(_usage(prompt_tokens, completion_tokens), separators=(",", ":"))
        extra = ""
        if metrics is not None:
            known = {key: value for key, value in metrics.items() if value is not None}
            extra = ',"metrics":' + json.dumps(known, separators=(",", ":"))
        return f'data: {self._head},"choices":[],"usage":{usage}{extra}}}\n\n'.encode()

    def error_event(self, message: str) -> bytes:
        """The error vLLM streams when a request fails mid-stream (then ``[DONE]``)."""
        error = {"object": "error", "message": message, "type": "InternalServerError", "code": 500}
        return f"data: {json.dumps({'error': error}, separators=(',', ':'))}\n\n".encode()

    def malformed_event(self) -> bytes:
        """A ``data:`` line cut off mid-JSON, as a broken proxy or server might send."""
        return f"data: {self._open}\n\n".encode()


def request_metrics(
    queued: float, scheduled: float, first_token: float, last_token: float, tokens: int
) -> dict[str, float | None]:
    """vLLM's per-request ``metrics`` from the request's timestamps (seconds).

    As ``build_per_request_timing_metrics`` (vLLM 0.34 ``vllm/entrypoints/generate/base/
    serving.py``) computes them: TTFT from the first scheduling to the first token (the queue
    left out), the queue from arrival to that scheduling, generation time and mean ITL over
    the decode, tokens per second from the scheduling to the last token.
    """
    decode_s = last_token - first_token
    inference_s = last_token - scheduled
    return {
        "time_to_first_token_ms": (first_token - scheduled) * 1000.0,
        "generation_time_ms": decode_s * 1000.0,
        "queue_time_ms": (scheduled - queued) * 1000.0,
        "mean_itl_ms": decode_s / (tokens - 1) * 1000.0 if tokens > 1 else None,
        "tokens_per_second": tokens / inference_s if inference_s > 0 else None,
    }


def completion_body(
    params: CompletionParams,
    request_id: str,
    model: str,
    completion_tokens: int,
    text: str,
    metrics: dict[str, float | None] | None = None,
    *,
    with_metrics_key: bool = False,
) -> dict[str, Any]:
    """The non-streamed answer to a completion request: ``text``, ``completion_tokens`` long.

    ``metrics`` is the request's (:func:`request_metrics`); ``with_metrics_key`` writes the
    ``metrics`` key even without them (``null``), as releases with the flag do.
    """
    choice: dict[str, Any] = {
        "index": 0,
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
    }
    if params.chat:
        choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
    else:
        choice["text"] = text
    return {
        "id": request_id,
        "object": "chat.completion" if params.chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(params.prompt_tokens, completion_tokens),
        **({"metrics": metrics} if metrics is not None or with_metrics_key else {}),
    }
