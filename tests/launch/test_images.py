"""Pull progress and pull failures, on what the engine really sent.

``TWO_LAYERS`` is the decoded stream of ``client.api.pull(..., stream=True, decode=True)`` for
a two-layer image from a local registry (Docker Engine 20.10, docker-py 7.2); the error
messages are the ``explanation`` of the ``APIError`` the same engine raised.
"""

from __future__ import annotations

from typing import Any

import pytest

from tuner.errors import ConfigError, LaunchError
from tuner.launch.images import PULLING, PullProgress, pull_error, registry_of


def _bar(status: str, layer: str, current: int, total: int) -> dict[str, Any]:
    detail = {"current": current, "total": total}
    return {"status": status, "progressDetail": detail, "progress": "[=>  ]", "id": layer}


A, B = "3cf54d564c9c", "4968ad27ad1a"
TWO_LAYERS: list[dict[str, Any]] = [
    {"status": "Pulling from x", "id": "two"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": A},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": B},
    _bar("Downloading", A, 36445, 3001127),
    _bar("Downloading", B, 36445, 1500641),
    {"status": "Verifying Checksum", "progressDetail": {}, "id": A},
    {"status": "Download complete", "progressDetail": {}, "id": A},
    _bar("Downloading", B, 1500641, 1500641),
    {"status": "Verifying Checksum", "progressDetail": {}, "id": B},
    {"status": "Download complete", "progressDetail": {}, "id": B},
    _bar("Extracting", A, 32768, 3001127),
    _bar("Extracting", A, 3001127, 3001127),
    {"status": "Pull complete", "progressDetail": {}, "id": A},
    _bar("Extracting", B, 32768, 1500641),
    _bar("Extracting", B, 1500641, 1500641),
    {"status": "Pull complete", "progressDetail": {}, "id": B},
    {"status": "Digest: sha256:bb868205e86fc8df47156798f6f1215c0b22f7c34532f43fa17f00aa65505842"},
    {"status": "Status: Downloaded newer image for 127.0.0.1:5123/x:two"},
]


def _fed(items: list[dict[str, Any]]) -> PullProgress:
    progress = PullProgress()
    for item in items:
        progress.update(item)
    return progress


def test_layers_are_known_before_their_sizes() -> None:
    event = _fed(TWO_LAYERS[:3]).event(0.5)
    assert event.phase == PULLING
    assert event.detail == "0.0 of 0.0 MB, 0 of 2 layers"
    assert (event.done, event.total, event.elapsed_s) == (0, 0, 0.5)


def test_bytes_add_up_over_layers_while_they_download() -> None:
    event = _fed(TWO_LAYERS[:5]).event(1.0)
    assert (event.done, event.total) == (2 * 36445, 3001127 + 1500641)
    assert event.detail == "0.1 of 4.5 MB, 0 of 2 layers"


def test_a_downloaded_layer_counts_whole_and_extraction_moves_nothing() -> None:
    after_a = _fed(TWO_LAYERS[:7]).event(2.0)
    assert after_a.done == 3001127 + 36445
    assert after_a.detail == "3.0 of 4.5 MB, 1 of 2 layers"
    progress = _fed(TWO_LAYERS[:10])
    assert [progress.update(item) for item in TWO_LAYERS[10:]] == [False] * 8
    done = progress.event(3.0)
    assert done.done == done.total == 3001127 + 1500641
    assert done.detail == "4.5 of 4.5 MB, 2 of 2 layers"


def test_layers_the_host_has_count_as_layers_not_bytes() -> None:
    stream: list[dict[str, Any]] = [
        {"status": "Pulling from vllm/vllm-openai", "id": "v0.8.5"},
        {"status": "Already exists", "progressDetail": {}, "id": "aaaa"},
        {"status": "Pulling fs layer", "progressDetail": {}, "id": "bbbb"},
        {"status": "Waiting", "progressDetail": {}, "id": "bbbb"},
        _bar("Downloading", "bbbb", 1_200_000_000, 3_400_000_000),
    ]
    event = _fed(stream).event(9.0)
    assert event.detail == "1.2 of 3.4 GB, 1 of 2 layers"
    assert (event.done, event.total) == (1_200_000_000, 3_400_000_000)


def test_only_changes_are_news() -> None:
    progress = PullProgress()
    assert progress.update(TWO_LAYERS[0]) is False  # "Pulling from": no layer
    assert progress.update(TWO_LAYERS[1]) is True  # a new layer
    assert progress.update(TWO_LAYERS[1]) is False
    assert progress.update(TWO_LAYERS[-1]) is False


@pytest.mark.parametrize(
    ("image", "host"),
    [
        ("vllm/vllm-openai:v0.8.5", "docker.io"),
        ("127.0.0.1:5123/x:two", "127.0.0.1:5123"),
        ("ghcr.io/org/vllm@sha256:abcd", "ghcr.io"),
    ],
)
def test_the_registry_of_an_image(image: str, host: str) -> None:
    assert registry_of(image) == host


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (
            "manifest for 127.0.0.1:5123/x:nope not found: manifest unknown: manifest unknown",
            ["image 127.0.0.1:5123/x:nope is not on registry 127.0.0.1:5123", "check the tag"],
        ),
        (
            'Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused',
            ["cannot reach registry 127.0.0.1:5123", "start the registry", "--image"],
        ),
        (
            'Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on '
            "10.255.255.53:53: no such host",
            ["cannot reach registry 127.0.0.1:5123", "check the network"],
        ),
        (
            'Head "http://127.0.0.1:5124/v2/x/manifests/two": no basic auth credentials',
            ["wants a login to pull image 127.0.0.1:5123/x:nope", "docker login 127.0.0.1:5123"],
        ),
        (
            "pull access denied for 127.0.0.1:5123/x, repository does not exist or may require "
            "'docker login': denied: requested access to the resource is denied",
            ["wants a login", "docker login 127.0.0.1:5123", "check the image name"],
        ),
        (
            'Get "https://10.0.0.5:5000/v2/": http: server gave HTTP response to HTTPS client',
            ["plain HTTP", "insecure-registries"],
        ),
    ],
)
def test_pull_failures_the_user_fixes_are_one_config_line(message: str, words: list[str]) -> None:
    error = pull_error("127.0.0.1:5123/x:nope", message)
    assert isinstance(error, ConfigError)
    assert "\n" not in str(error)
    for word in words:
        assert word in str(error)


def test_other_pull_failures_are_launch_errors_in_the_engines_words() -> None:
    error = pull_error("127.0.0.1:5123/x:two", "unknown blob")
    assert type(error) is LaunchError
    assert str(error) == "docker could not pull image 127.0.0.1:5123/x:two: unknown blob"
