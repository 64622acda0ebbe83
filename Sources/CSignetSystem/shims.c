#define _GNU_SOURCE
#include <stdio.h>
#include <fcntl.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include <linux/fs.h>
#include <linux/fsverity.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <malloc.h>
#include <signal.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include "CSignetSystem.h"

int signet_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

int signet_open_beneath(int dirfd, const char *path, int flags) {
#ifdef SYS_openat2
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (unsigned long long)flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    // Container runtimes' seccomp filters answer EPERM for system calls they do not know.
    if (fd < 0 && errno == EPERM) errno = ENOSYS;
    return (int)fd;
#else
    (void)dirfd; (void)path; (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

int signet_start_writeback(int fd, long long offset, long long length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

int signet_syncfs(int fd) {
    return syncfs(fd);
}

int signet_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

int signet_disable_malloc_fastbins(void) {
    return mallopt(M_MXFAST, 0);
}

int signet_memfd(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}

int signet_spawn_hook(const char *path, char *const argv[], char *const envp[], int out_fd, pid_t *pid_out, int *go_out) {
    int report[2], go[2];
    if (pipe2(report, O_CLOEXEC) != 0) return errno;
    if (pipe2(go, O_CLOEXEC) != 0) {
        int failure = errno;
        close(report[0]);
        close(report[1]);
        return failure;
    }
    pid_t parent = getpid();
    // No signal handler of Signet's may run in the child between fork and execve.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        int failure = 0;
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        for (int signal = 1; signal < NSIG; signal++) sigaction(signal, &fallback, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        // The parent may have died before the line above: then no signal comes.
        if (getppid() != parent) _exit(127);
        setpgid(0, 0);
        // Wait for the parent to have recorded this process (signet_spawn_hook_go): a parent
        // gone before that (its end closed, nothing written) means no hook runs at all.
        char byte;
        ssize_t got;
        do { got = read(go[0], &byte, 1); } while (got < 0 && errno == EINTR);
        if (got != 1) _exit(127);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) {
            failure = errno;
        } else {
            // Every descriptor from 3 up closes at execve (the report pipe's end too).
            if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) != 0) {
                struct rlimit limit;
                rlim_t top = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < 65536 ? limit.rlim_cur : 65536;
                for (int fd = 3; fd < (int)top; fd++) if (fd != report[1]) close(fd);
            }
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            execve(path, argv, envp);
            failure = errno;
        }
        ssize_t written = write(report[1], &failure, sizeof failure);
        (void)written;
        _exit(127);
    }
    int forkError = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(report[1]);
    close(go[0]);
    if (pid < 0) {
        close(report[0]);
        close(go[1]);
        return forkError;
    }
    // Also from here: the group exists before anyone signals it.
    setpgid(pid, pid);
    *pid_out = pid;
    // Both ends the parent keeps, packed: the go pipe's write end, the report pipe's read end.
    go_out[0] = go[1];
    go_out[1] = report[0];
    return 0;
}

int signet_spawn_hook_go(pid_t pid, const int go[2]) {
    // A child already gone (an interruption ended its group) makes the write fail with EPIPE:
    // its SIGPIPE is blocked for this thread, then taken if it came, never delivered.
    sigset_t pipeSignal, old;
    sigemptyset(&pipeSignal);
    sigaddset(&pipeSignal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipeSignal, &old);
    char byte = 1;
    ssize_t written;
    do { written = write(go[0], &byte, 1); } while (written < 0 && errno == EINTR);
    if (written < 0 && errno == EPIPE) {
        struct timespec now = {0, 0};
        sigtimedwait(&pipeSignal, NULL, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(go[0]);
    int failure = 0;
    ssize_t count;
    do { count = read(go[1], &failure, sizeof failure); } while (count < 0 && errno == EINTR);
    close(go[1]);
    if (written != 1 || count == (ssize_t)sizeof failure) {
        int status;
        if (written != 1) kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        return written != 1 ? EPIPE : (failure != 0 ? failure : ECHILD);
    }
    return 0;
}

int signet_clone_file(int destination, int source) {
    return ioctl(destination, FICLONE, source);
}

unsigned int signet_RENAME_NOREPLACE(void) { return RENAME_NOREPLACE; }
unsigned int signet_RENAME_EXCHANGE(void) { return RENAME_EXCHANGE; }

int signet_O_PATH(void) { return O_PATH; }

long long signet_filesystem_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long long)info.f_type;
}

int signet_enable_verity(int fd) {
    struct fsverity_enable_arg arg;
    memset(&arg, 0, sizeof arg);
    arg.version = 1;
    arg.hash_algorithm = FS_VERITY_HASH_ALG_SHA256;
    arg.block_size = 4096;
    return ioctl(fd, FS_IOC_ENABLE_VERITY, &arg) == 0 ? 0 : -errno;
}

int signet_measure_verity(int fd, unsigned char digest[32]) {
    _Alignas(struct fsverity_digest) unsigned char buffer[sizeof(struct fsverity_digest) + 32];
    struct fsverity_digest *measured = (struct fsverity_digest *)buffer;
    memset(buffer, 0, sizeof buffer);
    measured->digest_size = 32;
    if (ioctl(fd, FS_IOC_MEASURE_VERITY, measured) != 0) return -errno;
    if (measured->digest_size != 32) return -EOVERFLOW;
    memcpy(digest, measured->digest, 32);
    return measured->digest_algorithm;
}

int signet_spawn_service(const char *path, char *const argv[], char *const envp[], int out_fd, int err_fd, int events_fd, pid_t *pid_out) {
    // Sources below 10 are moved up first: dup2 onto itself would keep close-on-exec, and one
    // source may be another's target.
    int sources[3] = {out_fd, err_fd, events_fd}, moved[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        if (sources[i] < 10) {
            moved[i] = fcntl(sources[i], F_DUPFD_CLOEXEC, 10);
            if (moved[i] < 0) {
                int failure = errno;
                for (int j = 0; j < i; j++) if (moved[j] >= 0) close(moved[j]);
                return failure;
            }
            sources[i] = moved[i];
        }
    }
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int failure = posix_spawn_file_actions_init(&actions);
    if (failure != 0) {
        for (int i = 0; i < 3; i++) if (moved[i] >= 0) close(moved[i]);
        return failure;
    }
    failure = posix_spawnattr_init(&attributes);
    if (failure == 0) {
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, sources[0], 1);
        posix_spawn_file_actions_adddup2(&actions, sources[1], 2);
        posix_spawn_file_actions_adddup2(&actions, sources[2], 3);
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setsigdefault(&attributes, &all);
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        failure = posix_spawn(pid_out, path, &actions, &attributes, argv, envp);
        posix_spawnattr_destroy(&attributes);
    }
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 3; i++) if (moved[i] >= 0) close(moved[i]);
    return failure;
}

int signet_peer_uid(int socket_fd, uid_t *uid_out) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return errno;
    *uid_out = credentials.uid;
    return 0;
}

int signet_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

int signet_accept_cloexec(int listener) {
    return accept4(listener, NULL, NULL, SOCK_CLOEXEC);
}
