#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CZip
internal import CSignetSystem
internal import SystemPackage
import SignetCore

/// The file a new archive is written to, handed to libzip as a writable source.
///
/// libzip's own file output writes a second temporary file and renames it; this writes straight
/// into the descriptor Signet already holds (the temporary beside the package), through a
/// 1 MiB buffer, and starts the kernel's writeback every 8 MiB, so that by the time the archive
/// is complete most of it is on its way to disk and the final fsync has little left to wait for.
package final class ArchiveOutput: ZipSourceContext {
    /// The file the archive becomes, named in messages.
    let path: String
    private let file: OwnedDescriptor
    private var descriptor: FileDescriptor { file.descriptor }
    /// The first error, with the path, for the message (libzip only keeps a code).
    fileprivate(set) var failure: SignetError?
    var zipError = zip_error_t()

    private let buffer: UnsafeMutableRawBufferPointer
    private var bufferOffset: UInt64 = 0
    private var buffered = 0
    /// Where the next write goes (libzip seeks back to patch local headers).
    fileprivate var position: UInt64 = 0
    /// One past the last byte written.
    fileprivate var end: UInt64 = 0
    private var writebackStart: UInt64 = 0
    /// Whether writeback starts as the archive is written (off for an archive that is read at
    /// once and removed, never synced).
    package var startsWriteback = true
    /// Where the archive's bytes go instead of the file, when set (an encrypted package's
    /// payload, sealed as it is written).
    package var sink: (any ArchiveSink)?

    static let bufferSize = 1 << 20
    static let writebackStep: UInt64 = 8 << 20

    /// The file's descriptor, for a ``sink`` that writes the file itself (this owns it).
    package var rawDescriptor: Int32 { descriptor.rawValue }

    /// Takes ownership of `file` (open for writing; closed when this is released).
    package init(file: consuming OwnedDescriptor, path: String) {
        self.file = file
        self.path = path
        buffer = .allocate(byteCount: Self.bufferSize, alignment: 4096)
        zip_error_init(&zipError)
    }

    deinit {
        buffer.deallocate()
        zip_error_fini(&zipError)
    }

    /// Empties the file and starts at offset 0.
    fileprivate func begin() throws {
        guard ftruncate(descriptor.rawValue, 0) == 0 else { throw fail(SignetError.posix(errno, "cannot write the archive", path: path, call: "ftruncate")) }
        (bufferOffset, buffered, position, end, writebackStart) = (0, 0, 0, 0, 0)
        try sink?.resumed(at: 0)
    }

    fileprivate func write(_ bytes: UnsafeRawBufferPointer) throws {
        if buffered > 0, position != bufferOffset + UInt64(buffered) { try flush() }
        if buffered == 0 { bufferOffset = position }
        var rest = bytes
        while !rest.isEmpty {
            let n = min(rest.count, Self.bufferSize - buffered)
            (buffer.baseAddress! + buffered).copyMemory(from: rest.baseAddress!, byteCount: n)
            buffered += n
            rest = UnsafeRawBufferPointer(rebasing: rest[n...])
            if buffered == Self.bufferSize { try flush() }
        }
        position += UInt64(bytes.count)
        end = max(end, position)
    }

    /// Writes out the buffer and, every `writebackStep` bytes of progress, starts writeback.
    fileprivate func flush() throws {
        if let sink {
            try sink.write(UnsafeRawBufferPointer(rebasing: buffer[0..<buffered]), at: bufferOffset)
            bufferOffset += UInt64(buffered)
            buffered = 0
            return
        }
        do {
            try descriptor.write(all: UnsafeRawBufferPointer(rebasing: buffer[0..<buffered]), at: Int64(bufferOffset))
        } catch {
            throw fail(SignetError.posix(error, "cannot write the archive", path: path))
        }
        let reached = bufferOffset + UInt64(buffered)
        bufferOffset = reached
        buffered = 0
        if startsWriteback, reached >= writebackStart + Self.writebackStep {
            // Best effort: a filesystem that cannot do it still gets the final fsync.
            _ = signet_start_writeback(descriptor.rawValue, Int64(writebackStart), Int64(reached - writebackStart))
            writebackStart = reached
        }
    }

    /// Flushes everything and makes it durable, with the package's permissions.
    package func sync() throws {
        try flush()
        do {
            try descriptor.sync()
            _ = try systemCall("fchmod") { fchmod(descriptor.rawValue, 0o644) }
        } catch {
            throw SignetError.posix(error, "cannot flush the new package", path: path)
        }
    }

    fileprivate func fail(_ error: SignetError) -> SignetError {
        if failure == nil { failure = error }
        zip_error_set(&zipError, ZIP_ER_WRITE, 0)
        return error
    }
}

private let writableCommands = zipSourceCommands([
    ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
    ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS, ZIP_SOURCE_BEGIN_WRITE, ZIP_SOURCE_COMMIT_WRITE,
    ZIP_SOURCE_ROLLBACK_WRITE, ZIP_SOURCE_WRITE, ZIP_SOURCE_SEEK_WRITE, ZIP_SOURCE_TELL_WRITE, ZIP_SOURCE_REMOVE
])

/// libzip's callback for an ``ArchiveOutput``. The archive is always new (created and
/// truncated), so libzip never reads it back: the reading commands are refused.
let archiveOutputCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, zip_uint64_t, zip_source_cmd_t) -> zip_int64_t = {
    context, data, length, command in
    guard let context else { return -1 }
    let output = Unmanaged<ArchiveOutput>.fromOpaque(context).takeUnretainedValue()
    do {
        switch command {
        case ZIP_SOURCE_STAT:
            // "No such file": libzip then starts a new, empty archive.
            zip_error_set(&output.zipError, ZIP_ER_READ, ENOENT)
            return -1
        case ZIP_SOURCE_BEGIN_WRITE:
            try output.begin()
            return 0
        case ZIP_SOURCE_WRITE:
            guard let data else { return -1 }
            try output.write(UnsafeRawBufferPointer(start: data, count: Int(length)))
            return Int64(length)
        case ZIP_SOURCE_SEEK_WRITE:
            guard let data, length >= MemoryLayout<zip_source_args_seek_t>.size else {
                zip_error_set(&output.zipError, ZIP_ER_INVAL, 0)
                return -1
            }
            let seek = data.assumingMemoryBound(to: zip_source_args_seek_t.self).pointee
            let base: Int64 =
                switch seek.whence {
                case SEEK_SET: 0
                case SEEK_CUR: Int64(output.position)
                case SEEK_END: Int64(output.end)
                default: -1
                }
            guard base >= 0, base + seek.offset >= 0 else {
                zip_error_set(&output.zipError, ZIP_ER_INVAL, 0)
                return -1
            }
            let returning = output.position != output.end && UInt64(base + seek.offset) == output.end
            output.position = UInt64(base + seek.offset)
            if returning, let sink = output.sink {
                // Back at the end after rewriting a local header: what was rewritten is final.
                try output.flush()
                try sink.resumed(at: output.end)
            }
            return 0
        case ZIP_SOURCE_TELL_WRITE:
            return Int64(output.position)
        case ZIP_SOURCE_COMMIT_WRITE:
            try output.flush()
            return 0
        case ZIP_SOURCE_ROLLBACK_WRITE, ZIP_SOURCE_REMOVE:
            // The caller owns the temporary file and removes it when the pack fails.
            return 0
        default:
            return answerCommonZipSourceCommand(command, of: ArchiveOutput.self, context: context, data: data, length: length, supported: writableCommands)
        }
    } catch {
        return -1
    }
}
