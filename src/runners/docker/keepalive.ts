import type { WatchdogTools } from './call.js';
import type { ContainerSpec } from './engine.js';
import { ROLE_LABEL } from './labels.js';

/**
 * The keep-alive of a warm container (exec-pool.ts): PID 1's scripts (start, reset, wipe), its identity and
 * its own folders, and the container spec that runs it.
 */

/** PID 1's own tmpfs (mode 0700, root's): its fifos, out of every call's reach. */
const KEEPALIVE_DIR = '/.capsule-keepalive';
/** PID 1's identity: a uid no call has, and only what the reset and the switch to the call user need. */
const KEEPALIVE_USER = '0:0';
const KEEPALIVE_CAPS = ['KILL', 'SETUID', 'SETGID'];
/**
 * Where PID 1's own copy of busybox lives (a tmpfs only PID 1's user can enter, the one that allows exec):
 * mode 0111, so PID 1 cannot read the file it runs, and the kernel makes a process that runs an unreadable
 * file non-dumpable. Then not even a process of PID 1's own uid may trace it or open /proc/1/mem.
 */
const KEEPER_DIR = '/.capsule-keeper';
/** Its size: room for busybox, added to the container's memory so the copy costs the calls none of theirs. */
const KEEPER_BYTES = 4 * 1024 * 1024;
/** PID 1's first step: its unreadable copy of busybox, then the keep-alive in it (no PATH lookup). */
const KEEPER_PRELUDE = [
  'bb=$1 s=$2',
  'shift 2',
  `k=${KEEPER_DIR}/sh`,
  '$bb cp "$bb" "$k" && $bb chmod 0111 "$k" || exit 125',
  'exec "$k" -c "$s" capsule-keepalive "$@"',
].join('\n');

/**
 * PID 1 of a warm container (busybox sh exists in every capsule image). It lives while capsule holds its
 * stdin open, and at most its lifetime: EOF (capsule's attach connection is gone, e.g. capsule was killed) or
 * the deadline ends the container with every exec in it. USR1 is an exec's own deadline passing (call.ts).
 *
 * It is the one thing a call could use to reach the next call, so no call can touch it: it runs as root, a
 * uid no call has, with only CAP_KILL, CAP_SETUID and CAP_SETGID (startWarm), and each call runs as the call
 * user (`drop`: setsid, then nsenter -S/-G to the spec's user, both exec in place; the kernel clears the
 * permitted and effective sets on that change and no-new-privileges keeps them empty). A call therefore
 * cannot signal, stop, trace or write PID 1 or its helpers (ptrace, /proc/1/mem, /proc/1/fd all need the same
 * uid or CAP_SYS_PTRACE), sits in a session of its own (so not even SIGCONT reaches PID 1's), and cannot open
 * PID 1's fifos: they live in KEEPALIVE_DIR, a tmpfs only root can enter. Between calls capsule resets it in
 * two steps (see ExecPool.reset):
 * - `reset`: kill every other process of the container (`kill -9 -1` with CAP_KILL spares only PID 1,
 *   atomically with respect to fork), then reap the orphans (each external command it waits for collects the
 *   zombies ahead of it) until PID 1 is alone, and say so. That line is only a hint: a process of the call may
 *   still write to the container's output, so capsule then asks the engine, from outside, which processes the
 *   container has.
 * - `check NONCE [first]`, sent only once the engine shows PID 1 alone: whatever a call left in the places the
 *   call user can write is removed by WIPE_SCRIPT, run as the call user (the owner of everything a call can
 *   leave) while no other process of that user is alive to interfere; then PID 1 itself verifies (`clean`):
 *   those places are empty, no SysV shm segment, semaphore set or message queue is left, no unix socket exists
 *   in the container's network namespace (an abstract name a call bound, even one only the kernel still
 *   holds), and it is alone. Only the line `capsule-clean NONCE` passes. The first check, before a new
 *   container's first call, always runs WIPE_SCRIPT, whose own check of its credentials then vouches for
 *   those of every call (the same `drop`).
 * The places the call user can write are the tmpfs /tmp, /dev/shm (POSIX shm) and /dev/mqueue (POSIX message
 * queues); the rest of the container is read-only or root's, as a test that searches for writable places
 * pins. Nothing of this reads memory or files a call could change: the scripts are PID 1's arguments, the
 * tools come from the read-only image (or capsule's read-only tools volume).
 */
