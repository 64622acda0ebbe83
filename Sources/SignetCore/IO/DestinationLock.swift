import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage

/// The lock on one destination: `.DIR.signet-lock` beside DIR (not inside the tree that is
/// swapped), held with `flock` from the rollback check to the swap, so two updates of DIR never
/// interleave. It holds the holder's process id, for the message a waiting process shows.
///
/// The lock file is a ``PrivateFile`` (another user's file under that name is never read or
/// locked), and it is removable: when DIR does not exist at release (a refused first install),
/// the holder unlinks it while still holding it, and every locker checks after locking that the
/// path still names the file it locked, else locks the new one.
package final class DestinationLock {
    /// The lock file while it is held (nil once released).
    private var held: OwnedDescriptor?
    private let path: String
    private let destination: String

    package init(_ destination: String, wait: Double) throws {
        let (directory, prefix) = TemporaryFiles.prefix(besides: destination)
        let path = directory + "/" + prefix + "lock"
        self.path = path
        self.destination = destination
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, min(wait, 86_400)) * 1e9)
        while true {
            let file = try PrivateFile.open(path, mode: 0o644, what: "lock")
            let fd = file.descriptor
            if flock(fd.rawValue, LOCK_EX | LOCK_NB) == 0 {
                // Removed by its last holder while we waited: lock the new one.
                guard PrivateFile.stillNamed(fd, path) else { continue }
                let text = Array("\(getpid())\n".utf8)
                _ = ftruncate(fd.rawValue, 0)
                _ = pwrite(fd.rawValue, text, text.count, 0)
                held = consume file
                return
            }
            let err = errno
            guard err == EWOULDBLOCK || err == EINTR else {
                throw SignetError.posix(err, "cannot lock the destination at", path: path, call: "flock")
            }
            if TemporaryFiles.isInterrupted {
                throw SignetError(.interrupted, "interrupted while waiting for another update of '\(destination)'; nothing was changed", path: destination)
            }
            if DispatchTime.now().uptimeNanoseconds >= deadline {
                var holder = [UInt8](repeating: 0, count: 32)
                let n = (try? holder.withUnsafeMutableBytes { try fd.read(fullyAt: 0, into: $0) }) ?? 0 // only for the message
                let digits = holder.prefix(n).prefix { $0 != 0x0A }
                let pid = !digits.isEmpty && digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) ? String(decoding: digits, as: UTF8.self) : "?"
                throw SignetError(
                    .destinationBusy, "'\(destination)' is being updated by process \(pid); try again when it has finished, or wait longer with --wait SECONDS",
                    path: destination)
            }
            usleep(20_000)
        }
    }

    package func release() {
        guard let file = held.take() else { return }
        let descriptor = file.descriptor
        _ = ftruncate(descriptor.rawValue, 0)
        // Beside a DIR that was never made (or is gone) the lock file goes too, unlinked while
        // it is still held.
        let absent: Bool
        do { absent = try Paths.lstatIfPresent(destination) == nil } catch { absent = false }
        if absent, PrivateFile.stillNamed(descriptor, path) {
            _ = try? Paths.withParent(of: path) { directory, name in unlinkat(directory.rawValue, name, 0) }
        }
        _ = flock(descriptor.rawValue, LOCK_UN)
        // `file` closes here, once.
    }

    deinit { release() }
}
