#!/usr/bin/env bash
# What `npm run bench` needs beyond Node, offline but for Debian's packages: the peers it measures capsule
# against. @anthropic-ai/sandbox-runtime (a devDependency) confines with bubblewrap and bridges its network
# proxy with socat, and searches with ripgrep; the bubblewrap capsule uses itself comes from
# provision-host.sh. Idempotent: does nothing when every tool is there. Not root and a tool is missing: says
# which package to install and exits 1 (the bench then skips the rows of that peer).
set -euo pipefail

log() { printf 'provision-bench: %s\n' "$*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"

bash "$here/provision-host.sh"

missing=()
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
if [ "${#missing[@]}" -eq 0 ]; then
  log "socat and ripgrep present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  log "missing ${missing[*]} and this is not root: apt-get install -y ${missing[*]}"
  exit 1
fi
log "installing ${missing[*]} (Debian packages)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update >/dev/null
  apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
}
command -v socat >/dev/null 2>&1 && command -v rg >/dev/null 2>&1 || { log 'installed, but a tool is still missing'; exit 1; }
log "installed ${missing[*]}"
