#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage
import SignetCore

/// The bytes of range answers written to a folder as they arrive, one file per part named by
/// its offset in the remote file, so that a run killed in the middle of an answer (SIGKILL, a
/// power cut) leaves what arrived to the next run instead of losing it with its memory
/// (FORMAT.md §5, "Resumed inside a file").
///
/// It holds what ``RangedInput`` holds in memory and nothing more: a part leaves the folder
/// when it leaves the memory cache, so the folder stays within the cache's bound plus the answer
/// in flight. What it holds is only bytes at offsets: the next run uses them as it would the
/// server's answer (every byte checked against the signed hashes where it is used), and only
/// for the same remote file (the caller compares the validator and the size).
///
/// Best effort: a write that fails (a full disk) stops the journal and removes nothing that
/// was needed; the transfer goes on.
package final class RangeJournal {
    private let folder: SharedDescriptor
    /// The part being written: its offset and file.
    private var current: (start: Int64, file: SharedDescriptor)?
    private var failed = false

    /// A journal writing into the open folder `folder` (private to this process's user).
    package init(folder: consuming OwnedDescriptor) {
        self.folder = SharedDescriptor(folder)
    }

    /// Appends `bytes` to the part starting at `start` (a new part: its file is made anew).
    package func append(_ bytes: UnsafeRawBufferPointer, part start: Int64) {
        guard !failed, !bytes.isEmpty else { return }
        if current?.start != start {
            current = nil
            let fd = openat(folder.descriptor.rawValue, Self.name(start), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
            guard fd >= 0 else { failed = true; return }
            current = (start, SharedDescriptor(OwnedDescriptor(adopting: fd)))
        }
        guard let file = current?.file, (try? file.descriptor.write(all: bytes)) != nil else {
            failed = true
            current = nil
            return
        }
    }

    /// Removes the part starting at `start` (dropped from memory, or its request started over).
    package func discard(part start: Int64) {
        if current?.start == start { current = nil }
        _ = unlinkat(folder.descriptor.rawValue, Self.name(start), 0)
    }

    /// The parts an earlier run's journal in `folder` holds of a remote file of `size` bytes,
    /// at most `limit` bytes in all, the lowest offsets first; each is removed once read (what
    /// they hold is used by this run, never by another). Files that are not parts (their name
    /// not an offset, empty, past the end) are removed and skipped.
    package static func takeParts(from folder: FileDescriptor, size: Int64, limit: Int) -> [(start: Int64, bytes: [UInt8])] {
        guard let entries = try? DirectoryEntries.list(folder) else { return [] }
        var found: [(start: Int64, name: [CChar])] = []
        for entry in entries {
            if let start = Int64(entry.name), start >= 0, start < size, name(start) == entry.name {
                found.append((start, entry.rawName))
            } else {
                _ = unlinkat(folder.rawValue, entry.rawName, 0)
            }
        }
        var parts: [(start: Int64, bytes: [UInt8])] = []
        var total = 0
        for (start, name) in found.sorted(by: { $0.start < $1.start }) {
            defer { _ = unlinkat(folder.rawValue, name, 0) }
            let fd = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
            guard fd >= 0 else { continue }
            let file = OwnedDescriptor(adopting: fd)
            guard let info = try? file.descriptor.status(), info.st_mode & S_IFMT == S_IFREG, info.st_size > 0,
                info.st_size <= size - start, total + Int(info.st_size) <= limit
            else { continue }
            var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
            guard let read = try? bytes.withUnsafeMutableBytes({ try file.descriptor.read(fullyAt: 0, into: $0) }), read == bytes.count else { continue }
            total += read
            parts.append((start, bytes))
        }
        return parts
    }

    private static func name(_ start: Int64) -> String { String(start) }
}
