#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage

/// Files Signet keeps between runs beside what it writes (partial downloads, lock files), in
/// folders another local user may also write to (`/tmp`, a shared download folder). Such a
/// file is Signet's only if Signet made it: created exclusively (`O_CREAT | O_EXCL`, never
/// through a link), and reused only while it is a regular file of this user, with one link and
/// no write permission for group or others. Anything else found under the name (planted by
/// another user, a link, a FIFO, a file once made writable) is unlinked and the file created
/// anew; where it cannot be unlinked (another user's file in a sticky folder) the call is
/// refused rather than trusting its bytes.
package enum PrivateFile {
    /// Opens or creates `path` read-write as described above, with `mode` when created.
    /// `what` names the file in messages ("download", "lock").
    package static func open(_ path: String, mode: mode_t, what: String) throws -> OwnedDescriptor {
        for _ in 0..<8 {
            do {
                return try Paths.open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            } catch {
                // EEXIST: judge what is there, below.
                guard error.code == EEXIST else { throw SignetError.posix(error, "cannot create the \(what)", path: path) }
            }
            // O_NONBLOCK: a FIFO planted under the name must not hang the open.
            do {
                let existing = try Paths.open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
                let fd = existing.descriptor.rawValue
                if let info = try? existing.descriptor.status(), isOurs(info) {
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
                    return existing
                }
            } catch let failure where failure.code == ENOENT {
                continue // gone in between: create it
            } catch {
                // A link (ELOOP), a folder (EISDIR), a file we may not open: not ours either.
            }
            // Root's own (a Signet run as root made it) and we are not root: it is Signet's,
            // and the answer is to run as root, never to remove it.
            if geteuid() != 0, let info = try? Paths.lstat(path), info.st_uid == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o022 == 0 {
                throw SignetError(
                    .permissionDenied,
                    "'\(path)' is root's \(what) (made by Signet run as root, as the update service runs): this user (uid \(geteuid())) may not use it. Run this as root",
                    path: path)
            }
            // Not ours, or not a file: never used. Remove it and create ours.
            let removed =
                (try? Paths.withParent(of: path) { directory, name -> Int32 in
                    unlinkat(directory.rawValue, name, 0) == 0 || errno == ENOENT ? 0 : errno
                }) ?? EACCES
            if removed != 0 {
                let owner = (try? Paths.lstat(path)).map { " (owned by uid \($0.st_uid))" } ?? ""
                throw SignetError(
                    .destinationRefused,
                    "'\(path)' exists\(owner) and is not a \(what) this user made (another owner, another kind of file, or writable by others); Signet does not use it and cannot remove it (\(String(cString: strerror(removed)))). Remove it, or choose another place",
                    path: path)
            }
        }
        throw SignetError(
            .destinationRefused, "'\(path)' keeps being replaced while Signet creates its \(what) there; choose a folder other users cannot write to",
            path: path)
    }

    /// Whether an existing file may be reused: a regular file of this user, one link, not
    /// writable by group or others.
    static func isOurs(_ info: stat) -> Bool {
        info.st_mode & S_IFMT == S_IFREG && info.st_uid == geteuid() && info.st_nlink == 1 && info.st_mode & 0o022 == 0
    }

    /// Whether the descriptor still is the file `path` names (after waiting for a lock on it:
    /// the holder may have removed it meanwhile).
    package static func stillNamed(_ fd: FileDescriptor, _ path: String) -> Bool {
        guard let held = try? fd.status(), let named = try? Paths.lstat(path) else { return false }
        return held.st_dev == named.st_dev && held.st_ino == named.st_ino
    }
}
