#!/usr/bin/env bash
# Make a Docker engine answer on this machine, offline: install Debian's docker.io (and
# busybox-static, which the sandbox images are built from) when missing, start dockerd without a
# bridge (sandbox containers never get a network; tests never send traffic beyond loopback),
# and wait until it answers. Idempotent: a running engine is left alone.
set -euo pipefail

log() { printf 'provision-docker: %s\n' "$*" >&2; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# A dynamically linked busybox (Debian's `busybox`) cannot go into a FROM-scratch image.
static_busybox() {
  local b
  for b in /bin/busybox /usr/bin/busybox; do
    [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1 && return 0
  done
  return 1
}

# After the engine answers: build the sandbox images from runtimes/docker when asked (--images),
# through capsule's own builder (scripts/build-images.mjs; it skips images that already exist).
finish() {
  if [ "${1:-}" = "--images" ]; then
    node "$(dirname "$0")/build-images.mjs"
  fi
  exit 0
}

if engine_answers && static_busybox; then
  log "engine already answers"
  finish "$@"
fi

if [ -n "${DOCKER_HOST:-}" ]; then
  log "DOCKER_HOST=$DOCKER_HOST is set but the engine does not answer; not starting a local one"
  exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
static_busybox || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "need root to install ${need[*]} (run: sudo apt-get install -y ${need[*]})"
    exit 1
  fi
  log "installing ${need[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if engine_answers; then
  finish "$@"
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  log "starting dockerd --bridge=none --iptables=false"
  mkdir -p /var/log
  nohup dockerd --bridge=none --iptables=false >/var/log/capsule-dockerd.log 2>&1 &
fi

for _ in $(seq 1 120); do
  if engine_answers; then
    log "engine answers"
    finish "$@"
  fi
  sleep 1
done
log "dockerd did not answer within 120 s; see /var/log/capsule-dockerd.log"
tail -n 20 /var/log/capsule-dockerd.log >&2 || true
exit 1
exit 1
