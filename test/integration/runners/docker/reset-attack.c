#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* One way to read and write another process's memory. */
enum how { MEM, VM, PTRACE };
static int memfd = -1;
static int rd(enum how h, int pid, unsigned long at, char *buf, size_t n) {
  if (h == MEM) return pread(memfd, buf, n, (off_t)at) == (ssize_t)n ? 0 : -1;
  if (h == VM) {
    struct iovec l = {buf, n}, r = {(void *)at, n};
    return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
  }
  for (size_t i = 0; i < n; i += sizeof(long)) {
    errno = 0;
    long w = ptrace(PTRACE_PEEKDATA, pid, (void *)(at + i), 0);
    if (errno != 0) return -1;
    memcpy(buf + i, &w, n - i < sizeof w ? n - i : sizeof w);
  }
  return 0;
}
static int wr(enum how h, int pid, unsigned long at, const char *buf, size_t n) {
  if (h == MEM) return pwrite(memfd, buf, n, (off_t)at) == (ssize_t)n ? 0 : -1;
  if (h == VM) {
    struct iovec l = {(void *)buf, n}, r = {(void *)at, n};
    return process_vm_writev(pid, &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
  }
  unsigned long base = at & ~(sizeof(long) - 1);
  long w;
  errno = 0;
  w = ptrace(PTRACE_PEEKDATA, pid, (void *)base, 0);
  if (errno != 0) return -1;
  memcpy((char *)&w + (at - base), buf, n); /* one byte: never crosses the word */
  return ptrace(PTRACE_POKEDATA, pid, (void *)base, (void *)w) == 0 ? 0 : -1;
}

/* Rewrite every word FROM (followed by NUL, space, newline, quote or ;) in pid's writable memory to TO, of
   the same length, for each FROM=TO argument: e.g. the shell's parsed test of whether a folder is empty. */
static int patch(enum how h, int pid, const char *name, int npairs, char **pairs) {
  char path[64];
  if (h == MEM) {
    snprintf(path, sizeof path, "/proc/%d/mem", pid);
    memfd = open(path, O_RDWR);
    if (memfd < 0) { printf("%s:denied:%s\n", name, strerror(errno)); return 0; }
  }
  if (h == PTRACE) {
    if (ptrace(PTRACE_ATTACH, pid, 0, 0) != 0) { printf("%s:denied:%s\n", name, strerror(errno)); return 0; }
    waitpid(pid, 0, __WALL);
  }
  if (h == VM) {
    char probe;
    struct iovec l = {&probe, 1}, r = {(void *)&probe, 1};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) < 0 && errno != EFAULT) { printf("%s:denied:%s\n", name, strerror(errno)); return 0; }
  }
  snprintf(path, sizeof path, "/proc/%d/maps", pid);
  FILE *maps = fopen(path, "r");
  if (maps == NULL) { printf("%s:denied:maps %s\n", name, strerror(errno)); return 0; }
  char line[512];
  int patched = 0, failed = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long a, b;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
    if (b - a > (64ul << 20)) continue;
    char *buf = malloc(b - a);
    if (buf == NULL) continue;
    if (rd(h, pid, a, buf, b - a) != 0) { failed++; free(buf); continue; }
    for (int k = 0; k < npairs; k++) {
      const char *from = pairs[k], *eq = strchr(from, '=');
      if (eq == NULL) continue;
      size_t len = (size_t)(eq - from);
      if (strlen(eq + 1) != len) continue;
      for (unsigned long i = 0; i + len + 1 <= b - a; i++) {
        if (memcmp(buf + i, from, len) != 0) continue;
        char next = buf[i + len];
        if (next != 0 && next != ' ' && next != '\n' && next != '"' && next != ';') continue;
        if (i > 0 && buf[i - 1] != 0 && buf[i - 1] != ' ' && buf[i - 1] != '\n' && buf[i - 1] != '=') continue;
        for (size_t j = 0; j < len; j++)
          if (buf[i + j] != eq[1 + j] && wr(h, pid, a + i + j, eq + 1 + j, 1) != 0) failed++;
        patched++;
      }
    }
    free(buf);
  }
  fclose(maps);
  if (h == PTRACE) ptrace(PTRACE_DETACH, pid, 0, 0);
  printf("%s:patched:%d:failed:%d\n", name, patched, failed);
  return 0;
}

static void quiet(void) {
  int fd = open("/dev/null", O_RDWR);
  dup2(fd, 0); dup2(fd, 1); dup2(fd, 2);
  if (fd > 2) close(fd);
}

static int abstract(int type, const char *name, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  strncpy(sa->sun_path + 1, name, sizeof sa->sun_path - 2);
  return socket(AF_UNIX, type, 0);
}
static socklen_t salen(const char *name) { return (socklen_t)(sizeof(sa_family_t) + 1 + strlen(name)); }