export const KEEPALIVE_SCRIPT = [
  'trap "exit 137" USR1 TERM',
  'end=$1 bb=$2 uid=$3 gid=$4 strict=$5 wipe=$6',
  'shift 6',
  // busybox ash's own clock (no fork); date where a shell lacks it.
  'end=$(( ${EPOCHSECONDS:-$($bb date +%s)} + end ))',
  `f=${KEEPALIVE_DIR}/status i=${KEEPALIVE_DIR}/input`,
  '$bb mkfifo -m 600 "$f" "$i" || exit 125',
  'echo capsule-keepalive-ready',
  'alone() { for d in /proc/[0-9]*; do [ "${d#/proc/}" = 1 ] || return 1; done; }',
  // A folder that is gone or unreadable would look empty: that fails too. (The three are root's, mode 1777:
  // their modes are not a call's to change.)
  'left() { [ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ] || return 0; for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then return 0; fi; done; return 1; }',
  'clean() {',
  '  for d in /tmp /dev/shm /dev/mqueue; do left "$d" && return 1; done',
  '  for t in sysvipc/shm sysvipc/sem sysvipc/msg net/unix; do',
  '    [ -r /proc/$t ] || return 1',
  '    { read -r _; if read -r _; then return 1; fi; } < /proc/$t',
  '  done',
  '}',
  'drop() { $bb setsid $bb nsenter -S "$uid" -G "$gid" -- "$@"; }',
  'while :; do',
  '  left=$(( end - ${EPOCHSECONDS:-$($bb date +%s)} ))',
  '  [ "$left" -gt 0 ] || exit 0',
  '  read -r -t "$left" cmd arg n run || exit 0',
  '  case "$cmd" in',
  '  run)',
  // One call: its input is the next $n bytes of stdin, its deadline is PID 1's own `read -t` on a private fifo
  // (as in call.ts's watchdog); its exit status comes back on the fifo and goes out after its output.
  // Never past the container's own lifetime. (A fifo keeps no data once nothing has it open: after a reset
  // nothing of the previous call's is left in either.)
  '    case "$run" in ""|*[!0-9.]*) run=1 ;; esac',
  '    [ "${run%.*}" -lt "$left" ] 2>/dev/null || run=$left',
  '    exec 4<>"$f" || { echo "capsule-end $arg 125"; continue; }',
  // The input goes through its own fifo, so the call's status never waits for input it did not read.
  '    exec 3<&0',
  '    $bb head -c "$n" <&3 >"$i" 3<&- 4>&- &',
  '    { drop "$@" <"$i" 3<&- 4>&-; echo "$?" >&4; } &',
  '    exec 3<&-',
  '    read -r -t "$run" s <&4 || exit 137',
  '    exec 4>&-',
  '    echo "capsule-end $arg $s" ;;',
  '  reset)',
  '    kill -9 -1 2>/dev/null',
  '    n=0',
  '    until alone || [ "$n" -ge 500 ]; do n=$((n+1)); $bb usleep 2000; done',
  '    echo capsule-reset-done ;;',
  '  check)',
  '    if [ "$n" = first ] || ! clean; then',
  '      $bb nsenter -S "$uid" -G "$gid" -- $bb sh -c "$wipe" capsule-wipe "$uid" "$gid" "$strict" "$bb" || { echo "capsule-dirty $arg"; continue; }',
  '    fi',
  '    if clean && alone; then echo "capsule-clean $arg"; else echo "capsule-dirty $arg"; fi ;;',
  '  esac',
  'done',
].join('\n');
/**
 * The removal, as the call user with no other process of that user alive (arguments: uid, gid, strict, the
 * busybox prefix). It first checks that it has exactly the credentials every call gets (the call user's uid
 * and gid — real, effective, saved, fs —, no supplementary group but that gid, empty inheritable, permitted,
 * effective and ambient capability sets, no_new_privs) and, when strict, that PID 1 is not the call user;
 * otherwise it exits 1 and the container is not used. Then it empties each place a call can write; PID 1
 * verifies the result.
 */
