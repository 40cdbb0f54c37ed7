#!/usr/bin/env bash
# Extra Docker engines for the scale-out tests (docs/scale-out.md), each in a network namespace this script
# creates, so nothing they run can reach beyond it:
#   pool-a, pool-b   two plain engines for the engine pool (only loopback in their namespace)
#   crash-a, crash-b two more plain engines that tests kill or stop mid-call; no other test uses them, so test
#                    files running at the same time never see pool-a or pool-b go away
#   weak             an engine whose posture is weaker whatever capsule asks: its `runc` (first on the daemon's
#                    PATH) is a wrapper that drops no-new-privileges and the seccomp filter from every container;
#                    the posture probe must see it and the isolation judge must stop trusting that engine
#   swarm-m, swarm-w a two-node swarm (manager + worker) joined over a veth pair between their two
#                    namespaces; the 10.213.0.0/30 addresses exist only on that pair
# Every engine has its own data root, exec root, pidfile, log and unix socket under $CAPSULE_ENGINES_ROOT
# (default /var/lib/capsule-engines), `--bridge=none --iptables=false`, its own daemon.json and
# DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 (swarm tasks never try to pull). The sandbox images are copied in from
# the main engine (`docker save | docker load`), where scripts/build-images.mjs built them; the main engine is
# only read from. Tests find the engines in $CAPSULE_ENGINES_ROOT/engines.json, which `up` writes last.
#
#   scripts/extra-engines.sh up     start what is not running (idempotent; quick when all answer)
#   scripts/extra-engines.sh down   stop the engines, remove their namespaces and folders
#   scripts/extra-engines.sh status print engines.json
set -euo pipefail

root="${CAPSULE_ENGINES_ROOT:-/var/lib/capsule-engines}"
images=(capsule/busybox:1 capsule/node:1)
pool=(pool-a pool-b crash-a crash-b weak)
swarm=(swarm-m swarm-w)
manager_addr=10.213.0.1
worker_addr=10.213.0.2
log() { printf 'extra-engines: %s\n' "$*" >&2; }

netns_of() { printf 'capsule-%s' "$1"; }
sock_of() { printf '%s/%s/docker.sock' "$root" "$1"; }
dk() { local name=$1; shift; docker -H "unix://$(sock_of "$name")" "$@"; }
# Waits until pid $1 is gone, checking 60 times, $2 seconds apart.
wait_gone() { for _ in $(seq 1 60); do kill -0 "$1" 2>/dev/null || return 0; sleep "$2"; done; }
answers() { timeout 5 docker -H "unix://$(sock_of "$1")" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

ensure_netns() {
  local ns
  ns="$(netns_of "$1")"
  if ! ip netns list | grep -qw "$ns"; then
    ip netns add "$ns"
  fi
  ip -n "$ns" link set lo up
}

# Whether PID is still the dockerd of the engine in DIR (a pid from a pidfile can be reused by another process).
engine_dockerd() {
  kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "dockerd .*$2/dockerd.pid"
}

start_engine() {
  local name=$1 dir="$root/$1" ns extra=()
  ns="$(netns_of "$name")"
  if answers "$name"; then return 0; fi
  mkdir -p "$dir/data" "$dir/exec"
  # A daemon that does not answer (killed, stopped, or still shutting down) is ended for good, and its
  # pidfile removed: a pidfile naming a live process stops the new dockerd from starting.
  if [ -f "$dir/dockerd.pid" ]; then
    local old
    old="$(cat "$dir/dockerd.pid")"
    if engine_dockerd "$old" "$dir"; then
      kill -CONT "$old" 2>/dev/null || true
      kill -KILL "$old" 2>/dev/null || true
      wait_gone "$old" 0.25
    fi
    rm -f "$dir/dockerd.pid"
  fi
  # The containerd a killed dockerd started can outlive it (while a container's shim runs) and hold the engine's
  # metadata lock, so the new dockerd's own containerd would wait for it until dockerd gives up: end it too.
  local stale
  for stale in $(pgrep -f -- "containerd --config $dir/exec/containerd/containerd.toml" || true); do
    kill -KILL "$stale" 2>/dev/null || true
    wait_gone "$stale" 0.25
  done
  node -e '
    const fs = require("node:fs");
    const [file, runsc] = process.argv.slice(1);
    const config = runsc ? { runtimes: { runsc: { path: runsc, runtimeArgs: ["--network=none"] } } } : {};
    fs.writeFileSync(file, JSON.stringify(config, null, 2) + "\n");
  ' "$dir/daemon.json" "$(command -v runsc || true)"
  local path_env="$PATH"
  case "$name" in
    weak)
      weak_runc "$dir/bin"
      path_env="$dir/bin:$PATH"
      ;;
    swarm-*) extra+=(--no-new-privileges) ;;
  esac
  log "starting $name in netns $ns (log: $dir/dockerd.log)"
  PATH="$path_env" DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 nohup nsenter --net="/run/netns/$ns" dockerd \
    --config-file "$dir/daemon.json" \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    -H "unix://$dir/docker.sock" --bridge=none --iptables=false --ip-masq=false \
    "${extra[@]}" >"$dir/dockerd.log" 2>&1 9>&- &
}

# The weak engine's runc: edits each bundle's config.json before the real runc creates the container.
weak_runc() {
  local bin=$1 real
  real="$(command -v runc)"
  mkdir -p "$bin"
  cat >"$bin/runc" <<SH
#!/bin/sh
prev=
for a in "\$@"; do
  case "\$prev" in --bundle|-b) bundle=\$a ;; esac
  prev=\$a
done
if [ -n "\${bundle:-}" ] && [ -f "\$bundle/config.json" ]; then
  node -e 'const fs = require("node:fs"); const f = process.argv[1]; const c = JSON.parse(fs.readFileSync(f, "utf8")); c.process.noNewPrivileges = false; delete c.linux.seccomp; fs.writeFileSync(f, JSON.stringify(c));' "\$bundle/config.json"