static int sendfds(int via, int *fds, int n) {
  char byte = 'x';
  struct iovec iov = {&byte, 1};
  char ctl[CMSG_SPACE(sizeof(int) * 4)];
  memset(ctl, 0, sizeof ctl);
  struct msghdr m = {0};
  m.msg_iov = &iov; m.msg_iovlen = 1; m.msg_control = ctl; m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET; c->cmsg_type = SCM_RIGHTS; c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
  return sendmsg(via, &m, 0) == 1 ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  int pid = argc > 2 ? atoi(argv[2]) : 1;
  if (!strcmp(c, "mem")) return patch(MEM, pid, c, argc - 3, argv + 3);
  if (!strcmp(c, "vm")) return patch(VM, pid, c, argc - 3, argv + 3);
  if (!strcmp(c, "ptrace")) return patch(PTRACE, pid, c, argc - 3, argv + 3);
  if (!strcmp(c, "unix-hold") || !strcmp(c, "unix-inflight")) {
    struct sockaddr_un sa;
    int s = abstract(SOCK_STREAM, argv[2], &sa);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, salen(argv[2])) != 0 || listen(s, 4) != 0) { printf("%s:failed:%s\n", c, strerror(errno)); return 1; }
    if (!strcmp(c, "unix-hold")) {
      if (fork() != 0) { printf("%s:bound\n", c); return 0; }
      setsid(); quiet();
      for (;;) pause();
    }
    /* In flight: the listening socket and both ends of a pair queued on the pair itself, then every fd
       closed, so no process holds it; only the kernel's collector can free it. */
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sp) != 0) return 1;
    int fds[3] = {s, sp[0], sp[1]};
    if (sendfds(sp[0], fds, 3) != 0 || sendfds(sp[1], fds, 3) != 0) { printf("%s:failed:%s\n", c, strerror(errno)); return 1; }
    close(s); close(sp[0]); close(sp[1]);
    printf("%s:queued\n", c);
    return 0;
  }
  if (!strcmp(c, "unix-probe")) {
    struct sockaddr_un sa;
    int s = abstract(SOCK_STREAM, argv[2], &sa);
    printf("%s:%s\n", argv[2], connect(s, (struct sockaddr *)&sa, salen(argv[2])) == 0 ? "PRESENT" : "absent");
    return 0;
  }
  if (!strcmp(c, "status")) {
    /* For images without a shell: who this call is, and where. */
    char host[256] = "", line[256];
    gethostname(host, sizeof host - 1);
    printf("host:%s\n", host);
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "Uid:", 4) || !strncmp(line, "CapEff:", 7) || !strncmp(line, "CapPrm:", 7) || !strncmp(line, "NoNewPrivs:", 11))
        fputs(line, stdout);
    printf("tmp:%s\n", access("/tmp/leak-file", F_OK) == 0 ? "PRESENT" : "absent");
    char in[8] = "";
    if (read(0, in, 5) == 5 && !memcmp(in, "leave", 5)) close(open("/tmp/leak-file", O_CREAT | O_WRONLY, 0644));
    return 0;
  }
  if (!strcmp(c, "keyring")) {
    /* A key in the call user's keyring (shared by every container of that uid) would outlive the call. */
    long r = syscall(SYS_add_key, "user", "capsule-leak", "x", 1, -4 /* KEY_SPEC_USER_KEYRING */);
    printf("keyring:%s:%s\n", r < 0 ? "denied" : "added", r < 0 ? strerror(errno) : "");
    return 0;
  }
  if (!strcmp(c, "forkloop")) {
    /* A process whose pid keeps changing: the parent exits as soon as its child exists (slowly enough that
       the dead ones, PID 1's to reap, stay within the call's pids limit). */
    if (fork() != 0) return 0;
    setsid(); quiet();
    for (;;) {
      pid_t p = fork();
      if (p > 0) _exit(0);
      usleep(20000);
    }
  }
  if (!strcmp(c, "zombie")) {
    /* A parent that never reaps: its children stay zombies while it lives, then are PID 1's. */
    if (fork() != 0) return 0;
    setsid(); quiet();
    for (int i = 0; i < 3; i++) if (fork() == 0) _exit(0);
    for (;;) pause();
  }
  if (!strcmp(c, "rename")) {
    /* Re-exec under another name (argv[0] and comm), looking like the keep-alive or a kernel thread. */
    if (argc > 2 && !strcmp(argv[2], "renamed")) {
      prctl(PR_SET_NAME, "kworker/0:0", 0, 0, 0);
      for (;;) pause();
    }
    if (fork() != 0) return 0;
    setsid(); quiet();
    char *args[] = {"capsule-keepalive", "rename", "renamed", 0};
    execv("/proc/self/exe", args);
    return 1;
  }
  if (!strcmp(c, "stopped")) {
    pid_t p = fork();
    if (p == 0) { setsid(); quiet(); for (;;) pause(); }
    kill(p, SIGSTOP);
    return 0;
  }
  if (!strcmp(c, "watch")) {
    /* Attach to every process that appears (the reset's own helpers included) and stop it. */
    pid_t call = getppid();
    if (fork() != 0) return 0;
    setsid(); quiet();
    int self = getpid();
    static char seen[1 << 16];
    /* Only once the call is over: the reset's helpers are what it is after. */
    while (kill(call, 0) == 0) usleep(1000);
    for (;;) {
      DIR *d = opendir("/proc");
      struct dirent *e;
      while (d && (e = readdir(d))) {
        int p = atoi(e->d_name);
        if (p <= 0 || p == self || p >= (int)sizeof seen || seen[p]) continue;
        seen[p] = 1;
        ptrace(PTRACE_SEIZE, p, 0, 0);
        ptrace(PTRACE_INTERRUPT, p, 0, 0);
      }
      if (d) closedir(d);
      usleep(1000);
    }
  }
  return 2;
}
