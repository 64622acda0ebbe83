import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
internal import SystemPackage
import SignetCore

extension Installer {
    /// Writes a staged file and starts its writeback every few MiB (sync_file_range), so the
    /// disk works while a large file is still being read and hashed, and the one durability
    /// step of the tree (``Staging/finish()``, syncfs) has little left to wait for.
    final class StagedWriter {
        /// The staged file (its owner is the caller, for as long as this writes).
        let fd: FileDescriptor
        let path: String
        let destination: String
        private var written: Int64 = 0
        private var flushed: Int64 = 0
        static let writebackStep: Int64 = 8 << 20

        /// Whether the descriptor's position is where the writes go on.
        private let positioned: Bool

        /// `at`: the file's first bytes are already written (a resumed file): the writes go on
        /// from there, wherever the descriptor's position was.
        init(fd: FileDescriptor, path: String, destination: String, at offset: Int64 = 0) {
            self.fd = fd
            self.path = path
            self.destination = destination
            written = offset
            flushed = offset
            positioned = offset == 0 || lseek(fd.rawValue, off_t(offset), SEEK_SET) == off_t(offset)
        }

        func write(_ chunk: UnsafeRawBufferPointer) throws {
            guard positioned else { throw SignetError(.io, "cannot continue '\(path)' at byte \(written) in the staging directory", path: destination) }
            try Installer.writeAll(chunk, to: fd, path: path, destination: destination)
            written += Int64(chunk.count)
            if written - flushed >= Self.writebackStep {
                // Best effort: a filesystem that cannot do it still gets the final fsync.
                _ = signet_start_writeback(fd.rawValue, flushed, written - flushed)
                flushed = written
            }
        }

        /// Starts writeback of the tail of a large file (best effort: the tree's syncfs writes
        /// whatever this did not). Small files are left to syncfs alone: starting writeback of
        /// each one as it is written made 10,000 small files 2-3x slower to make durable than
        /// one syncfs over all of them (bench/durability.py), since the filesystem can no
        /// longer allocate and write them together.
        func finish() {
            if written >= Self.writebackStep, written > flushed { _ = signet_start_writeback(fd.rawValue, flushed, 0) }
            flushed = written
        }
    }
}
