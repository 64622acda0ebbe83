#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CZip
import SignetCore

/// Where an entry's bytes come from while libzip writes the archive (at `zip_close`, entry by
/// entry, in the order they were added).
package protocol ZipEntrySource: AnyObject {
    /// The exact size the entry will have. Asked right before ``open()``.
    func size() throws -> UInt64
    /// Prepares for reading from the start.
    func open() throws
    /// Fills `buffer`; returns 0 at the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
    /// Reading is done.
    func close() throws
    /// For a source that delivers an entry's deflate stream as is: the stream's size and the
    /// CRC-32 of the data it inflates to. libzip then copies it without compressing again.
    var deflated: (compressedSize: UInt64, crc: UInt32)? { get }
}

extension ZipEntrySource {
    package var deflated: (compressedSize: UInt64, crc: UInt32)? { nil }
}

/// How an entry is stored.
package enum ZipCompression: Equatable {
    case store
    case deflate(level: UInt32)
}

/// Owns a `zip_t` opened for writing a new archive. Discards it unless ``close()`` succeeded.
package final class ZipWriter {
    private var archive: OpaquePointer?
    let path: String
    /// The output Signet writes through, if it is not a file libzip opened.
    private var output: ArchiveOutput?
    /// The first Swift error a source reported, so a failed `zip_close` can say what really failed.
    /// The first error a source threw, shared with every source's box.
    private let failures = SourceFailures()
    private var sourceFailure: Error? { failures.first }

    /// Writes a new archive into `output` (see ``ArchiveOutput``) instead of a file libzip opens.
    package init(writingTo output: ArchiveOutput) throws {
        var error = zip_error_t()
        zip_error_init(&error)
        defer { zip_error_fini(&error) }
        let context = Unmanaged.passRetained(output).toOpaque()
        guard let source = zip_source_function_create(archiveOutputCallback, context, &error) else {
            Unmanaged<ArchiveOutput>.fromOpaque(context).release()
            throw SignetError(.io, "cannot create the archive '\(output.path)': \(String(cString: zip_error_strerror(&error)))", path: output.path)
        }
        // From here the source owns the reference: freeing it (here, or with the archive) releases it.
        guard let archive = openZipArchive(source, ZIP_CREATE | ZIP_TRUNCATE, &error) else {
            zip_source_free(source)
            throw SignetError(.io, "cannot create the archive '\(output.path)': \(String(cString: zip_error_strerror(&error)))", path: output.path)
        }
        self.archive = archive
        self.path = output.path
        self.output = output
    }

    deinit {
        if let archive { zip_discard(archive) }
    }

    /// Adds a regular-file entry. The DOS timestamp is fixed (1980-01-01 00:00) for reproducible archives.
    package func add(_ name: String, source: ZipEntrySource, compression: ZipCompression, permissions: UInt32) throws {
        let archive = try open()
        let box = SourceBox(source, failures: failures)
        let context = Unmanaged.passRetained(box).toOpaque()
        guard let zipSource = zip_source_function(archive, zipSourceCallback, context) else {
            Unmanaged<SourceBox>.fromOpaque(context).release()
            throw failure("cannot add '\(name)'")
        }
        let entry = try addEntry(name, zipSource, permissions: permissions)
        let method: Int32, level: UInt32
        switch compression {
        case .store: (method, level) = (ZIP_CM_STORE, 0)
        case .deflate(let value): (method, level) = (ZIP_CM_DEFLATE, value)
        }
        guard zip_set_file_compression(archive, entry, method, level) == 0 else {
            throw failure("cannot set the compression of '\(name)'")
        }
    }

    private func open() throws -> OpaquePointer {
        guard let archive else { throw SignetError(.io, "the archive '\(path)' is already closed", path: path) }
        return archive
    }

    /// Adds `source` under `name` as a regular file with `permissions` and the fixed timestamp.
    /// A source that could not be added is freed here (it is still ours then).
    @discardableResult
    private func addEntry(_ name: String, _ source: OpaquePointer, permissions: UInt32) throws -> zip_uint64_t {
        let archive = try open()
        let index = zip_file_add(archive, name, source, zip_flags_t(ZIP_FL_ENC_UTF_8))
        guard index >= 0 else {
            zip_source_free(source)
            throw failure("cannot add '\(name)'")
        }
        let entry = zip_uint64_t(index)
        guard zip_file_set_mtime(archive, entry, Self.fixedDOSTime, 0) == 0,
            zip_file_set_external_attributes(archive, entry, 0, UInt8(ZIP_OPSYS_UNIX), (UInt32(S_IFREG) | permissions) << 16) == 0
        else {
            throw failure("cannot set the attributes of '\(name)'")
        }
        return entry
    }

    /// Writes the archive. libzip writes to a temporary file beside `path` and renames it.
    package func close() throws {
        guard let archive else { return }
        if zip_close(archive) != 0 {
            let error = sourceFailure ?? output?.failure ?? failure("cannot write the archive '\(path)'")
            // zip_close failed: the archive is still open and ours to discard (deinit does it).
            throw error
        }
        self.archive = nil
    }

    private func failure(_ what: String) -> SignetError {
        let message = archive.flatMap { zip_get_error($0) }.flatMap { zip_error_strerror($0) }.map { String(cString: $0) } ?? "unknown libzip error"
        return SignetError(.io, "\(what): \(message)", path: path)
    }

    static func describe(code: Int32) -> String {
        var error = zip_error_t()
        zip_error_init_with_code(&error, code)
        defer { zip_error_fini(&error) }
        return String(cString: zip_error_strerror(&error))
    }

    /// 1980-01-01 00:00 in local time: libzip converts with localtime(), so this gives the same DOS
    /// timestamp in every time zone (the earliest a zip can record).
    static let fixedDOSTime: time_t = {
        var parts = tm()
        parts.tm_year = 80
        parts.tm_mon = 0
        parts.tm_mday = 1
        parts.tm_isdst = -1
        return mktime(&parts)
    }()
}

