#!/usr/bin/env bash
# Make headless Chromium available for the tests that render capsule's HTML reports in a real browser
# (test/integration/compare/chart-browser.test.ts): install Debian's `chromium` when missing.
# Idempotent: does nothing when /usr/bin/chromium (or $CAPSULE_CHROMIUM) is there.
set -euo pipefail

log() { printf 'provision-browser: %s\n' "$*" >&2; }
browser="${CAPSULE_CHROMIUM:-/usr/bin/chromium}"

if [ -x "$browser" ]; then
  log "chromium present: $browser"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  log "chromium is missing and this is not root: install Debian's chromium package (apt-get install -y chromium)"
  exit 1
fi
log 'installing chromium (Debian package)'
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || {
  apt-get update >/dev/null
  apt-get install -y --no-install-recommends chromium >/dev/null
}
[ -x "$browser" ] || { log "installed, but $browser is still missing"; exit 1; }
log "chromium installed: $browser"
