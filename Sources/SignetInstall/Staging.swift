import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
internal import SystemPackage
import SignetCore
import SignetManifest

/// The staging directory: a sibling of the destination (so on its filesystem), private (0700)
/// while it is built, named after this process and registered for removal on interruption,
/// written only through descriptors opened with O_NOFOLLOW below it. Every call names the
/// parent through one descriptor, so the destination's path may be of any length.
final class Staging {
    let path: String
    private let name: String
    /// The destination's parent directory and the staging root in it.
    private let parentDirectory: OwnedDescriptor
    private let rootDirectory: OwnedDescriptor
    private var root: FileDescriptor { rootDirectory.descriptor }
    private var token: Int

    /// Leaves this staging beside DIR if Signet is interrupted (a ranged update: the next run
    /// continues in it, as after a cut link or a SIGKILL).
    func keepOnInterruption() { TemporaryFiles.keepOnInterruption(token) }
    private var asideToken: Int? = nil
    /// The tree a swap left to remove (``removeReplaced()``).
    private var replaced: (name: String, path: String, exchanged: Bool)? = nil
    /// Folders of the staged tree opened so far (at most 256 at once).
    private var directories: [String: SharedDescriptor] = [:]
    /// The process's umask as this install started (nil if unknown): a file created with a
    /// mode the umask keeps needs no `fchmod` (one system call less per file).
    private let umask: mode_t? = Staging.currentUmask()

