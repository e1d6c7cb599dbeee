"""Where a study keeps its files: one type, so the layout is spelled in one place.

A study is named by its storage *and* its name: two databases may each hold a study called
``demo``, and their logs and ``best.yaml`` must not overwrite each other. The default SQLite
database of a study keeps the plain ``STUDIES_DIR/NAME/`` folder (what earlier versions wrote);
any other storage gets ``STUDIES_DIR/NAME@<hash of the storage URL>/``.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from tuner.config.local_paths import absolute
from tuner.errors import ConfigError

__all__ = [
    "StudyPaths",
    "absolute_storage",
    "check_study_name",
    "default_storage",
    "write_whole",
]

# Letters, digits and . _ - (not leading): a name that is safe as a folder and a file name.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PASSWORD = re.compile(r"(://[^:/@]*):[^@]*@")


def check_study_name(name: str) -> str:
    """Returns ``name`` when it can name a folder; ConfigError otherwise."""
    if not _NAME.match(name) or ".." in name or len(name) > 120:
        raise ConfigError(
            f"study name {name!r}: use letters, digits, '.', '_' and '-' (no '/', no '..', "
            "at most 120 characters), e.g. --study qwen32b-4090x2"
        )
    return name


def absolute_storage(url: str) -> str:
    """``url`` with a relative SQLite file made absolute; other URLs as they are.

    ``sqlite:///studies/demo.db`` names a file from the folder the command ran in: workers and
    resumes started elsewhere must find the same file. A malformed URL is left for
    :func:`tuner.study.storage.open_storage` to refuse.
    """
    # Here, not at the top: the CLI's options module imports this one, and SQLAlchemy would
    # add a third of a second to every `spectune --help`.
    import sqlalchemy.engine
    import sqlalchemy.exc

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        return url
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return url
    if database.startswith("file:") or Path(database).is_absolute():  # a URI, or already so
        return url
    return parsed.set(database=str(absolute(database))).render_as_string(hide_password=False)


def default_storage(study: str, studies_dir: Path) -> str:
    """The SQLite database a study gets when no ``--storage`` is given."""
    return f"sqlite:///{studies_dir / f'{check_study_name(study)}.db'}"


@dataclass(frozen=True)
class StudyPaths:
    """The folder of one study in one storage, and the files inside it."""

    folder: Path

    @classmethod
    def of(cls, studies_dir: Path, study: str, storage: str | None = None) -> StudyPaths:
        """The folder for ``study`` stored at ``storage`` (None: its default SQLite file)."""
        check_study_name(study)
        if storage is None or storage == default_storage(study, studies_dir):
            return cls(studies_dir / study)
        # Without the password: changing it must not move the study's files.
        digest = hashlib.sha256(_PASSWORD.sub(r"\1@", storage).encode()).hexdigest()[:8]
        return cls(studies_dir / f"{study}@{digest}")

    @property
    def logs(self) -> Path:
        """Server logs: ``trial-<n>.log`` and ``confirm-<trial>/``."""
        return self.folder / "logs"

    @property
    def best_yaml(self) -> Path:
        """The recommended config as ``vllm serve --config`` reads it."""
        return self.folder / "best.yaml"

    @property
    def report(self) -> Path:
        """The default folder of ``spectune report``."""
        return self.folder / "report"

    @property
    def vllm_cache(self) -> Path:
        """vLLM's cache (torch.compile, CUDA graphs), kept across the study's containers."""
        return self.folder / "vllm-cache"

    @property
    def artifacts(self) -> Path:
        """optuna-dashboard's artifact store for this study."""
        return self.folder / "artifacts"


def write_whole(path: Path, text: str) -> None:
    """Writes ``path`` so a reader sees the old file or the new one, never a mix.

    Runs sharing a studies folder may write one study's ``best.yaml`` or report at once:
    each writes a file of its own beside ``path`` (created as ``open`` would, so the umask
    decides its mode) and renames it over, which is atomic.
    """
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        with scratch.open("x", encoding="utf-8") as out:
            out.write(text)
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)
