#!/usr/bin/env bash
# Make the host confinement of shell capabilities and commands available: Debian's bubblewrap (bwrap).
# Without it capsule still runs host commands, but unconfined, and says so in the isolation report; the
# tests hold the confinement itself, so they need it. Idempotent: does nothing when bwrap is there.
set -euo pipefail

log() { printf 'provision-host: %s\n' "$*" >&2; }

if command -v bwrap >/dev/null 2>&1; then
  log "bubblewrap present: $(bwrap --version)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  log "bubblewrap is missing and this is not root: install Debian's bubblewrap package (apt-get install -y bubblewrap)"
  exit 1
fi
log 'installing bubblewrap (Debian package)'
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends bubblewrap >/dev/null 2>&1 || {
  apt-get update >/dev/null
  apt-get install -y --no-install-recommends bubblewrap >/dev/null
}
command -v bwrap >/dev/null 2>&1 || { log 'installed, but bwrap is still missing'; exit 1; }
log "bubblewrap installed: $(bwrap --version)"
