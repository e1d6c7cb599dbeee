"""Secrets out of every text spectune writes: server logs, stored failures, error lines.

A server may print what it was given (its environment, its flags, a URL with a password), and
its log is copied into the log file, the study's database (a failed start's ``log_tail``), the
dashboard and the terminal. One :class:`Redactor` is applied where the log is first read, before
any of those: it knows the values of this process's secret variables (``HF_TOKEN``, any name
:func:`~tuner.config.trial.is_secret_flag` calls secret, and names passed by name to containers)
and the shapes a secret takes in text: ``--api-key VALUE``, ``api_key=VALUE``,
``'api_key': 'VALUE'`` (vLLM's "non-default args" line) and ``scheme://user:password@host``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from tuner.config.trial import is_secret_flag

__all__ = ["REDACTED", "Redactor"]

REDACTED = "[redacted]"
# Shorter values ("1", "true") would blank unrelated text; real tokens and keys are far longer.
_MIN_SECRET_CHARS = 8
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
_FLAG_VALUE = re.compile(r"(?P<name>--[A-Za-z][\w-]*)(?P<sep>=|\s+)(?P<value>[^\s,;'\"`]+)")
_ASSIGNMENT = re.compile(r"(?<![\w-])(?P<name>[A-Za-z][\w-]*)(?P<sep>=)(?P<value>[^\s,;'\"`]+)")
_QUOTED_PAIR = re.compile(
    r"(?P<name>['\"][A-Za-z][\w-]*['\"])(?P<sep>\s*:\s*)(?P<value>'[^']*'|\"[^\"]*\")"
)


class Redactor:
    """Replaces secret values in text with ``[redacted]``.

    Args:
        values: secret values to remove wherever they appear.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        # Longest first: a longer value may hold a shorter one.
        self.values: tuple[str, ...] = tuple(
            sorted(set(filter(None, values)), key=len, reverse=True)
        )

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str] | None = None, names: Iterable[str] = ()
    ) -> Redactor:
        """The values of ``names`` in ``env`` (default: this process's environment) and of
        every variable whose name looks secret (``HF_TOKEN``, ``VLLM_API_KEY``).

        A value of a variable found by its name's looks alone is kept only from 8 characters
        on: shorter ones ("1", "true") are no credential and would blank ordinary text.
        """
        env = os.environ if env is None else env
        wanted = set(names)
        return cls(
            value
            for name, value in env.items()
            if name in wanted or (is_secret_flag(name) and len(value) >= _MIN_SECRET_CHARS)
        )

    def redact(self, text: str) -> str:
        """``text`` with every known secret value and every secret-shaped value replaced."""
        for value in self.values:
            text = text.replace(value, REDACTED)
        text = _URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
        for pattern in (_FLAG_VALUE, _ASSIGNMENT, _QUOTED_PAIR):
            text = pattern.sub(_secret_value, text)
        return text


def _secret_value(match: re.Match[str]) -> str:
    name = match["name"].strip("'\"")
    if not is_secret_flag(name):
        return match[0]
    value = match["value"]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match['name']}{match['sep']}{quote}{REDACTED}{quote}"
