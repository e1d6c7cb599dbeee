#!/usr/bin/env bash
# Builds the spectune image from the repository's Dockerfile without any registry, then checks it.
#
# Usage: .ci/build-test-images.sh [TAG]        (TAG defaults to spectune:ci)
#
# There is no registry here, so python:3.11-slim cannot be pulled. Instead a base image is made
# with `docker import` from this host's own Python (interpreter, standard library and pip; no
# third-party packages), the shared libraries its binary and extension modules load (found with
# ldd), /bin/sh, the glibc/gcc libraries manylinux wheels may assume and the CA bundle; the
# Dockerfile is then
# built with --build-arg BASE_IMAGE=that. pip inside the build reaches PyPI over the network
# (checked: containers here can) and verifies TLS with the host's CA bundle (PIP_CERT).
#
# Finally the image is run: `spectune --help`, a ping of the host's Docker Engine through the
# mounted socket (how the image is meant to be used), and a 2-trial simulator study writing to
# a mounted studies folder. About 1.5 minutes in all, most of it pip.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-spectune:ci}"
BASE="spectune-ci-base:py3"
PYTHON="${PYTHON:-python3}"   # any interpreter of the Python to put in the base (>= 3.11)
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

# The base interpreter (not a venv's), and where its parts live.
base_python="$("${PYTHON}" -c 'import sys; print(sys._base_executable)')"
paths="$("${base_python}" -c '
import os, sys, sysconfig
import pip
print(os.path.realpath(sys.executable), sysconfig.get_paths()["stdlib"],
      sysconfig.get_paths()["purelib"], os.path.dirname(pip.__path__[0]), sys.prefix)')"
read -r pybin stdlib purelib pip_parent prefix <<<"${paths}"
stage="$(mktemp -d)"
studies="$(mktemp -d)"
trap 'rm -rf "${stage}" "${studies}"' EXIT

# A merged-/usr layout, like the host's: /bin, /lib, /lib64 point into /usr.
mkdir -p "${stage}/usr/bin" "${stage}/usr/lib" "${stage}/usr/lib64" "${stage}/etc/ssl/certs"
ln -s usr/bin "${stage}/bin"
ln -s usr/lib "${stage}/lib"
ln -s usr/lib64 "${stage}/lib64"
install -d -m 1777 "${stage}/tmp"
install -d -m 0700 "${stage}/root"

# Copies one file (dereferenced) to the same, canonical directory inside the stage.
copy() {
    local dir
    dir="$(readlink -f "$(dirname "$1")")"
    mkdir -p "${stage}${dir}"
    cp -L "$1" "${stage}${dir}/$(basename "$1")"
}

# The interpreter and its standard library (no tests, caches or third-party packages), and pip.
copy "${pybin}"
tar -C / -cf - --exclude="${stdlib#/}/test" --exclude='site-packages' --exclude='dist-packages' \
    --exclude='__pycache__' "${stdlib#/}" | tar -C "${stage}" -xf -
mkdir -p "${stage}${purelib}"
cp -a "${pip_parent}"/pip "${pip_parent}"/pip-*.dist-info "${stage}${purelib}/"

# The shared libraries Python and its extension modules load, and a shell for RUN.
copy /bin/sh
copy "$(readlink -f /bin/sh)"
libs="$(ldd "${pybin}" "$(readlink -f /bin/sh)" "${stdlib}/lib-dynload/"*.so \
        2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/.*ld-linux/ {print $1}' | sort -u)"
for lib in ${libs}; do copy "${lib}"; done
# What manylinux wheels may assume without bundling it (e.g. mypyc builds link libpthread).
for lib in libstdc++.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 \
           libresolv.so.2; do
    copy "$(ldconfig -p | awk -v l="${lib}" '$1 == l && /x86-64/ {print $NF; exit}')"
done
cp -L "${CA_BUNDLE}" "${stage}/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "${stage}/etc/passwd"
printf 'root:x:0:\n' > "${stage}/etc/group"
for name in python python3; do
    [[ -e "${stage}/usr/bin/${name}" ]] || ln -s "${pybin}" "${stage}/usr/bin/${name}"
done

# Images this script built before; removed once replaced, so reruns leave no untagged layers.
old_images="$(docker images -q "${BASE}") $(docker images -q "${TAG}")"

echo "importing base image ${BASE} ($(du -sh "${stage}" | cut -f1))"
tar -C "${stage}" -cf - . | docker import \
    --change "ENV PATH=$(dirname "${pybin}"):${prefix}/bin:/usr/local/bin:/usr/bin:/bin" \
    --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    --change "ENV LANG=C.UTF-8" \
    - "${BASE}" >/dev/null

echo "building ${TAG} from the Dockerfile"
docker build --quiet --force-rm --build-arg "BASE_IMAGE=${BASE}" -t "${TAG}" . >/dev/null

new_images=" $(docker images -q "${BASE}") $(docker images -q "${TAG}") "
for image in ${old_images}; do
    if [[ "${new_images}" != *" ${image} "* ]]; then
        docker rmi "${image}" >/dev/null 2>&1 || true  # in use by a container: kept
    fi
done

echo "checking ${TAG}"
docker run --rm "${TAG}" --help >/dev/null
docker run --rm -v /var/run/docker.sock:/var/run/docker.sock --entrypoint python "${TAG}" \
    -c 'import docker, tuner.launch.docker; print("engine", docker.from_env().version()["Version"])'
docker run --rm -v "${studies}:/work/studies" "${TAG}" \
    optimize --hardware 4090x2 --backend sim --trials 2 --json >/dev/null
test -n "$(find "${studies}" -name '*.db')"
echo "${TAG} ok"
