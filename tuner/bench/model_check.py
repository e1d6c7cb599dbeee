"""The first look at a server, with the openai SDK: does it serve the model, does it answer.

Its own module because the SDK takes over a second to import: commands that never reach a
server (the simulator, a refused flag) do not pay for it.
"""

from __future__ import annotations

import openai

from tuner.bench.loadgen import Api
from tuner.errors import MeasurementError

__all__ = ["check_model", "served_models"]


def check_model(
    base_url: str, model: str, timeout_s: float, *, api: Api = "chat", api_key: str | None = None
) -> None:
    """Checks that the server serves ``model`` and answers a real 1-token request.

    Uses the openai SDK, the client users deploy against, so the check fails the way their
    applications would.

    Args:
        base_url: the server's ``http://host:port``.
        model: the model name requests will carry.
        timeout_s: limit on each of the two calls.
        api: ``"chat"`` sends a chat request (needs a chat template), ``"completions"`` a prompt.
        api_key: bearer token if the server was started with ``--api-key``.

    Raises:
        MeasurementError: the server cannot be reached, does not list ``model`` (the message names
            the models it serves), or does not answer the request.
    """
    root = base_url.rstrip("/")
    client = _openai_client(root, timeout_s, api_key)
    try:
        served = _list_models(client, root)
        if model not in served:
            names = ", ".join(served) or "none"
            raise MeasurementError(
                f"model '{model}' is not served at {root} (it serves: {names}); "
                "pass one of those names as the model"
            )
        try:
            if api == "chat":
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
                )
            else:
                client.completions.create(model=model, prompt="Say OK.", max_tokens=1)
        except openai.APIError as exc:
            # A refused chat request, unlike a timeout, often means a model without a template.
            refused = api == "chat" and isinstance(exc, openai.APIStatusError)
            hint = " (a base model without a chat template needs api 'completions')"
            raise MeasurementError(
                f"model '{model}' at {root} did not answer a 1-token {api} request: "
                f"{_openai_message(exc)}{hint if refused else ''}"
            ) from exc
    finally:
        client.close()


def served_models(
    base_url: str, timeout_s: float = 10.0, *, api_key: str | None = None
) -> list[str]:
    """The model names a server lists at ``/v1/models`` (MeasurementError when unreachable)."""
    root = base_url.rstrip("/")
    client = _openai_client(root, timeout_s, api_key)
    try:
        return _list_models(client, root)
    finally:
        client.close()


def _openai_client(root: str, timeout_s: float, api_key: str | None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{root}/v1", api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0
    )


def _list_models(client: openai.OpenAI, root: str) -> list[str]:
    try:
        return [m.id for m in client.models.list()]
    except openai.APIConnectionError as exc:
        raise MeasurementError(
            f"cannot reach {root}/v1/models ({exc}); is the server up at that address?"
        ) from exc
    except openai.APIStatusError as exc:
        raise MeasurementError(
            f"{root}/v1/models answered HTTP {exc.status_code}; is this an OpenAI-compatible "
            "server (vLLM), and is the API key right?"
        ) from exc


def _openai_message(exc: openai.APIError) -> str:
    message = " ".join(str(exc.message).split())
    if isinstance(exc, openai.APIStatusError):
        message = f"HTTP {exc.status_code}: {message}"
    return message[:200]
