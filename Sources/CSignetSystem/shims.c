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

int signet_spawn_closefrom(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
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