fi
exec $real "\$@"
SH
  chmod 755 "$bin/runc"
}

wait_engine() {
  local name=$1
  for _ in $(seq 1 120); do
    if answers "$name"; then return 0; fi
    sleep 0.5
  done
  log "$name did not answer within 60 s; see $root/$name/dockerd.log"
  tail -n 20 "$root/$name/dockerd.log" >&2 || true
  return 1
}

# Copy the sandbox images from the main engine when the extra engine lacks them or has other builds.
load_images() {
  local name=$1 want=() tag main_id their_id
  for tag in "${images[@]}"; do
    main_id="$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
    if [ -z "$main_id" ]; then
      log "the main engine has no $tag: run node scripts/build-images.mjs first"
      return 1
    fi
    their_id="$(dk "$name" image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
    [ "$main_id" = "$their_id" ] || want+=("$tag")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  log "$name: loading ${want[*]} (docker save | docker load)"
  docker save "${want[@]}" | dk "$name" load -q >/dev/null
}

ensure_veth() {
  local m w
  m="$(netns_of swarm-m)"
  w="$(netns_of swarm-w)"
  if ! ip -n "$m" link show capsule-sw0 >/dev/null 2>&1; then
    ip -n "$m" link add capsule-sw0 type veth peer name capsule-sw1 netns "$w"
  fi
  ip -n "$m" addr replace "$manager_addr/30" dev capsule-sw0
  ip -n "$w" addr replace "$worker_addr/30" dev capsule-sw1
  ip -n "$m" link set capsule-sw0 up
  ip -n "$w" link set capsule-sw1 up
}

ensure_swarm() {
  local state token
  state="$(dk swarm-m info --format '{{.Swarm.LocalNodeState}}')"
  if [ "$state" != active ]; then
    log "swarm-m: swarm init --advertise-addr $manager_addr"
    dk swarm-m swarm init --advertise-addr "$manager_addr" --listen-addr "$manager_addr:2377" >/dev/null
  fi
  state="$(dk swarm-w info --format '{{.Swarm.LocalNodeState}}')"
  if [ "$state" != active ]; then
    # A worker that left or lost its manager (the namespaces were recreated) joins afresh.
    [ "$state" = inactive ] || dk swarm-w swarm leave --force >/dev/null 2>&1 || true
    token="$(dk swarm-m swarm join-token -q worker)"
    log "swarm-w: swarm join $manager_addr:2377"
    dk swarm-w swarm join --token "$token" --advertise-addr "$worker_addr" --listen-addr "$worker_addr:2377" \
      "$manager_addr:2377" >/dev/null
  fi
}

write_index() {
  local tmp="$root/engines.json.tmp"
  node -e '
    const fs = require("node:fs");
    const [root, out, ...names] = process.argv.slice(1);
    const engines = {};
    for (const name of names) {
      const dir = `${root}/${name}`;
      engines[name] = {
        host: `unix://${dir}/docker.sock`,
        netns: `capsule-${name}`,
        pidfile: `${dir}/dockerd.pid`,
        role: name.startsWith("swarm-") ? (name === "swarm-m" ? "swarm-manager" : "swarm-worker") : "engine",
      };
    }
    fs.writeFileSync(out, JSON.stringify({ root, engines }, null, 2) + "\n");
  ' "$root" "$tmp" "${pool[@]}" "${swarm[@]}"
  mv "$tmp" "$root/engines.json"
}

up() {
  if [ "$(id -u)" != 0 ]; then
    log "needs root (network namespaces and dockerd)"
    exit 1
  fi
  mkdir -p "$root"
  local name
  for name in "${pool[@]}" "${swarm[@]}"; do ensure_netns "$name"; done
  ensure_veth
  for name in "${pool[@]}" "${swarm[@]}"; do start_engine "$name"; done
  for name in "${pool[@]}" "${swarm[@]}"; do wait_engine "$name"; done
  local loads=() job
  for name in "${pool[@]}" "${swarm[@]}"; do
    load_images "$name" &
    loads+=($!)
  done
  for job in "${loads[@]}"; do wait "$job"; done
  ensure_swarm
  write_index
  log "ready: $root/engines.json"
}

down() {
  local name dir pid
  rm -f "$root/engines.json"
  for name in "${pool[@]}" "${swarm[@]}"; do
    dir="$root/$name"
    [ -f "$dir/dockerd.pid" ] || continue
    pid="$(cat "$dir/dockerd.pid")"
    if engine_dockerd "$pid" "$dir"; then
      kill "$pid"
      wait_gone "$pid" 0.5
    fi
  done
  for name in "${pool[@]}" "${swarm[@]}"; do
    if ip netns list | grep -qw "$(netns_of "$name")"; then ip netns delete "$(netns_of "$name")"; fi
  done
  # dockerd leaves its data root (and whatever it mounted below it) mounted: unmount deepest first.
  local mnt
  awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
  done
  # The data roots hold only copies of the sandbox images and what the tests left.
  for name in "${pool[@]}" "${swarm[@]}"; do
    dir="$root/$name"
    [ -d "$dir" ] || continue
    rm -rf "$dir"
  done
  log "down"
}

# One `up` or `down` at a time: test files run in parallel, and two racing `up`s would each start a dockerd
# for the same engine.
mkdir -p "$root"
exec 9>"$root/.lock"
case "${1:-}" in
  up) flock 9 && up ;;
  down) flock 9 && down ;;
  status) cat "$root/engines.json" ;;
  *)
    echo "usage: scripts/extra-engines.sh up|down|status" >&2
    exit 2
    ;;
esac
