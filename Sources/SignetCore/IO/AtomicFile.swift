#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import CSignetSystem // package: mode_t in package signatures resolves through it
internal import SystemPackage

/// Writes files so that readers see either nothing or the complete file: the bytes go to a
/// temporary file in the same directory, are fsynced, and the temporary is renamed into place.
package enum AtomicFile {
    /// Writes `bytes` to `path` with permissions `mode`.
    ///
    /// - Parameter replace: when false, an existing file at `path` is never replaced
    ///   (`renameat2(RENAME_NOREPLACE)`, or `link(2)` where the filesystem lacks it) and the
    ///   call fails with ``SignetError/Code/fileExists``.
    /// - Parameter durable: when false, neither the file nor its folder is fsynced: the caller
    ///   writes many and makes them durable at once (``syncFilesystem(of:)``). A reader still
    ///   sees the old file or the whole new one.
    package static func write(_ bytes: [UInt8], to path: String, mode: mode_t, replace: Bool, durable: Bool = true) throws {
        let directory = parentDirectory(of: path)
        let temporary = temporaryPath(beside: path, tag: "tmp")
        let token = TemporaryFiles.register(temporary)
        defer { TemporaryFiles.unregister(token) }
        let temporaryName = temporary.split(separator: "/").last.map(String.init) ?? temporary
        var committed = false
        defer {
            if !committed { _ = try? Paths.withParent(of: path) { parent, _ in unlinkat(parent.rawValue, temporaryName, 0) } }
        }
        try writeNew(bytes, at: temporary, mode: mode, for: path, durable: durable)
        try TemporaryFiles.guarded {
            if replace {
                // Through the folder's descriptor: DIR may lie below a path longer than PATH_MAX.
                try Paths.withParent(of: path) { parent, name in
                    guard renameat(parent.rawValue, temporaryName, parent.rawValue, name) == 0 else {
                        throw SignetError.posix(errno, "cannot write", path: path, call: "renameat")
                    }
                    let opened = durable ? openat(parent.rawValue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1
                    if opened >= 0 {
                        let folder = OwnedDescriptor(adopting: opened)
                        try? folder.descriptor.sync()
                    }
                }
            } else {
                try renameNoReplace(temporary, path, what: "the file")
                if durable { syncDirectory(directory) }
            }
        }
        committed = true
    }

    /// Creates `temporary` (never an existing file, never through a link), writes `bytes` with
    /// permissions `mode` and fsyncs it. `target` names the file in errors. The caller has
    /// registered `temporary` and removes it on failure.
    package static func writeNew(_ bytes: [UInt8], at temporary: String, mode: mode_t, for target: String, durable: Bool = true) throws {
        let opened: OwnedDescriptor
        do { opened = try TemporaryFiles.guardedOpen(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) } catch let failure
            as SystemCallFailure
        {
            throw SignetError.posix(failure, "cannot create a temporary file beside", path: target)
        }
        let file = opened.descriptor
        do {
            _ = try systemCall("fchmod") { fchmod(file.rawValue, mode) }
            try bytes.withUnsafeBytes { raw in try file.write(all: raw) }
            if durable { try file.sync() }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot write", path: target)
        }
    }

    /// A new name for a temporary file beside `path` (same filesystem, hidden, named after this
    /// process so that the next run can remove it if this one is killed). Not created.
    package static func temporaryPath(beside path: String, tag: String) -> String {
        TemporaryFiles.name(besides: path, tag: tag)
    }

    /// fsyncs the directories of `paths`, each once.
    package static func syncDirectories(of paths: [String]) {
        for directory in Set(paths.map(parentDirectory(of:))) { syncDirectory(directory) }
    }

    /// Refuses (``SignetError/Code/fileExists``, exit 5) when anything is at `path` (a dangling
    /// link too): Signet's one rule for outputs is that an existing one is replaced only with
    /// `--force`. Checked before any work, so nothing is written; the final rename
    /// is ``renameNoReplace(_:_:)``, so a file that appears meanwhile is not replaced either.
    package static func refuseExisting(_ path: String, what: String) throws {
        try OutputFiles.refuseExisting(path, what: what)
    }

    static func existing(_ path: String, what: String) -> SignetError { SignetError.existingOutput(path, what: what) }

    /// Moves `from` to `to` only if `to` does not exist.
    package static func renameNoReplace(_ from: String, _ to: String, what: String? = nil) throws {
        if signet_renameat2(AT_FDCWD, from, AT_FDCWD, to, signet_RENAME_NOREPLACE()) == 0 { return }
        let err = errno
        if err == EEXIST, let what { throw existing(to, what: what) }
        guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
            throw SignetError.posix(err, "cannot write", path: to, call: "renameat2")
        }
        // The filesystem has no RENAME_NOREPLACE: link(2) also refuses an existing target.
        guard link(from, to) == 0 else {
            let err = errno
            if err == EEXIST, let what { throw existing(to, what: what) }
            throw SignetError.posix(err, "cannot write", path: to, call: "link")
        }
        unlink(from)
    }

    /// Makes every file written on `folder`'s filesystem durable in one step (`syncfs`: what a
    /// batch of ``write(_:to:mode:replace:durable:)`` without `durable` needs once).
    package static func syncFilesystem(of folder: String) throws {
        let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw SignetError.posix(errno, "cannot open", path: folder, call: "open") }
        let opened = OwnedDescriptor(adopting: fd)
        guard signet_syncfs(opened.descriptor.rawValue) == 0 else { throw SignetError.posix(errno, "cannot make durable", path: folder, call: "syncfs") }
    }

    /// fsyncs a directory so a rename in it survives a crash. Best effort: some filesystems refuse.
    package static func syncDirectory(_ directory: String) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        let opened = OwnedDescriptor(adopting: fd)
        try? opened.descriptor.sync()
    }

    package static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let parent = String(path[..<slash])
        return parent.isEmpty ? "/" : parent
    }
}