/// Where sources report the first Swift error, for the writer to throw. A box holds it
/// strongly rather than the writer weakly: a weak reference costs every box (two per packed
/// file) a side-table allocation.
private final class SourceFailures {
    var first: Error?
}

/// Carries a Swift source through libzip's `void *` user data.
private final class SourceBox: ZipSourceContext {
    let source: ZipEntrySource
    let failures: SourceFailures
    var zipError = zip_error_t()

    init(_ source: ZipEntrySource, failures: SourceFailures) {
        self.source = source
        self.failures = failures
        zip_error_init(&zipError)
    }

    deinit { zip_error_fini(&zipError) }

    /// Records a failure for libzip (as a read error) and for the writer (the Swift error itself).
    func fail(_ failure: Error) -> Int64 {
        if failures.first == nil { failures.first = failure }
        zip_error_set(&zipError, ZIP_ER_READ, EIO)
        return -1
    }
}

private let supportedCommands = zipSourceCommands([
    ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
    ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, ZIP_SOURCE_SUPPORTS
])

/// libzip's callback for every source Signet adds.
private let zipSourceCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, zip_uint64_t, zip_source_cmd_t) -> zip_int64_t = {
    context, data, length, command in
    guard let context else { return -1 }
    let box = Unmanaged<SourceBox>.fromOpaque(context).takeUnretainedValue()
    do {
        switch command {
        case ZIP_SOURCE_OPEN:
            try box.source.open()
            return 0
        case ZIP_SOURCE_READ:
            guard let data else { return -1 }
            return Int64(try box.source.read(into: UnsafeMutableRawBufferPointer(start: data, count: Int(length))))
        case ZIP_SOURCE_CLOSE:
            try box.source.close()
            return 0
        case ZIP_SOURCE_STAT:
            guard let data, length >= MemoryLayout<zip_stat_t>.size else { return -1 }
            let stat = data.assumingMemoryBound(to: zip_stat_t.self)
            zip_stat_init(stat)
            stat.pointee.size = try box.source.size()
            stat.pointee.mtime = ZipWriter.fixedDOSTime
            stat.pointee.valid = zip_uint64_t(ZIP_STAT_SIZE | ZIP_STAT_MTIME)
            if let deflated = box.source.deflated {
                stat.pointee.comp_size = deflated.compressedSize
                stat.pointee.crc = deflated.crc
                stat.pointee.comp_method = zip_uint16_t(ZIP_CM_DEFLATE)
                stat.pointee.valid |= zip_uint64_t(ZIP_STAT_COMP_SIZE | ZIP_STAT_CRC | ZIP_STAT_COMP_METHOD)
            }
            return Int64(MemoryLayout<zip_stat_t>.size)
        default:
            return answerCommonZipSourceCommand(command, of: SourceBox.self, context: context, data: data, length: length, supported: supportedCommands)
        }
    } catch {
        return box.fail(error)
    }
}

