#ifndef CSIGNETSYSTEM_H
#define CSIGNETSYSTEM_H

// Linux system calls and GNU-only declarations Swift's Glibc module does not offer. No library.
// One C function per thing Swift cannot call directly. Each says why it exists.

#include <stddef.h>
// <sys/xattr.h> is not part of Swift's Glibc module; importing it here gives Signet
// fgetxattr/fsetxattr/fremovexattr/flistxattr.
#include <sys/xattr.h>
#include <sys/types.h>

/// renameat2 is declared by glibc only under _GNU_SOURCE, which Swift's Glibc module does not set.
/// Returns -1 with errno set like renameat2(2).
int signet_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

/// sync_file_range is declared only under _GNU_SOURCE. Starts writeback of a range
/// (SYNC_FILE_RANGE_WRITE) without waiting for it.
int signet_start_writeback(int fd, long long offset, long long length);

/// syncfs(2) is declared only under _GNU_SOURCE. Writes back everything dirty on the filesystem
/// that holds `fd` and waits for it (journal commit included); -1 with errno on failure,
/// including writeback errors since `fd` was opened (Linux 5.8 and later).
int signet_syncfs(int fd);

/// mallopt(3), M_ARENA_MAX and M_MXFAST are in <malloc.h>, which Swift's Glibc module does not
/// include. Caps glibc's malloc arenas at `count` (the CLI sets one: see SignetCommand.swift);
/// 1 on success, 0 on failure, like mallopt.
int signet_limit_malloc_arenas(int count);

/// mallopt(M_MXFAST, 0): no fast bins, so every freed small chunk can coalesce with its
/// neighbours (the CLI's choice: see SignetCommand.swift). 1 on success, 0 on failure.
int signet_disable_malloc_fastbins(void);

/// memfd_create(2) is declared only under _GNU_SOURCE. An anonymous memory file, close-on-exec;
/// -1 with errno on failure.
int signet_memfd(const char *name);

/// Starts a hook (FORMAT §2, "Hooks"): `path` with `argv` and `envp`, standard input from
/// /dev/null, standard output and error to `out_fd`, no other descriptor, default signal
/// dispositions and an empty mask, in a process group of its own — and bound to the calling
/// thread's life with PR_SET_PDEATHSIG (SIGKILL), so that a Signet killed outright (SIGKILL,
/// which no handler sees) never leaves the hook running on. posix_spawn cannot set the parent
/// death signal, so this forks; the child makes async-signal-safe calls only, and waits for
/// `signet_spawn_hook_go` before execve. Returns 0 with `*pid_out` and `go_out[0..1]` set, or
/// the errno of what failed.
int signet_spawn_hook(const char *path, char *const argv[], char *const envp[], int out_fd, pid_t *pid_out, int *go_out);

/// Lets the hook `signet_spawn_hook` started run (`go`: the two descriptors it gave), once the
/// caller has recorded its pid: until then the child waits before execve, so no Signet killed
/// in between leaves a hook it did not record. Returns 0, or the errno of what failed (the
/// child's execve's included; the child is then reaped).
int signet_spawn_hook_go(pid_t pid, const int go[2]);

/// Starts one of the service's commands (`signet serve`): `path` with `argv` and `envp`,
/// standard input from /dev/null, standard output to `out_fd`, standard error to `err_fd`,
/// descriptor 3 to `events_fd`, no other descriptor (every other one Signet holds is
/// close-on-exec), default signal dispositions and an empty mask, in the caller's process
/// group (a terminal's or systemd's signal reaches it as it reaches the service). Returns 0
/// with `*pid_out` set, or the errno of what failed.
int signet_spawn_service(const char *path, char *const argv[], char *const envp[], int out_fd, int err_fd, int events_fd, pid_t *pid_out);

/// The uid of the process at the other end of a connected UNIX socket (SO_PEERCRED); 0 with
/// `*uid_out` set, or the errno of what failed.
int signet_peer_uid(int socket_fd, uid_t *uid_out);

/// pipe2(O_CLOEXEC) and accept4(SOCK_CLOEXEC), declared only under _GNU_SOURCE: descriptors
/// no command the service starts inherits. -1 with errno on failure.
int signet_pipe_cloexec(int fds[2]);
int signet_accept_cloexec(int listener);

/// ioctl(FICLONE): makes `destination` share `source`'s data extents (a reflink, on btrfs, XFS
/// with reflink, bcachefs...). -1 with errno (EOPNOTSUPP, EXDEV, EINVAL) where it cannot.
int signet_clone_file(int destination, int source);

/// openat2(2) has no glibc wrapper. Opens `path` below `dirfd` in one call, refusing symbolic
/// links anywhere on the path (ELOOP) and any escape from `dirfd` (RESOLVE_BENEATH).
/// -1 with errno ENOSYS where the kernel (or a seccomp filter) does not offer openat2.
int signet_open_beneath(int dirfd, const char *path, int flags);

/// RENAME_NOREPLACE / RENAME_EXCHANGE are _GNU_SOURCE macros.
unsigned int signet_RENAME_NOREPLACE(void);
unsigned int signet_RENAME_EXCHANGE(void);

/// O_PATH is a _GNU_SOURCE macro: a descriptor that only names a directory (search permission
/// is enough), for the *at calls.
int signet_O_PATH(void);

/// <sys/vfs.h> is not part of Swift's Glibc module: statfs's f_type of the filesystem holding
/// `path` (0x4d44 vfat, ...), or -1 with errno set.
long long signet_filesystem_type(const char *path);

/// FS_IOC_ENABLE_VERITY (<linux/fsverity.h>): makes the file `fd` (open read-only,
/// with no writer) an fs-verity file: SHA-256, 4,096-byte Merkle tree blocks, no salt, no
/// built-in signature. 0, or minus the errno (read here, right after the call): EOPNOTSUPP or
/// ENOTTY where the filesystem has no fs-verity, EEXIST where the file already is one, ETXTBSY
/// while a writer has it open.
int signet_enable_verity(int fd);

/// FS_IOC_MEASURE_VERITY: the fs-verity digest of the file `fd` into `digest` (32 bytes for
/// SHA-256); returns the kernel's digest algorithm number (1: SHA-256), or minus the errno
/// (read here, right after the call): ENODATA where the file is not an fs-verity file,
/// EOPNOTSUPP/ENOTTY where the filesystem has no fs-verity, EOVERFLOW where the digest is longer
/// than 32 bytes.
int signet_measure_verity(int fd, unsigned char digest[32]);

#endif
