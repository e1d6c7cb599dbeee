#!/usr/bin/env bash
# Installs and starts the real services the test tiers use: Docker Engine, PostgreSQL, Chromium,
# and installs the container registry (docker-registry) that the docker tier starts per test.
# Idempotent; safe to run on a developer machine as root. Prints the env to export.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v pg_ctlcluster >/dev/null || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v docker-registry >/dev/null || need+=(docker-registry)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The package starts a registry of its own where an init system runs; the tests start theirs.
pkill -x docker-registry 2>/dev/null || true

if ! docker info >/dev/null 2>&1; then
  nohup dockerd >/tmp/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi

cluster=$(pg_lsclusters -h | awk 'NR==1 {print $1" "$2}')
# shellcheck disable=SC2086
pg_ctlcluster $cluster start 2>/dev/null || true
for _ in $(seq 30); do pg_isready -h 127.0.0.1 -q && break; sleep 1; done
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='spectune'\"" | grep -q 1 \
  || su postgres -c "psql -qc \"CREATE ROLE spectune LOGIN PASSWORD 'spectune' CREATEDB\""
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='spectune'\"" | grep -q 1 \
  || su postgres -c "psql -qc \"CREATE DATABASE spectune OWNER spectune\""
