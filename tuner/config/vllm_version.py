"""vLLM versions: parsed from what users write, from image tags, or from ``vllm --version``."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuner.errors import ConfigError, LaunchError

__all__ = [
    "NEWEST_KNOWN",
    "OLDEST_SUPPORTED",
    "VllmVersion",
    "check_release",
    "detect_version",
    "parse_version",
    "version_from_image",
]


@dataclass(frozen=True, order=True)
class VllmVersion:
    """A vLLM release, compared by (major, minor, patch); ``text`` keeps what the user wrote."""

    major: int
    minor: int
    patch: int = 0
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}"


NEWEST_KNOWN = VllmVersion(0, 34, 0)
"""The newest release whose dialect was checked; ``latest``/``nightly`` mean this one."""

OLDEST_SUPPORTED = VllmVersion(0, 6, 0)

# Leading release numbers; pre/post/dev/local suffixes ("rc1", ".post1", "+cpu", "-cu128") are
# ignored because no dialect change happened inside a release's pre-releases we support.
_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
_NEWEST_ALIASES = ("latest", "nightly")


def parse_version(text: str) -> VllmVersion:
    """Parses ``"0.7.2"``, ``"v0.10.1.1"``, ``"0.32.0+cpu"``, ``"0.8.5.post1"`` or ``"latest"``.

    Raises:
        ConfigError: the text names no vLLM release.
    """
    cleaned = text.strip()
    if cleaned.lower().startswith(_NEWEST_ALIASES):
        return VllmVersion(NEWEST_KNOWN.major, NEWEST_KNOWN.minor, NEWEST_KNOWN.patch, cleaned)
    match = _VERSION_RE.match(cleaned)
    if match is None:
        raise ConfigError(
            f"cannot read a vLLM version from {text!r}: pass one like --vllm-version 0.8.5"
        )
    major, minor, patch = match.group(1), match.group(2), match.group(3) or "0"
    return VllmVersion(int(major), int(minor), int(patch), cleaned)


# A whole release as vLLM names them: 0.8.5, v0.10.1.1, 0.8.5.post1, 0.11.0rc2, 0.32.0+cpu.
_RELEASE_RE = re.compile(r"^v?\d+\.\d+(\.\d+){0,2}((rc|a|b)\d+|\.post\d+|\.dev\d+)*([+-][\w.]+)?$")


def check_release(text: str, flag: str = "--vllm-version") -> VllmVersion:
    """A version the user names, held to the releases whose flags spectune speaks.

    :func:`parse_version` reads the leading numbers of whatever a tag or ``vllm --version``
    prints; a version typed by hand must be one whole release, from
    :data:`OLDEST_SUPPORTED` to :data:`NEWEST_KNOWN` (or ``latest``/``nightly``).

    Raises:
        ConfigError: one line naming ``flag``, what it takes and why.
    """
    cleaned = text.strip()
    if cleaned.lower() in _NEWEST_ALIASES:
        return parse_version(cleaned)
    if not _RELEASE_RE.match(cleaned):
        raise ConfigError(
            f"{flag} {text!r}: not a vLLM release; write one like 0.8.5, 0.10.1.1 or latest"
        )
    version = parse_version(cleaned)
    if not OLDEST_SUPPORTED <= version <= NEWEST_KNOWN:
        raise ConfigError(
            f"{flag} {text}: spectune speaks the flags of vLLM {OLDEST_SUPPORTED} to "
            f"{NEWEST_KNOWN}; pass one of those, or latest for the newest"
        )
    return version


def version_from_image(image: str) -> VllmVersion | None:
    """The vLLM version an image tag names (``vllm/vllm-openai:v0.7.2`` → 0.7.2).

    No tag means ``latest``. Returns None when the tag is not a version (``my-build``) or the
    image is pinned only by digest: the caller then asks the image itself (``vllm --version``).
    """
    name, _, digest = image.partition("@")
    last_part = name.rsplit("/", 1)[-1]
    if ":" in last_part:
        tag = last_part.split(":", 1)[1]
    elif digest:
        return None
    else:
        tag = "latest"
    try:
        return parse_version(tag)
    except ConfigError:
        return None


def detect_version(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 180.0
) -> VllmVersion:
    """Runs ``<command> --version`` and parses its answer (real vLLM takes ~10-15 s to import).

    Raises:
        ConfigError: the command does not exist or prints no version.
        LaunchError: the command hangs past ``timeout_s``.
    """
    argv = [*command, "--version"]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise ConfigError(
            f"cannot run {command[0]!r}: not found; install vLLM or pass --vllm-version"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"{' '.join(argv)} did not answer within {timeout_s:g} s") from exc
    # vLLM may log warnings before the version; the version is the last line that is one.
    for line in reversed((done.stdout + "\n" + done.stderr).splitlines()):
        if _VERSION_RE.match(line.strip()):
            return parse_version(line)
    last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    raise ConfigError(
        f"{' '.join(argv)} printed no version (exit status {done.returncode}: {last[0]}); "
        "pass --vllm-version"
    )
