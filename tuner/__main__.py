"""``python -m tuner``: the same CLI as the ``spectune`` command."""

from tuner.cli import app

app()