/// Bytes made only when libzip asks for the entry (after every earlier entry was written), e.g.
/// a signature over a digest computed while an earlier entry was read.
package final class DeferredBytesSource: ZipEntrySource {
    private let make: () throws -> [UInt8]
    private var bytes: [UInt8]?
    private var offset = 0

    package init(_ make: @escaping () throws -> [UInt8]) {
        self.make = make
    }

    private func materialise() throws -> [UInt8] {
        if let bytes { return bytes }
        let made = try make()
        bytes = made
        return made
    }

    package func size() throws -> UInt64 { UInt64(try materialise().count) }

    package func open() throws {
        _ = try materialise()
        offset = 0
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let n = try materialise().copyBytes(from: offset, into: buffer)
        offset += n
        return n
    }

    package func close() throws {}
}

/// An entry's data copied as is from another zip archive (one Signet wrote, such as a deflate
/// worker's, or a package being re-signed), found through that archive's central directory
/// record: a deflate stream is handed to libzip already compressed, stored bytes as they are.
package final class CopiedDeflateSource: ZipEntrySource {
    private let file: InputFile
    private let localHeaderOffset: UInt64
    private let uncompressedSize: UInt64
    private let compressedSize: UInt64
    package let deflated: (compressedSize: UInt64, crc: UInt32)?
    private var dataStart: UInt64 = 0
    private var position: UInt64 = 0

    /// The entry whose local header is at `localHeaderOffset` in `file`, as its central
    /// directory record gives it; `stored`: its data is the file's bytes (method 0).
    package init(file: InputFile, localHeaderOffset: UInt64, compressedSize: UInt64, crc: UInt32, size: UInt64, stored: Bool = false) {
        self.file = file
        self.localHeaderOffset = localHeaderOffset
        uncompressedSize = size
        self.compressedSize = compressedSize
        deflated = stored ? nil : (compressedSize, crc)
    }

    package func size() throws -> UInt64 { uncompressedSize }

    package func open() throws {
        // The local header: 30 bytes, then the name and extra field, then the data.
        var header = [UInt8](repeating: 0, count: 30)
        try readFully(&header, at: localHeaderOffset)
        guard header[0] == 0x50, header[1] == 0x4b, header[2] == 3, header[3] == 4 else {
            throw SignetError(.io, "the temporary archive '\(file.path)' changed while the package was written", path: file.path)
        }
        let variable = UInt64(header[26]) | UInt64(header[27]) << 8 | UInt64(header[28]) << 16 | UInt64(header[29]) << 24
        dataStart = localHeaderOffset + 30 + (variable & 0xffff) + (variable >> 16)
        position = 0
    }

    package func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        let remaining = compressedSize - position
        let count = Int(min(UInt64(buffer.count), remaining))
        guard count > 0 else { return 0 }
        let n = try file.read(fullyAt: Int64(dataStart + position), into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count]))
        guard n == count else { throw SignetError(.io, "the temporary archive '\(file.path)' ended early", path: file.path) }
        position += UInt64(n)
        return n
    }

    package func close() throws {}

    private func readFully(_ bytes: inout [UInt8], at offset: UInt64) throws {
        let n = try bytes.withUnsafeMutableBytes { try file.read(fullyAt: Int64(offset), into: $0) }
        guard n == bytes.count else { throw SignetError(.io, "the temporary archive '\(file.path)' ended early", path: file.path) }
    }
}

extension Array where Element == UInt8 {
    /// Copies as much as fits into `buffer` from `offset` on; returns how many bytes (0 at the end).
    package func copyBytes(from offset: Int, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let n = Swift.min(buffer.count, count - offset)
        guard n > 0 else { return 0 }
        withUnsafeBytes { raw in buffer.baseAddress!.copyMemory(from: raw.baseAddress! + offset, byteCount: n) }
        return n
    }
}
