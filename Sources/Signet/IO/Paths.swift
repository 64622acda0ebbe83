#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims

/// Paths of any length: the kernel refuses a path of PATH_MAX (4096) bytes or more with
/// ENAMETOOLONG, yet a legal tree can sit below a long relative path. Longer paths are opened
/// in pieces, each below the descriptor of the one before (`openat`), which resolves them as
/// the kernel would (links on the way are followed, as `open` follows them).
enum Paths {
    /// Longest piece handed to the kernel at once.
    private static let piece = 3072

    /// `open(2)` for a path of any length: the descriptor, or the failing call and its errno.
    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws -> Int32 {
        if path.utf8.count < piece { return try systemCall("open") { Glibc.open(path, flags, mode) } }
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = components.popLast() else { return try systemCall("open") { Glibc.open(path, flags, mode) } }
        var directory = path.hasPrefix("/") ? try systemCall("open") { Glibc.open("/", signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) } : AT_FDCWD
        defer { if directory != AT_FDCWD { close(directory) } }
        var chunk = ""
        func descend() throws {
            let next = try systemCall("openat") { openat(directory, chunk, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) }
            if directory != AT_FDCWD { close(directory) }
            directory = next
            chunk = ""
        }
        for component in components {
            if !chunk.isEmpty && chunk.utf8.count + component.utf8.count + 1 >= piece { try descend() }
            chunk += (chunk.isEmpty ? "" : "/") + component
        }
        if !chunk.isEmpty { try descend() }
        return try systemCall("openat") { openat(directory, last, flags, mode) }
    }

