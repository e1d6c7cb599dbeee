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
        values: secret values to remove wherever they appear (shorter than 8 characters are
            ignored: they would blank ordinary words and numbers).
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = {value for value in values if len(value) >= _MIN_SECRET_CHARS}
        self._values = sorted(kept, key=len, reverse=True)  # a longer one may hold a shorter

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str] | None = None, names: Iterable[str] = ()
    ) -> Redactor:
        """The values of ``env``'s (default: this process's) secret variables and of ``names``."""
        env = os.environ if env is None else env
        wanted = set(names)
        return cls(v for k, v in env.items() if k in wanted or is_secret_flag(k))

    def redact(self, text: str) -> str:
        """``text`` with every known secret value and every secret-shaped value replaced."""
        for value in self._values:
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
