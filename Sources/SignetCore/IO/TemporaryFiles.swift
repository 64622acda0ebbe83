import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage

/// A one-shot wait with a time-out over a mutex and condition (no libdispatch: the signal
/// thread may run when libdispatch's own threads are busy).
package final class DispatchSemaphoreLike: @unchecked Sendable {
    // Allocated, not stored inline: a pthread object must not move, and `&property` may pass
    // a temporary copy.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var signalled = false

    package init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func signal() {
        pthread_mutex_lock(mutex)
        signalled = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    package func wait(timeout: Double) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let total = Int(now.tv_nsec) + Int(timeout * 1e9)
        var deadline = timespec(tv_sec: now.tv_sec + total / 1_000_000_000, tv_nsec: total % 1_000_000_000)
        pthread_mutex_lock(mutex)
        while !signalled {
            if pthread_cond_timedwait(condition, mutex, &deadline) == ETIMEDOUT { break }
        }
        pthread_mutex_unlock(mutex)
    }
}

/// The registry and naming of Signet's temporary files.
package enum TemporaryFiles {
    private struct State {
        var next = 0
        var entries: [Int: (path: String, tree: Bool)] = [:]
        /// Registrations an interruption leaves in place (a ranged update's staging, which the
        /// next run continues in): still removed by their owner on any other failure.
        var kept: Set<Int> = []
    }

    private static let state = Mutex(State())

    /// Set once an interruption has started removing temporaries. Every step that creates or
    /// renames an entry in a temporary area runs under this lock and not at all once it is set,
    /// so the removal never races a thread that keeps building (or installs what is being removed).
    private static let interrupted = Mutex(false)

    /// A system call made under ``guarded(_:)``: its result and the errno it left.
    /// Throws only for the interruption; the call's own failure (its errno read right after
    /// it, EINTR retried) is in the result.
    package static func guardedCall(_ name: String, _ call: () -> Int32) throws -> Result<Int32, SystemCallFailure> {
        try guarded {
            do { return .success(try systemCall(name, call)) } catch let failure as SystemCallFailure { return .failure(failure) }
        }
    }

    /// Opens (creates) `path` under ``guarded(_:)``: the interruption is thrown as a
    /// `SignetError`, the open's own failure as a `SystemCallFailure`.
    package static func guardedOpen(_ path: String, _ flags: Int32, _ mode: mode_t) throws -> OwnedDescriptor {
        try guarded { () throws -> OwnedDescriptor in try Paths.open(path, flags, mode) }
    }

    /// True once an interruption has begun (long transfers stop at the next chance).
    package static var isInterrupted: Bool { interrupted.withLock { $0 } || isDraining }

    // MARK: Draining (an interruption that keeps what a ranged update fetched)

    /// Set when an interruption asks the work in progress to keep what it has (a ranged
    /// update writes what arrived into its staging, which stays for the next run) before the
    /// temporaries are removed.
    private static let draining = Mutex(false)
    /// Signalled by the work once it has kept what it has and will write nothing more.
    private static let parked = DispatchSemaphoreLike()

    package static var isDraining: Bool { draining.withLock { $0 } }

    /// For the signal-handling thread: asks the work in progress to keep what it has, and waits
    /// at most `timeout` seconds for it to say it has (only when a kept staging exists: other
    /// work has nothing to keep).
    package static func drain(timeout: Double) {
        let waits = state.withLock { !$0.kept.isEmpty }
        draining.withLock { $0 = true }
        if waits { parked.wait(timeout: timeout) }
    }

    /// For the work: it has kept what it has (after an interruption asked it to) and writes
    /// nothing more; the interruption may go on.
    package static func markParked() { parked.signal() }

    /// Runs `body` (one creation or rename of a temporary entry) unless the process is being
    /// interrupted; then throws instead, creating nothing.
    package static func guarded<R: ~Copyable>(_ body: () throws -> R) throws -> R {
        try interrupted.withLock { stopped in
            guard !stopped else { throw SignetError(.interrupted, "interrupted; nothing more is written") }
            return try body()
        }
    }

    /// Registers `path` (a file, or a directory tree) for removal on interruption. Register a
    /// path before creating it, so that there is no moment when it exists unregistered.
    package static func register(_ path: String, tree: Bool = false) -> Int {
        state.withLock { state in
            state.next += 1
            state.entries[state.next] = (path, tree)
            return state.next
        }
    }

    /// Forgets a registration (the path was renamed into place or removed).
    package static func unregister(_ token: Int) {
        state.withLock { state in
            _ = state.entries.removeValue(forKey: token)
            state.kept.remove(token)
        }
    }

    /// Leaves the registered tree in place on an interruption (SIGINT, SIGTERM), as a SIGKILL
    /// would: what it holds is verified again by the next run that takes it over.
    package static func keepOnInterruption(_ token: Int) {
        state.withLock { _ = $0.kept.insert(token) }
    }

    package static func removeAllForExit() {
        // Waits for a creation or rename in progress, and stops all later ones.
        interrupted.withLock { $0 = true }
        state.withLock { state in
            // Every archive is written through Signet's own libzip source, so libzip makes no
            // temporary file of its own: the registry names everything there is.
            for (token, entry) in state.entries where !state.kept.contains(token) {
                if entry.tree { _ = TreeRemover.remove(entry.path) } else { unlink(entry.path) }
            }
            state.entries.removeAll()
        }
    }

    /// The name prefix of Signet's temporary files beside `target` (the hidden `.BASE.signet-`).
    /// Long names are shortened so that the temporary name stays within NAME_MAX.
    package static func prefix(besides target: String) -> (directory: String, prefix: String) {
        var trimmed = target
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let base = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        var short = ""
        for scalar in base.unicodeScalars {
            guard short.utf8.count + String(scalar).utf8.count <= 96 else { break }
            short.unicodeScalars.append(scalar)
        }
        return (AtomicFile.parentDirectory(of: trimmed), "." + short + ".signet-")
    }

    /// A new temporary name beside `target`, for this process: `.BASE.signet-PID-TAG-RANDOM`.
    package static func name(besides target: String, tag: String) -> String {
        let (directory, prefix) = prefix(besides: target)
        let random = UInt64.random(in: 0...UInt64.max)
        return directory + "/" + prefix + "\(getpid())-\(tag)-" + String(random, radix: 36)
    }

    /// Staging trees processes that no longer run left beside `target` (`tags`: their kind),
    /// the most recently changed first: directories of this user's, writable by no one else,
    /// so that what is in them was made by Signet.
    package static func staleTrees(besides target: String, tags: [String]) -> [(directory: String, name: String)] {
        let (directory, prefix) = prefix(besides: target)
        guard let opened = try? Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) else { return [] }
        let fd = opened.descriptor
        var found: [(name: String, changed: Int)] = []
        try? DirectoryEntries.forEach(in: fd) { entry in
            let name = entry.name
            guard name.hasPrefix(prefix) else { return }
            let rest = name.dropFirst(prefix.count)
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            guard let pid = pid_t(digits), pid > 0, pid != getpid(),
                tags.contains(where: { rest.dropFirst(digits.count).hasPrefix("-\($0)-") }),
                kill(pid, 0) != 0 && errno == ESRCH
            else { return }
            var info = stat()
            guard fstatat(fd.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFDIR,
                info.st_uid == geteuid(), info.st_mode & 0o022 == 0
            else { return }
            found.append((name, info.st_mtim.tv_sec))
        }
        return found.sorted { $0.changed > $1.changed }.map { (directory, $0.name) }
    }

    /// Removes what processes that no longer run left beside `target` (a `kill -9`, a power
    /// cut): Signet's temporary names carry their maker's process id. Returns what it could
    /// not remove. Best effort; call it where no other live Signet process can be using them
    /// for its own work, or rely on the process check.
    @discardableResult
    package static func removeStale(besides target: String) -> [String] {
        let (directory, prefix) = prefix(besides: target)
        guard let opened = try? Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) else { return [] }
        let fd = opened.descriptor
        var stale: [String] = []
        try? DirectoryEntries.forEach(in: fd) { entry in
            let name = entry.name
            guard name.hasPrefix(prefix) else { return }
            let digits = name.dropFirst(prefix.count).prefix { $0.isASCII && $0.isNumber }
            guard let pid = pid_t(digits), pid > 0, pid != getpid() else { return }
            if kill(pid, 0) != 0 && errno == ESRCH { stale.append(directory + "/" + name) }
        }
        return stale.filter { !TreeRemover.remove($0) }
    }
}