    /// Opens `relative` (a checked relative path) below `directory`, refusing a symbolic link
    /// anywhere on the path and never leaving `directory`: one `openat2(RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS)` where the kernel has it (`useOpenat2`), else, and for paths longer
    /// than one call can name, one component at a time with O_NOFOLLOW.
    static func open(_ relative: String, beneath directory: Int32, useOpenat2: Bool = true,
                     flags: Int32 = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC) -> Result<Int32, SystemCallFailure> {
        if useOpenat2 {
            let fd = signet_open_beneath(directory, relative, flags)
            if fd >= 0 { return .success(fd) }
            let err = errno
            guard err == ENOSYS || err == ENAMETOOLONG else { return .failure(SystemCallFailure("openat2", code: err)) }
        }
        var fd = directory
        let components = relative.split(separator: "/").map(String.init)
        for (index, component) in components.enumerated() {
            let last = index == components.count - 1
            let next = retryingOnEINTR { openat(fd, component, last ? flags : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            let err = errno
            if fd != directory { close(fd) }
            guard next >= 0 else { return .failure(SystemCallFailure("openat", code: err)) }
            fd = next
        }
        return .success(fd)
    }

    /// Calls `body` with a descriptor of `path`'s parent directory and its last component, for
    /// the `*at` calls (fstatat, mkdirat, renameat2, unlinkat) on a path of any length.
    static func withParent<R>(of path: String, _ body: (_ directory: Int32, _ name: String) throws -> R) throws -> R {
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let parent = AtomicFile.parentDirectory(of: trimmed)
        let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        let fd: Int32
        do { fd = try open(parent, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the directory", path: parent)
        }
        defer { close(fd) }
        return try body(fd, name)
    }

    /// `lstat` for a path of any length.
    static func lstat(_ path: String) throws -> stat {
        var info = stat()
        if path.utf8.count < piece {
            _ = try systemCall("lstat") { Glibc.lstat(path, &info) }
            return info
        }
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let parent = AtomicFile.parentDirectory(of: trimmed)
        let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        let fd = try open(parent, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd) }
        _ = try systemCall("fstatat") { fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) }
        return info
    }

    /// Creates `directory` and its missing parents like `mkdir -p`, new ones with `mode`
    /// (before the umask). Something other than a directory there is refused (`what` names it).
    static func createDirectories(_ directory: String, mode: mode_t, what: String) throws {
        do {
            if try lstatIfPresent(directory) != nil {
                // There already (a link is followed, as mkdir -p follows it): a directory is fine.
                do {
                    close(try open(directory, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC))
                } catch let failure as SystemCallFailure where failure.code == ENOTDIR {
                    throw SignetError(.fileExists, "\(what) '\(directory)' exists and is not a directory; choose another", path: directory)
                }
                return
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot use \(what)", path: directory)
        }
        var prefix = directory.hasPrefix("/") ? "/" : ""
        for component in directory.split(separator: "/") {
            prefix += component
            do {
                _ = try systemCall("mkdir") { mkdir(prefix, mode) }
            } catch let failure as SystemCallFailure where failure.code == EEXIST {
                // Already there.
            } catch {
                throw SignetError.posix(error, "cannot create \(what)", path: prefix)
            }
            prefix += "/"
        }
    }

    /// `lstat`, or nil when nothing is at `path` (ENOENT); any other failure is thrown.
    static func lstatIfPresent(_ path: String) throws -> stat? {
        do { return try lstat(path) } catch let failure as SystemCallFailure where failure.code == ENOENT { return nil }
    }
}

/// Removes files and whole trees through directory descriptors: never through a symbolic link,
/// at any depth, and through folders made read-only (Signet removes only what it made).
enum TreeRemover {
    /// Removes `path` (a file, a link, or a directory and everything in it). True when nothing
    /// is left.
    static func remove(_ path: String) -> Bool {
        (try? Paths.withParent(of: path) { directory, name in removeEntry(Array(name.utf8CString), in: directory) }) ?? false
    }

    /// Removes the entry `name` (NUL-terminated raw bytes: names need not be UTF-8) of `parent`.
    ///
    /// A directory is emptied depth first holding one descriptor at a time (it climbs back with
    /// `..`), so no depth runs out of descriptors. A folder that cannot be emptied (a mount
    /// point, an immutable file) is remembered and not entered again, so the walk always ends.
    static func removeEntry(_ name: [CChar], in parent: Int32) -> Bool {
        if unlinkat(parent, name, 0) == 0 || errno == ENOENT { return true }
        guard errno == EISDIR || errno == EPERM || errno == EACCES else { return false }
        var current = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard current >= 0 else { return errno == ENOENT }
        _ = fchmod(current, 0o700)
        var path: [[CChar]] = []
        var stuck = Set<[UInt64]>()
        func identity(_ fd: Int32) -> [UInt64] {
            var info = stat()
            return fstat(fd, &info) == 0 ? [UInt64(info.st_dev), UInt64(info.st_ino)] : []
        }
        while true {
            var descended = false
            for child in entries(of: current) {
                if unlinkat(current, child, 0) == 0 || errno == ENOENT { continue }
                guard errno == EISDIR || errno == EPERM || errno == EACCES else { continue }
                let next = openat(current, child, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard next >= 0 else { continue }
                if stuck.contains(identity(next)) {
                    close(next)
                    continue
                }
                // A folder made read-only (0555) would keep its entries: make it writable first.
                _ = fchmod(next, 0o700)
                close(current)
                current = next
                path.append(child)
                descended = true
                break
            }
            if descended { continue }
            // `current` holds nothing more that can go: remove it from its parent.
            guard let last = path.popLast() else {
                close(current)
                return unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT
            }
            let here = identity(current)
            let up = openat(current, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            close(current)
            guard up >= 0 else { return false }
            current = up
            if unlinkat(current, last, AT_REMOVEDIR) != 0 && errno != ENOENT { stuck.insert(here) }
        }
    }

    /// The raw names in a directory, NUL-terminated; empty when it cannot be read (what is
    /// left is then reported by the caller's final check).
    static func entries(of directory: Int32) -> [[CChar]] {
        ((try? DirectoryEntries.list(directory)) ?? []).map(\.rawName)
    }
}
