import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import CSignetSystem // package: mode_t in package signatures resolves through it
package import SystemPackage

/// Paths of any length: the kernel refuses a path of PATH_MAX (4096) bytes or more with
/// ENAMETOOLONG, yet a legal tree can sit below a long relative path. Longer paths are opened
/// in pieces, each below the descriptor of the one before (`openat`), which resolves them as
/// the kernel would (links on the way are followed, as `open` follows them).
package enum Paths {
    /// The path of a `file:` URL; any other URL is a usage error (a local path was wanted).
    package static func fileSystemPath(of url: URL) throws -> String {
        guard url.isFileURL else {
            throw SignetError(.usage, "'\(url.absoluteString)' is not a file URL; a local file was expected here (use the download forms for https:// URLs)")
        }
        return url.path
    }

    /// Longest piece handed to the kernel at once.
    private static let piece = 3072

    /// `open(2)` for a path of any length: the descriptor, or the failing call and its errno.
    package static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) throws(SystemCallFailure) -> OwnedDescriptor {
        if path.utf8.count < piece { return OwnedDescriptor(adopting: try systemCall("open") { Glibc.open(path, flags, mode) }) }
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = components.popLast() else { return OwnedDescriptor(adopting: try systemCall("open") { Glibc.open(path, flags, mode) }) }
        // The directory reached so far (nil: the working directory).
        var directory: OwnedDescriptor? =
            path.hasPrefix("/")
            ? OwnedDescriptor(adopting: try systemCall("open") { Glibc.open("/", signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) }) : nil
        var chunk = ""
        func at(_ directory: borrowing OwnedDescriptor?) -> Int32 {
            switch directory {
            case .some(let owned): return owned.descriptor.rawValue
            case .none: return AT_FDCWD
            }
        }
        for component in components {
            if !chunk.isEmpty && chunk.utf8.count + component.utf8.count + 1 >= piece {
                let base = at(directory)
                directory = OwnedDescriptor(adopting: try systemCall("openat") { openat(base, chunk, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) })
                chunk = ""
            }
            chunk += (chunk.isEmpty ? "" : "/") + component
        }
        if !chunk.isEmpty {
            let base = at(directory)
            directory = OwnedDescriptor(adopting: try systemCall("openat") { openat(base, chunk, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) })
        }
        let base = at(directory)
        return OwnedDescriptor(adopting: try systemCall("openat") { openat(base, last, flags, mode) })
    }

    /// Opens `relative` (a checked relative path) below `directory`, refusing a symbolic link
    /// anywhere on the path and never leaving `directory`: one `openat2(RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS)` where the kernel has it (`useOpenat2`), else, and for paths longer
    /// than one call can name, one component at a time with O_NOFOLLOW.
    package static func open(
        _ relative: String, beneath directory: FileDescriptor, useOpenat2: Bool = true,
        flags: Int32 = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC
    ) throws(SystemCallFailure) -> OwnedDescriptor {
        if useOpenat2 {
            let fd = signet_open_beneath(directory.rawValue, relative, flags)
            if fd >= 0 { return OwnedDescriptor(adopting: fd) }
            let err = errno
            guard err == ENOSYS || err == ENAMETOOLONG else { throw SystemCallFailure("openat2", code: err) }
        }
        // The folder reached so far (nil: `directory` itself, which is not ours to close).
        var reached: OwnedDescriptor? = nil
        let components = relative.split(separator: "/").map(String.init)
        for (index, component) in components.enumerated() {
            let last = index == components.count - 1
            let base: Int32
            switch reached {
            case .some(let owned): base = owned.descriptor.rawValue
            case .none: base = directory.rawValue
            }
            let next = retryingOnEINTR { openat(base, component, last ? flags : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            guard next >= 0 else { throw SystemCallFailure("openat", code: errno) }
            reached = OwnedDescriptor(adopting: next)
        }
        guard let opened = reached.take() else { throw SystemCallFailure("openat", code: EINVAL) }
        return opened
    }

    /// Calls `body` with a descriptor of `path`'s parent directory and its last component, for
    /// the `*at` calls (fstatat, mkdirat, renameat2, unlinkat) on a path of any length.
    package static func withParent<R>(of path: String, _ body: (_ directory: FileDescriptor, _ name: String) throws -> R) throws -> R {
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let parent = AtomicFile.parentDirectory(of: trimmed)
        let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        let directory: OwnedDescriptor
        do { directory = try open(parent, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the directory", path: parent)
        }
        return try body(directory.descriptor, name)
    }

    /// `lstat` for a path of any length.
    package static func lstat(_ path: String) throws -> stat {
        var info = stat()
        if path.utf8.count < piece {
            _ = try systemCall("lstat") { Glibc.lstat(path, &info) }
            return info
        }
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        let parent = AtomicFile.parentDirectory(of: trimmed)
        let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
        let directory = try open(parent, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC)
        let fd = directory.descriptor.rawValue
        _ = try systemCall("fstatat") { fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) }
        return info
    }

    /// Creates `directory` and its missing parents like `mkdir -p`, new ones with `mode`
    /// (before the umask). Something other than a directory there is refused (`what` names it).
    package static func createDirectories(_ directory: String, mode: mode_t, what: String) throws {
        let existing: stat?
        do { existing = try lstatIfPresent(directory) } catch {
            throw SignetError.posix(error, "cannot use \(what)", path: directory)
        }
        if existing != nil {
            // There already (a link is followed, as mkdir -p follows it): a directory is fine.
            let opened: OwnedDescriptor
            do { opened = try open(directory, signet_O_PATH() | O_DIRECTORY | O_CLOEXEC) } catch {
                if error.code == ENOTDIR {
                    throw SignetError(.fileExists, "\(what) '\(directory)' exists and is not a directory; choose another", path: directory)
                }
                throw SignetError.posix(error, "cannot use \(what)", path: directory)
            }
            _ = consume opened
            return
        }
        var prefix = directory.hasPrefix("/") ? "/" : ""
        for component in directory.split(separator: "/") {
            prefix += component
            let folder = prefix
            do {
                _ = try systemCall("mkdir") { mkdir(folder, mode) }
            } catch  where error.code == EEXIST {
                // Already there.
            } catch {
                throw SignetError.posix(error, "cannot create \(what)", path: folder)
            }
            prefix += "/"
        }
    }

    /// `lstat`, or nil when nothing is at `path` (ENOENT); any other failure is thrown.
    package static func lstatIfPresent(_ path: String) throws -> stat? {
        do { return try lstat(path) } catch let failure as SystemCallFailure where failure.code == ENOENT { return nil }
    }

    /// Whether `path` itself (not what a symbolic link there points to) is a directory; false
    /// when nothing is there or it cannot be examined.
    package static func isDirectory(_ path: String) -> Bool {
        guard let info = try? lstat(path) else { return false }
        return info.st_mode & S_IFMT == S_IFDIR
    }
}

/// Removes files and whole trees through directory descriptors: never through a symbolic link,
/// at any depth, and through folders made read-only (Signet removes only what it made).
package enum TreeRemover {
    /// Removes `path` (a file, a link, or a directory and everything in it). True when nothing
    /// is left.
    package static func remove(_ path: String) -> Bool {
        (try? Paths.withParent(of: path) { directory, name in removeEntry(Array(name.utf8CString), in: directory) }) ?? false
    }

    /// Removes the entry `name` (NUL-terminated raw bytes: names need not be UTF-8) of `parent`.
    ///
    /// A directory is emptied depth first holding one descriptor at a time (it climbs back with
    /// `..`), so no depth runs out of descriptors. A folder that cannot be emptied (a mount
    /// point, an immutable file) is remembered and not entered again, so the walk always ends.
    package static func removeEntry(_ name: [CChar], in parent: FileDescriptor) -> Bool {
        let parentFD = parent.rawValue
        if unlinkat(parentFD, name, 0) == 0 || errno == ENOENT { return true }
        guard errno == EISDIR || errno == EPERM || errno == EACCES else { return false }
        let first = openat(parentFD, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard first >= 0 else { return errno == ENOENT }
        // The folder being emptied; replacing it closes the one before.
        var current = OwnedDescriptor(adopting: first)
        _ = fchmod(first, 0o700)
        var path: [[CChar]] = []
        var stuck = Set<[UInt64]>()
        func identity(_ fd: FileDescriptor) -> [UInt64] {
            guard let info = try? fd.status() else { return [] }
            return [UInt64(info.st_dev), UInt64(info.st_ino)]
        }
        while true {
            var descended = false
            let here = current.descriptor
            for child in entries(of: here) {
                if unlinkat(here.rawValue, child, 0) == 0 || errno == ENOENT { continue }
                guard errno == EISDIR || errno == EPERM || errno == EACCES else { continue }
                let opened = openat(here.rawValue, child, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                guard opened >= 0 else { continue }
                let next = OwnedDescriptor(adopting: opened)
                if stuck.contains(identity(next.descriptor)) { continue }
                // A folder made read-only (0555) would keep its entries: make it writable first.
                _ = fchmod(opened, 0o700)
                current = next
                path.append(child)
                descended = true
                break
            }
            if descended { continue }
            // `current` holds nothing more that can go: remove it from its parent.
            guard let last = path.popLast() else {
                _ = consume current
                return unlinkat(parentFD, name, AT_REMOVEDIR) == 0 || errno == ENOENT
            }
            let identified = identity(current.descriptor)
            let up = openat(current.descriptor.rawValue, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard up >= 0 else { return false }
            current = OwnedDescriptor(adopting: up)
            if unlinkat(up, last, AT_REMOVEDIR) != 0 && errno != ENOENT { stuck.insert(identified) }
        }
    }

    /// The raw names in a directory, NUL-terminated; empty when it cannot be read (what is
    /// left is then reported by the caller's final check).
    static func entries(of directory: FileDescriptor) -> [[CChar]] {
        ((try? DirectoryEntries.list(directory)) ?? []).map(\.rawName)
    }
}
