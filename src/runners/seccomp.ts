/**
 * The syscall filter of a confined host process: a classic-BPF seccomp program (what bubblewrap's
 * `--seccomp FD` loads) that refuses the calls no ordinary command needs and that reach around the rest
 * of the confinement. Everything else is allowed: a confined command still builds, installs and commits.
 * The list and the reason for each entry are in docs/runners.md ("The syscall filter"), their one home.
 */

/** x86_64 numbers of the refused calls (asm/unistd_64.h). */
const X86_64: Record<string, number> = {
  name_to_handle_at: 303,
  open_by_handle_at: 304,
  keyctl: 250,
  add_key: 248,
  request_key: 249,
  bpf: 321,
  perf_event_open: 298,
  userfaultfd: 323,
  kexec_load: 246,
  kexec_file_load: 320,
  init_module: 175,
  finit_module: 313,
  delete_module: 176,
  mount: 165,
  umount2: 166,
  pivot_root: 155,
  move_mount: 429,
  open_tree: 428,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
  unshare: 272,
  setns: 308,
  swapon: 167,
  swapoff: 168,
  reboot: 169,
  acct: 163,
  syslog: 103,
  iopl: 172,
  ioperm: 173,
  settimeofday: 164,
  clock_settime: 227,
  clock_adjtime: 305,
  adjtimex: 159,
  quotactl: 179,
  quotactl_fd: 443,
  lookup_dcookie: 212,
  vhangup: 153,
  sethostname: 170,
  setdomainname: 171,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
};
const X86_64_CLONE = 56;
const X86_64_CLONE3 = 435;
const X86_64_IOCTL = 16;

const CLONE_NAMESPACES =
  0x00020000 | // NEWNS
  0x02000000 | // NEWCGROUP
  0x04000000 | // NEWUTS
  0x08000000 | // NEWIPC
  0x10000000 | // NEWUSER
  0x20000000 | // NEWPID
  0x40000000 | // NEWNET
  0x00000080; // NEWTIME
const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;

const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;
const EPERM = 1;
const ENOSYS = 38;

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;
const RET_KILL_PROCESS = 0x80000000;
const RET_ALLOW = 0x7fff0000;
const retErrno = (errno: number): number => 0x00050000 | errno;

// struct seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (the low 32 bits first on little endian).
const NR = 0;
const ARCH = 4;
const argLow = (i: number): number => 16 + 8 * i;

type Insn = [code: number, jt: number, jf: number, k: number];

/**
 * A call whose argument decides: for syscall `nr`, load the low word of argument `arg` and run `verdict`
 * (which ends in a return); any other call skips past it.
 */
const byArgument = (nr: number, arg: number, verdict: readonly Insn[]): Insn[] => [
  [JEQ_K, 0, verdict.length + 1, nr],
  [LD_W_ABS, 0, 0, argLow(arg)],
  ...verdict,
];

/**
 * The filter for this machine's architecture, as bytes for bubblewrap's `--seccomp FD`, or undefined
 * where capsule has no syscall table (the isolation report then says no filter is in force).
 */
export function seccompProgram(arch: string = process.arch): Buffer | undefined {
  if (arch !== 'x64' || process.platform !== 'linux') return undefined;
  const prog: Insn[] = [];
  const deny = retErrno(EPERM);
  // Another ABI (i386 through int 0x80, x32) has other numbers: never allowed.
  prog.push([LD_W_ABS, 0, 0, ARCH], [JEQ_K, 1, 0, AUDIT_ARCH_X86_64], [RET_K, 0, 0, RET_KILL_PROCESS]);
  prog.push([LD_W_ABS, 0, 0, NR], [JGE_K, 0, 1, X32_SYSCALL_BIT], [RET_K, 0, 0, RET_KILL_PROCESS]);
  for (const nr of Object.values(X86_64)) prog.push([JEQ_K, 0, 1, nr], [RET_K, 0, 0, deny]);
  prog.push([JEQ_K, 0, 1, X86_64_CLONE3], [RET_K, 0, 0, retErrno(ENOSYS)]);
  // clone(flags, …): a namespace flag in the low word of the first argument.
  prog.push(
    ...byArgument(X86_64_CLONE, 0, [
      [JSET_K, 0, 1, CLONE_NAMESPACES],
      [RET_K, 0, 0, deny],
      [RET_K, 0, 0, RET_ALLOW],
    ]),
  );
  // ioctl(fd, request, …): the request is an unsigned int, the low word of the second argument.
  prog.push(
    ...byArgument(X86_64_IOCTL, 1, [
      [JEQ_K, 1, 0, TIOCSTI],
      [JEQ_K, 0, 1, TIOCLINUX],
      [RET_K, 0, 0, deny],
    ]),
  );
  prog.push([RET_K, 0, 0, RET_ALLOW]);
  const out = Buffer.alloc(prog.length * 8);
  prog.forEach(([code, jt, jf, k], i) => {
    out.writeUInt16LE(code, i * 8);
    out.writeUInt8(jt, i * 8 + 2);
    out.writeUInt8(jf, i * 8 + 3);
    out.writeUInt32LE(k >>> 0, i * 8 + 4);
  });
  return out;
}

/** The x86_64 number of a refused call by name (tests check the program refuses each). */
export function refusedNumbers(): Readonly<Record<string, number>> {
  return X86_64;
}
