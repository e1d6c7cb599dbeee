# spectune in a container, driving the host's Docker Engine (each trial is a sibling
# vllm/vllm-openai container started through the mounted socket). See
# docs/getting-started/gpu-host.md, "Docker image".
#
#   docker build -t spectune .
#
# BASE_IMAGE is an argument so that CI can build from a base made locally with `docker import`
# (no registry there); any image with Python 3.11+ and pip on PATH as `python` will do.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# NVML (peak GPU memory, waiting for memory to be freed) is all spectune itself needs of the
# GPUs; with `--gpus all` the NVIDIA runtime then mounts only the management library.
ENV NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# A plain (non-editable) install; the sources stay in /src (under 1 MB), so the base needs
# nothing but Python, pip and /bin/sh.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY tuner ./tuner
COPY search_spaces ./search_spaces
RUN python -m pip install .

# Studies (SQLite databases, trial logs, exports) go to /work/studies: mount a host folder there.
WORKDIR /work
ENTRYPOINT ["spectune"]
CMD ["--help"]