const WIPE_SCRIPT = [
  'bb=$4 n=0',
  'while read -r k a b c d _; do',
  '  case "$k" in',
  '  Uid:) [ "$a $b $c $d" = "$1 $1 $1 $1" ] || exit 1 ;;',
  '  Gid:) [ "$a $b $c $d" = "$2 $2 $2 $2" ] || exit 1 ;;',
  '  Groups:) [ -z "$a" ] || { [ "$a" = "$2" ] && [ -z "$b" ]; } || exit 1 ;;',
  '  CapInh:|CapPrm:|CapEff:|CapAmb:) [ "$a" = 0000000000000000 ] || exit 1 ;;',
  '  NoNewPrivs:) [ "$a" = 1 ] || exit 1 ;;',
  '  *) continue ;;',
  '  esac',
  '  n=$((n+1))',
  'done </proc/self/status',
  '[ "$n" = 8 ] || exit 1',
  'if [ "$3" = 1 ]; then',
  '  while read -r k a _; do [ "$k" = Uid: ] && break; done </proc/1/status',
  '  [ "$k" = Uid: ] && [ -n "$a" ] && [ "$a" != "$1" ] || exit 1',
  'fi',
  'left() { for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do if [ -e "$e" ] || [ -L "$e" ]; then return 0; fi; done; return 1; }',
  'for d in /tmp /dev/shm /dev/mqueue; do',
  '  left "$d" || continue',
  // One rm for the usual leftovers; folders the call made unreadable get their modes back first.
  '  $bb rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  '  left "$d" || continue',
  '  $bb chmod -R u+rwX -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  '  $bb rm -rf -- "$d"/* "$d"/.[!.]* "$d"/..?* 2>/dev/null',
  'done',
  'exit 0',
].join('\n');

/** What the keep-alive may write over a container's life before it is treated as tampered with. */
export const KEEPALIVE_OUTPUT_BYTES = 64 * 1024;

/**
 * The container a warm container is: the call's spec, run by the keep-alive as PID 1 (the call's command is
 * what it runs for each call, as the call user), with PID 1's own tmpfs folders and identity.
 */
export function keepaliveSpec(
  spec: ContainerSpec,
  tools: WatchdogTools,
  options: { lifeMs: number; uid: string; gid: string; asCallUser: boolean; dumpable: boolean },
): ContainerSpec {
  const { lifeMs, uid, gid } = options;
  const separate = !options.asCallUser;
  // Every applet PID 1 runs as root by an absolute path (capsule's images have /bin/busybox; any other
  // image gets capsule's read-only copy): never a PATH lookup that a writable mount could answer.
  const bb = tools.bb === '' ? '/bin/busybox' : tools.bb;
  const owner = separate ? '' : `,uid=${uid},gid=${gid}`;
  return {
    ...spec,
    // Whole seconds: the keep-alive counts its deadline with shell arithmetic.
    entrypoint: [
      ...tools.sh,
      '-c',
      ...(options.dumpable
        ? [KEEPALIVE_SCRIPT, 'capsule-keepalive']
        : [KEEPER_PRELUDE, 'capsule-keeper', bb, KEEPALIVE_SCRIPT]),
      String(Math.ceil(lifeMs / 1000)),
      bb,
      uid,
      gid,
      separate ? '1' : '0',
      WIPE_SCRIPT,
    ],
    // The capability's command: what the keep-alive runs for each call, as the call user.
    cmd: spec.cmd,
    user: separate ? KEEPALIVE_USER : spec.user,
    // Only what PID 1 needs: a capability the manifest adds was never a call's (a non-root process loses
    // it at execve), and PID 1 has no use for it.
    capAdd: separate ? [...KEEPALIVE_CAPS] : spec.capAdd,
    ...(options.dumpable
      ? {}
      : {
          memoryBytes: spec.memoryBytes + KEEPER_BYTES,
          memorySwapBytes: spec.memorySwapBytes + KEEPER_BYTES,
        }),
    tmpfs: {
      ...spec.tmpfs,
      [KEEPALIVE_DIR]: `rw,noexec,nosuid,nodev,size=64k,mode=0700${owner}`,
      [KEEPER_DIR]: `rw,exec,nosuid,nodev,size=${KEEPER_BYTES},mode=0700${owner}`,
    },
    openStdin: true,
    labels: { ...spec.labels, [ROLE_LABEL]: 'warm' },
    // A SysV shm segment goes away with its last user instead of outliving the call that made it.
    sysctls: { ...spec.sysctls, 'kernel.shm_rmid_forced': '1' },
  };
}