    /// The umask, from /proc/self/status (reading it with umask(2) would change it meanwhile
    /// for every other thread).
    static func currentUmask() -> mode_t? {
        guard let status = try? readSmallFile("/proc/self/status", what: "process status", limit: 64 * 1024) else { return nil }
        for line in String(decoding: status, as: UTF8.self).split(separator: "\n") where line.hasPrefix("Umask:") {
            return mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8)
        }
        return nil
    }

    /// Gives `fd`, created by ``createFile(_:mode:)`` with `mode`, exactly that mode: a no-op
    /// where the umask left it so.
    func ensureMode(_ fd: FileDescriptor, _ mode: mode_t) throws {
        if let umask, mode & umask == 0 { return }
        _ = try systemCall("fchmod") { fchmod(fd.rawValue, mode) }
    }

    init(besides destination: String) throws {
        let parentPath = AtomicFile.parentDirectory(of: destination)
        let parentDirectory: OwnedDescriptor
        do { parentDirectory = try Paths.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the directory of", path: destination)
        }
        let parent = parentDirectory.descriptor.rawValue
        var made: (path: String, name: String, token: Int)? = nil
        for _ in 0..<8 {
            let candidate = TemporaryFiles.name(besides: destination, tag: "staging")
            let token = TemporaryFiles.register(candidate, tree: true)
            let name = String(candidate.split(separator: "/").last!)
            let attempt: Result<Int32, SystemCallFailure>
            do {
                attempt = try TemporaryFiles.guardedCall("mkdirat") { mkdirat(parent, name, 0o700) }
            } catch {
                TemporaryFiles.unregister(token)
                throw error
            }
            if case .success = attempt {
                made = (candidate, name, token)
                break
            }
            TemporaryFiles.unregister(token)
            if case .failure(let failure) = attempt, failure.code != EEXIST {
                throw SignetError.posix(failure, "cannot create a staging directory beside", path: destination)
            }
        }
        guard let made else {
            throw SignetError(.io, "cannot create a staging directory beside '\(destination)'", path: destination)
        }
        let root = openat(parent, made.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else {
            let err = errno
            unlinkat(parent, made.name, AT_REMOVEDIR)
            TemporaryFiles.unregister(made.token)
            throw SignetError.posix(err, "cannot open the staging directory", path: made.path, call: "openat")
        }
        self.path = made.path
        self.name = made.name
        self.token = made.token
        self.parentDirectory = parentDirectory
        self.rootDirectory = OwnedDescriptor(adopting: root)
    }

    deinit {
        // The descriptors close with their owners, after this.
        TemporaryFiles.unregister(token)
        if let asideToken { TemporaryFiles.unregister(asideToken) }
    }

    /// The directory holding `relative` (created as needed, 0755 whatever the umask), as a descriptor.
    private func directory(for relative: String) throws -> (FileDescriptor, String) {
        var components = relative.split(separator: "/").map(String.init)
        let name = components.removeLast()
        var fd = root
        var walked = ""
        for component in components {
            walked += (walked.isEmpty ? "" : "/") + component
            if let known = directories[walked] {
                fd = known.descriptor
                continue
            }
            let made = try TemporaryFiles.guardedCall("mkdirat") { mkdirat(fd.rawValue, component, 0o755) }
            var created = false
            switch made {
            case .success: created = true
            case .failure(let failure) where failure.code == EEXIST: break
            case .failure(let failure):
                throw SignetError.posix(failure, "cannot create directory '\(walked)' in the staging directory", path: path)
            }
            let opened = openat(fd.rawValue, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard opened >= 0 else {
                let reason = errno == ENOTDIR ? "'\(walked)' is both a file and a directory in this package" : String(cString: strerror(errno))
                throw SignetError(.malformedArchive, "cannot install: \(reason)", path: path, entry: relative)
            }
            // mkdir applies the umask; installed folders are 0755 regardless (FORMAT.md §2).
            let next = SharedDescriptor(OwnedDescriptor(adopting: opened))
            if created { _ = fchmod(opened, 0o755) }
            if directories.count > 256 { directories.removeAll() }
            directories[walked] = next
            fd = next.descriptor
        }
        return (fd, name)
    }

    /// Creates a new file (never an existing one, never through a link) and returns its
    /// descriptor, open for reading too (a reflinked copy is hashed through it).
    /// The staging tree is private (0700) until ``finish()``, so a file may be created with the
    /// mode it will have (then ``ensureMode(_:_:)``).
    func createFile(_ relative: String, mode: mode_t = 0o600) throws -> OwnedDescriptor {
        let (directory, name) = try directory(for: relative)
        switch try TemporaryFiles.guardedCall("openat", { openat(directory.rawValue, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }) {
        case .success(let fd): return OwnedDescriptor(adopting: fd)
        case .failure(let failure) where failure.code == EEXIST || failure.code == EISDIR:
            throw SignetError(.malformedArchive, "cannot install '\(relative)': it is both a file and a directory in this package", path: path, entry: relative)
        case .failure(let failure):
            var error = SignetError.posix(failure, "cannot install '\(relative)' in the staging directory", path: path)
            error.entry = relative
            throw error
        }
    }

    /// Moves the regular file `relative` of an earlier run's staging tree (below `tree`, never
    /// through a link) into this one, if it is there with `size` bytes: one rename on the same
    /// filesystem, so a retry continues with what an interrupted run staged instead of copying
    /// it again. Its content is checked when its turn comes
    /// (``openFile(_:)``). False, with nothing changed, when it is absent or not as expected.
    func moveIn(_ relative: String, from tree: FileDescriptor, size: UInt64) -> Bool {
        moveIn(relative, from: tree) { $0 == size }
    }

    /// ``moveIn(_:from:size:)`` for a file an interrupted run cut short: moved when it holds
    /// at least one byte and fewer than `size` (its chunks are checked before any is kept).
    func moveIn(_ relative: String, from tree: FileDescriptor, below size: UInt64) -> Bool {
        moveIn(relative, from: tree) { $0 > 0 && $0 < size }
    }

    private func moveIn(_ relative: String, from tree: FileDescriptor, fits: (UInt64) -> Bool) -> Bool {
        let components = relative.split(separator: "/")
        guard let last = components.last else { return false }
        let name = String(last)
        let parentPath = components.dropLast().joined(separator: "/")
        func move(from parent: FileDescriptor) -> Bool {
            var info = stat()
            guard fstatat(parent.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFREG,
                fits(UInt64(info.st_size)), let (directory, target) = try? directory(for: relative)
            else { return false }
            return (try? TemporaryFiles.guarded { renameat(parent.rawValue, name, directory.rawValue, target) == 0 }) == true
        }
        if parentPath.isEmpty { return move(from: tree) }
        guard let opened = try? Paths.open(parentPath, beneath: tree, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) else { return false }
        return move(from: opened.descriptor)
    }

    /// Hard-links the installed file `name` of `directory` into the staged tree as `relative`,
    /// provided the name still leads to the inode `identity` (the one that was opened and
    /// hashed): the staged tree then shares it with the installed one instead of holding a copy
    ///. False, with nothing staged, where the link cannot be made (another
    /// filesystem, a link limit) or the name now leads elsewhere.
    func link(_ relative: String, from directory: FileDescriptor, name: String, identity: stat) -> Bool {
        guard let (target, targetName) = try? self.directory(for: relative),
            (try? TemporaryFiles.guarded({ linkat(directory.rawValue, name, target.rawValue, targetName, 0) == 0 })) == true
        else { return false }
        var linked = stat()
        guard fstatat(target.rawValue, targetName, &linked, AT_SYMLINK_NOFOLLOW) == 0,
            linked.st_dev == identity.st_dev, linked.st_ino == identity.st_ino
        else {
            _ = unlinkat(target.rawValue, targetName, 0)
            return false
        }
        return true
    }

    /// Opens a file already in the staged tree (one ``moveIn(_:from:size:)`` brought) for
    /// reading and writing, and for its attributes and mode (`access` O_RDWR); or read-only
    /// (`O_RDONLY`, as fs-verity asks: no writer may hold it). Never through a link.
    func openFile(_ relative: String, access: Int32 = O_RDWR) throws -> OwnedDescriptor {
        let (directory, name) = try directory(for: relative)
        do {
            return OwnedDescriptor(adopting: try systemCall("openat") { openat(directory.rawValue, name, access | O_NOFOLLOW | O_CLOEXEC) })
        } catch {
            throw SignetError.posix(error, "cannot open '\(relative)' in the staging directory", path: path)
        }
    }

    /// The attribute on a staging tree's root naming the package its files were fetched from
    /// (the server's validator and the size), so that a later run continues a file cut short at
    /// its byte offset only from the same package (FORMAT.md §5, "Resumed inside a file").
    static let sourceAttribute = "user.signet.staged-from"

    /// Marks the tree as staged from the package `source` names (best effort: a filesystem
    /// without user attributes gets no byte-offset resume).
    func markSource(_ source: String) {
        _ = ExtendedAttributes.set(Self.sourceAttribute, Array(source.utf8), on: root)
    }

    /// The package a staging tree (an earlier run's, by its root) was staged from, if marked.
    static func source(of tree: FileDescriptor) -> String? {
        guard case .success(let value?) = ExtendedAttributes.get(sourceAttribute, on: tree) else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    /// The folder of this tree's range journal (``TreeLayout/rangeJournal``, 0700), made if
    /// needed; nil where it cannot be made (the update then goes on without a journal).
    func rangeJournalFolder() -> OwnedDescriptor? {
        guard let (parent, name) = try? directory(for: TreeLayout.rangeJournal) else { return nil }
        guard mkdirat(parent.rawValue, name, 0o700) == 0 || errno == EEXIST else { return nil }
        return try? Paths.open(name, beneath: parent, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    /// The range journal an earlier run's staging tree (by its root) left, if any.
    static func rangeJournalFolder(of tree: FileDescriptor) -> OwnedDescriptor? {
        try? Paths.open(TreeLayout.rangeJournal, beneath: tree, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    /// Removes the range journal: it is never part of an installed tree.
    private func removeRangeJournal() throws {
        guard let own = try? Paths.open(TreeLayout.directory, beneath: root, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) else { return }
        let name = String(TreeLayout.rangeJournal.dropFirst(TreeLayout.directory.count + 1))
        guard TreeRemover.removeEntry(Array(name.utf8CString), in: own.descriptor) else {
            throw SignetError(.io, "cannot remove '\(TreeLayout.rangeJournal)' from the staging directory", path: path)
        }
    }

    /// Removes a staged file (a copy that turned out not to be the signed content).
    func removeFile(_ relative: String) {
        guard let (directory, name) = try? directory(for: relative) else { return }
        _ = unlinkat(directory.rawValue, name, 0)
    }

    /// Writes a small file (signatures, manifest) with mode 0644.
    func writeFile(_ relative: String, _ bytes: [UInt8]) throws {
        let file = try createFile(relative)
        let fd = file.descriptor
        try bytes.withUnsafeBytes { try Installer.writeAll($0, to: fd, path: relative, destination: path) }
        do {
            _ = try systemCall("fchmod") { fchmod(fd.rawValue, 0o644) } // durable with the tree (finish())
        } catch {
            throw SignetError.posix(error, "cannot write '\(relative)' in the staging directory", path: path)
        }
    }

    /// Opens the tree to readers (0755) and makes all of it durable in one step, before it is
    /// renamed into place: every staged file's data, its attributes and mode, and every
    /// directory entry.
    ///
    /// One `syncfs` of the staging filesystem instead of an fsync per file (each of which
    /// commits ext4's journal): large files' writeback was started as they were written, small
    /// ones are written together here, and the disk is waited for once. It is as safe as the fsyncs were: syncfs writes back every dirty
    /// inode and page of the filesystem and waits for them and for the journal commit, and
    /// since Linux 5.8 it reports a writeback error that happened after `root` was opened
    /// (before the first file was written). It also writes other processes' dirty data on the
    /// same filesystem, which a busy device pays in time, never in safety. Measurements in
    /// bench/README.md.
    func finish() throws {
        try removeRangeJournal()
        do {
            _ = ExtendedAttributes.remove(Self.sourceAttribute, on: root)
            let root = root.rawValue
            _ = try systemCall("fchmod") { fchmod(root, 0o755) }
            if Self.durabilityBrokenForTests { return }
            _ = try systemCall("syncfs") { signet_syncfs(root) }
        } catch let failure where failure.code == ENOSYS {
            // Only a seccomp filter hides syncfs (Linux has had it since 2.6.39): fall back
            // to one fsync per directory and file, reopened below the staging root.
            try fsyncTree()
        } catch {
            throw SignetError.posix(error, "cannot make the staged tree durable", path: path)
        }
    }

    /// A deliberately broken build for the power-cut harness (scripts/vm/run.sh):
    /// `SIGNET_TEST_BREAK_DURABILITY=skip-syncfs` skips the durability step before the swap, so
    /// that the harness proves it catches the trees a power cut then leaves. Never set it
    /// elsewhere: a power cut after such an install can leave empty or partial files in DIR.
    /// Signet says so on standard error each time it is honoured.
    static let durabilityBrokenForTests: Bool = {
        guard ProcessInfo.processInfo.environment["SIGNET_TEST_BREAK_DURABILITY"] == "skip-syncfs" else { return false }
        FileHandle.standardError.write(
            Data(
                "signet: warning: SIGNET_TEST_BREAK_DURABILITY=skip-syncfs: the staged tree is NOT made durable before the swap (a test-only broken build)\n"
                    .utf8))
        return true
    }()

    /// The fallback of ``finish()``: fsync of every file and directory of the staged tree.
    private func fsyncTree() throws {
        func walk(_ fd: FileDescriptor) throws {
            try DirectoryEntries.forEach(in: fd) { entry in
                // Staged trees hold only what Signet made: files and directories.
                let opened = OwnedDescriptor(adopting: try systemCall("openat") { openat(fd.rawValue, entry.rawName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) })
                let child = opened.descriptor
                if try child.status().st_mode & S_IFMT == S_IFDIR { try walk(child) }
                try child.sync()
            }
        }
        do {
            try walk(root)
            try root.sync()
        } catch {
            throw SignetError.posix(error, "cannot make the staged tree durable", path: path)
        }
    }

    /// What becomes of the tree a swap replaces.
    enum Previous {
        /// It is kept as the previous release (`.DIR.signet-previous`), replacing the one kept
        /// before.
        case keep
        /// It is removed; the previous release kept before stays (the replaced release was
        /// never confirmed: the previous one is the last good one).
        case discard
        /// It is removed, and so is any previous release kept before (`--keep-previous=no`).
        case none
    }

    /// Puts the staged tree at `destination`. An existing directory is swapped in one
    /// `renameat2(RENAME_EXCHANGE)`; where the filesystem lacks that, the old tree is moved
    /// aside first (DIR is then briefly absent). The old tree is then kept as the previous
    /// release (`previous`), and DIR's parent fsynced. Returns whether the atomic exchange was
    /// used and whether the old tree was kept; what is to be removed (the old tree, or the
    /// previous release it replaced) is removed by ``removeReplaced()``, once the caller
    /// recorded the new state, so that a crash while it is removed leaves a record that
    /// already says what DIR and the previous release are.
    func install(at destination: String, replacing state: DestinationState, previous: Previous = .none) throws -> (exchanged: Bool, kept: Bool) {
        defer { try? parentDirectory.descriptor.sync() }
        let parent = parentDirectory.descriptor
        let previousName = Array((ReleaseRecord.previousPath(for: destination).split(separator: "/").last.map(String.init) ?? "").utf8CString)
        // The renames happen only if no interruption is removing the staging tree meanwhile.
        let old = try TemporaryFiles.guarded { try rename(to: destination, replacing: state) }
        if previous == .none { _ = TreeRemover.removeEntry(previousName, in: parent) }
        guard let old else { return (false, false) }
        replaced = old
        var kept = false
        if previous == .keep {
            // The replaced tree takes the previous one's name in one exchange (the one kept
            // before is then at the old tree's name, removed later), or one rename if none.
            let oldName = Array(old.name.utf8CString)
            kept =
                (try? TemporaryFiles.guarded {
                    if signet_renameat2(parent.rawValue, oldName, parent.rawValue, previousName, signet_RENAME_EXCHANGE()) == 0 { return true }
                    guard errno == ENOENT else { return false }
                    return signet_renameat2(parent.rawValue, oldName, parent.rawValue, previousName, signet_RENAME_NOREPLACE()) == 0
                }) ?? false
        }
        return (old.exchanged, kept)
    }

    /// What ``install(at:replacing:previous:)`` left to remove: the old tree, or the previous
    /// release it replaced, at the staging path or aside (still registered: an interruption
    /// while it is removed removes it too). Returns its path if it could not be removed.
    func removeReplaced() -> String? {
        guard let old = replaced else { return nil }
        replaced = nil
        return TreeRemover.removeEntry(Array(old.name.utf8CString), in: parentDirectory.descriptor) ? nil : old.path
    }

    /// The renames of ``install(at:replacing:)``; returns where the old tree went, if any.
    private func rename(to destination: String, replacing state: DestinationState) throws -> (name: String, path: String, exchanged: Bool)? {
        let target = destination.split(separator: "/").last.map(String.init) ?? destination
        let parent = parentDirectory.descriptor.rawValue // for the *at calls below
        if case .absent = state {
            if signet_renameat2(parent, name, parent, target, signet_RENAME_NOREPLACE()) == 0 {
                TemporaryFiles.unregister(token)
                return nil
            }
            let err = errno
            guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
                throw SignetError.posix(err, "cannot install at", path: destination, call: "renameat2")
            }
            // No RENAME_NOREPLACE here: under the destination's lock, nothing else creates DIR.
            var info = stat()
            do {
                _ = try systemCall("fstatat") { fstatat(parent, target, &info, AT_SYMLINK_NOFOLLOW) }
                throw SignetError.posix(EEXIST, "cannot install at", path: destination)
            } catch let failure as SystemCallFailure where failure.code == ENOENT {
                // Still absent: rename below.
            } catch {
                throw SignetError.posix(error, "cannot install at", path: destination)
            }
            guard renameat(parent, name, parent, target) == 0 else { throw SignetError.posix(errno, "cannot install at", path: destination, call: "renameat") }
            TemporaryFiles.unregister(token)
            return nil
        }
        if signet_renameat2(parent, name, parent, target, signet_RENAME_EXCHANGE()) == 0 {
            return (name, path, true)
        }
        let err = errno
        guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
            throw SignetError.posix(err, "cannot replace", path: destination, call: "renameat2")
        }
        let aside = TemporaryFiles.name(besides: destination, tag: "old")
        let asideName = String(aside.split(separator: "/").last!)
        asideToken = TemporaryFiles.register(aside, tree: true)
        guard renameat(parent, target, parent, asideName) == 0 else {
            throw SignetError.posix(errno, "cannot move the old tree aside at", path: destination, call: "renameat")
        }
        guard renameat(parent, name, parent, target) == 0 else {
            let err = errno
            renameat(parent, asideName, parent, target)
            throw SignetError.posix(err, "cannot install at", path: destination, call: "renameat")
        }
        TemporaryFiles.unregister(token)
        return (asideName, aside, false)
    }

    /// Removes the staging directory and everything in it. True when nothing is left.
    func remove() -> Bool {
        let removed = TreeRemover.removeEntry(Array(name.utf8CString), in: parentDirectory.descriptor)
        if removed { TemporaryFiles.unregister(token) }
        return removed
    }
}
