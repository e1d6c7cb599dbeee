#!/usr/bin/env bash
# Builds the spectune image from the repository's Dockerfile without any registry, then checks it.
#
# Usage: .ci/build-test-images.sh [TAG]        (TAG defaults to spectune:ci)
#
# There is no registry here, so python:3.11-slim cannot be pulled. Instead a base image is made
# with `docker import` from this host's own Python (sys.base_prefix, site-packages left out but
# pip), the shared libraries its binary and extension modules load (found with ldd), /bin/sh,
# the glibc/gcc libraries manylinux wheels may assume and the CA bundle; the Dockerfile is then
# built with --build-arg BASE_IMAGE=that. pip inside the build reaches PyPI over the network
# (checked: containers here can) and verifies TLS with the host's CA bundle (PIP_CERT).
#
# Finally the image is run: `spectune --help`, and a ping of the host's Docker Engine through
# the mounted socket, which is how the image is meant to be used.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${1:-spectune:ci}"
BASE="spectune-ci-base:py3"
PYTHON="${PYTHON:-python3}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

prefix="$("${PYTHON}" -c 'import sys; print(sys.base_prefix)')"
pyver="$("${PYTHON}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
pybin="$(readlink -f "${prefix}/bin/python${pyver}")"
stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT

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

# The Python installation, without the test suite, caches and third-party packages (pip stays).
site="lib/python${pyver}/site-packages"
tar -C / -cf - \
    --exclude="${prefix#/}/lib/python${pyver}/test" \
    --exclude="${prefix#/}/${site}" \
    --exclude='__pycache__' \
    "${prefix#/}" | tar -C "${stage}" -xf -
mkdir -p "${stage}${prefix}/${site}"
cp -a "${prefix}/${site}"/pip "${prefix}/${site}"/pip-*.dist-info "${stage}${prefix}/${site}/"

# The shared libraries Python and its extension modules load, and a shell for RUN.
copy /bin/sh
copy "$(readlink -f /bin/sh)"
libs="$(ldd "${pybin}" "$(readlink -f /bin/sh)" "${prefix}/lib/python${pyver}/lib-dynload/"*.so \
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
ln -s "${prefix}/bin/python${pyver}" "${stage}/usr/bin/python"
ln -s "${prefix}/bin/python${pyver}" "${stage}/usr/bin/python3"

echo "importing base image ${BASE} ($(du -sh "${stage}" | cut -f1))"
tar -C "${stage}" -cf - . | docker import \
    --change "ENV PATH=${prefix}/bin:/usr/local/bin:/usr/bin:/bin" \
    --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    --change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
    --change "ENV LANG=C.UTF-8" \
    - "${BASE}" >/dev/null

echo "building ${TAG} from the Dockerfile"
docker build --quiet --force-rm --build-arg "BASE_IMAGE=${BASE}" -t "${TAG}" . >/dev/null

echo "checking ${TAG}"
docker run --rm "${TAG}" --help >/dev/null
docker run --rm -v /var/run/docker.sock:/var/run/docker.sock --entrypoint python "${TAG}" \
    -c 'import docker, tuner.launch.docker; print("engine", docker.from_env().version()["Version"])'
echo "${TAG} ok"
