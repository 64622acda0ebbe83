import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A program run in the background (posix_spawn, waitpid: Foundation's Process once left
/// a child unreaped here with two of them running), its output in `log`.
public final class BackgroundProcess {
    public let pid: pid_t
    private var status: Int32?

    public init(_ executable: String, _ arguments: [String], log: String) throws {
        let out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard out >= 0 else { throw SupportError("cannot open \(log)") }
        defer { close(out) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, out, 1)
        posix_spawn_file_actions_adddup2(&actions, out, 2)
        var attributes = posix_spawnattr_t()
        startsAsFromAShell(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let failure = posix_spawn(&child, executable, &actions, &attributes, argv, environ)
        guard failure == 0 else { throw SupportError("cannot start \(executable): errno \(failure)") }
        pid = child
        ExitCleanup.stopAtExit(child)
    }

    public var running: Bool {
        guard status == nil else { return false }
        var value: Int32 = 0
        if waitpid(pid, &value, WNOHANG) == pid { status = value }
        return status == nil
    }

    /// Waits for it to end by itself: its exit status (or 128 + the signal).
    public func wait() -> Int32 {
        if status == nil {
            var value: Int32 = 0
            while waitpid(pid, &value, 0) < 0 && errno == EINTR {}
            status = value
            ExitCleanup.forget(pid)
        }
        let value = status!
        return value & 0x7f == 0 ? (value >> 8) & 0xff : 128 + (value & 0x7f)
    }

    /// SIGTERM, then waits for it.
    public func stop() {
        guard running else { return }
        kill(pid, SIGTERM)
        var value: Int32 = 0
        while waitpid(pid, &value, 0) < 0 && errno == EINTR {}
        status = value
        ExitCleanup.forget(pid)
    }

    deinit { stop() }
}
