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

    /// `open(2)` for a path of any length. Returns the descriptor, or -1 with errno set.
    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        if path.utf8.count < piece { return retryingOnEINTR { Glibc.open(path, flags, mode) } }
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = components.popLast() else { return Glibc.open(path, flags, mode) }
        var directory = path.hasPrefix("/") ? Glibc.open("/", signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) : AT_FDCWD
        guard directory != -1 else { return -1 }
        var chunk = ""
        func descend() -> Bool {
            let next = openat(directory, chunk, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC)
            let err = errno
            if directory != AT_FDCWD { close(directory) }
            errno = err
            directory = next
            chunk = ""
            return next >= 0
        }
        for component in components {
            if !chunk.isEmpty && chunk.utf8.count + component.utf8.count + 1 >= piece {
                guard descend() else { return -1 }
            }
            chunk += (chunk.isEmpty ? "" : "/") + component
        }
        if !chunk.isEmpty { guard descend() else { return -1 } }
        let fd = retryingOnEINTR { openat(directory, last, flags, mode) }
        let err = errno
        if directory != AT_FDCWD { close(directory) }
        errno = err
        return fd
    }

    /// Calls `body` with a descriptor of `path`'s parent directory and its last component, for
    /// the `*at` calls (fstatat, mkdirat, renameat2, unlinkat) on a path of any length.
    static func withParent<R>(of path: String, _ body: (_ directory: Int32, _ name: String) throws -> R) throws -> R {
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let parent = AtomicFile.parentDirectory(of: trimmed)
        let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        let fd = open(parent, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw SignetError.posix(errno, "cannot open the directory", path: parent) }
        defer { close(fd) }
        return try body(fd, name)
    }

    /// `lstat` for a path of any length; nil with errno set when it fails.
    static func lstat(_ path: String) -> stat? {
        if path.utf8.count < piece {
            var info = stat()
            return Glibc.lstat(path, &info) == 0 ? info : nil
        }
        return try? withParent(of: path) { directory, name -> stat? in
            var info = stat()
            return fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 ? info : nil
        } ?? nil
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

    /// The raw names in a directory (without . and ..), NUL-terminated, read through a
    /// duplicate of its descriptor; empty when it cannot be read.
    static func entries(of directory: Int32) -> [[CChar]] {
        entriesOrError(of: directory) ?? []
    }

    /// The same, or nil with errno set when the directory cannot be read.
    static func entriesOrError(of directory: Int32) -> [[CChar]]? {
        let copy = dup(directory)
        guard copy >= 0 else { return nil }
        guard let handle = fdopendir(copy) else {
            let err = errno
            close(copy)
            errno = err
            return nil
        }
        defer { closedir(handle) }
        // fdopendir shares the offset with `directory`: start from the top whatever was read before.
        rewinddir(handle)
        var names: [[CChar]] = []
        while true {
            errno = 0
            guard let entry = readdir(handle) else { break }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in raw.prefix { $0 != 0 }.map { CChar(bitPattern: $0) } }
            if name != [0x2e] && name != [0x2e, 0x2e] { names.append(name + [0]) }
        }
        return errno == 0 ? names : nil
    }
}
