#!/usr/bin/env bash
# Make a Docker engine answer on this machine, offline: install Debian's docker.io (and
# busybox-static, which the sandbox images are built from) when missing, start dockerd without a
# bridge (sandbox containers never get a network; tests never send traffic beyond loopback),
# and wait until it answers. Idempotent and fast when the engine already runs.
#
#   scripts/provision-docker.sh            engine only
#   scripts/provision-docker.sh --images   then build the sandbox images from runtimes/docker
#   CAPSULE_GVISOR=1 scripts/provision-docker.sh   also install gVisor (Debian `runsc`)
# gVisor, when installed, is registered as the `runsc` runtime (docker.runtime: "runsc" in a manifest).
set -euo pipefail

log() { printf 'provision-docker: %s\n' "$*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
want_images=no
[ "${1:-}" = "--images" ] && want_images=yes
daemon_json=/etc/docker/daemon.json
dockerd_log=/var/log/capsule-dockerd.log

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

# A dynamically linked busybox (Debian's `busybox`) cannot go into a FROM-scratch image.
static_busybox() {
  local b
  for b in /bin/busybox /usr/bin/busybox; do
    [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1 && return 0
  done
  return 1
}

engine_has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

# Register gVisor in daemon.json (merged, other keys kept). --network=none: gVisor's own netstack stays
# off; capsule containers never have a network anyway. Returns 0 when the file changed.
register_runsc() {
  command -v runsc >/dev/null 2>&1 || return 1
  mkdir -p "$(dirname "$daemon_json")"
  node - "$daemon_json" "$(command -v runsc)" <<'NODE'
const fs = require('node:fs');
const [file, runsc] = process.argv.slice(2);
let config = {};
try { config = JSON.parse(fs.readFileSync(file, 'utf8')); } catch { /* missing or empty */ }
if (config.runtimes?.runsc) process.exit(1);
config.runtimes = { ...(config.runtimes ?? {}), runsc: { path: runsc, runtimeArgs: ['--network=none'] } };
fs.writeFileSync(file, JSON.stringify(config, null, 2) + '\n');
NODE
}

finish() {
  if [ "$want_images" = yes ]; then
    node "$here/build-images.mjs"
  fi
  exit 0
}

if [ -n "${DOCKER_HOST:-}" ]; then
  if engine_answers; then
    log "remote engine at DOCKER_HOST=$DOCKER_HOST answers"
    finish
  fi
  log "DOCKER_HOST=$DOCKER_HOST is set but the engine does not answer; not starting a local one"
  exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
static_busybox || need+=(busybox-static)
if [ "${CAPSULE_GVISOR:-}" = 1 ] && ! command -v runsc >/dev/null 2>&1; then need+=(runsc); fi
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
  # A running engine is left alone, except to register gVisor when it is installed but unknown to it
  # (dockerd re-reads the runtimes on SIGHUP; running containers are not affected).
  if command -v runsc >/dev/null 2>&1 && ! engine_has_runsc && [ "$(id -u)" = 0 ]; then
    if register_runsc; then log "registered gVisor (runsc) in $daemon_json"; fi
    pid="$(pidof dockerd || true)"
    if [ -n "$pid" ]; then
      kill -HUP $pid
      sleep 1
      engine_has_runsc && log "engine now offers the runsc runtime" || log "engine did not pick up runsc (see $dockerd_log)"
    fi
  fi
  log "engine answers"
  finish
fi

if command -v runsc >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  register_runsc && log "registered gVisor (runsc) in $daemon_json" || true
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  log "starting dockerd --bridge=none --iptables=false (log: $dockerd_log)"
  mkdir -p "$(dirname "$dockerd_log")"
  nohup dockerd --bridge=none --iptables=false >"$dockerd_log" 2>&1 &
fi

for _ in $(seq 1 120); do
  if engine_answers; then
    log "engine answers"
    finish
  fi
  sleep 1
done
log "dockerd did not answer within 120 s; see $dockerd_log"
tail -n 20 "$dockerd_log" >&2 || true
exit 1
