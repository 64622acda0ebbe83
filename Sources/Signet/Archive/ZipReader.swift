#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CZip

/// Owns a `zip_t` opened read-only (with libzip's consistency checks). Never writes.
final class ZipReader {
    /// One central-directory record, as libzip reports it; nothing here is trusted yet.
    struct Entry {
        let index: UInt64
        /// The name exactly as stored.
        let rawName: [UInt8]
        let size: UInt64
        let compressedSize: UInt64
        let method: UInt16
        let encrypted: Bool
        /// The UNIX file type and permissions, if the entry was made on a UNIX system.
        let unixMode: UInt32?
    }

    /// The libzip handle, for `zip_source_zip` (which needs it open until the destination closes).
    let archive: OpaquePointer
    let path: String
    /// Entry names as the central directory stores them (libzip rewrites an embedded NUL).
    private let rawNames: [[UInt8]]

    init(path: String) throws {
        // Only regular files: a FIFO or device would block or never end.
        let file = try InputFile.open(path, what: "package")
        var code: Int32 = 0
        guard let archive = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code) else {
            if code == ZIP_ER_OPEN || code == ZIP_ER_READ {
                throw SignetError(.io, "cannot read the package '\(path)': \(ZipWriter.describe(code: code))", path: path)
            }
            let reason = switch code {
            case ZIP_ER_EXISTS: "two entries have the same name"
            case ZIP_ER_INCONS: "its headers are inconsistent (local and central records disagree, or entries overlap)"
            case ZIP_ER_NOZIP: "it is not a zip archive, or it is truncated"
            default: ZipWriter.describe(code: code)
            }
            throw SignetError(.malformedArchive, "'\(path)' is not a valid zip archive: \(reason); it may be truncated, corrupt or crafted", path: path)
        }
        self.archive = archive
        self.path = path
        do {
            rawNames = try CentralDirectory.rawNames(of: file, archive: path)
        } catch {
            zip_discard(archive)
            throw error
        }
    }

    deinit { zip_discard(archive) }

    /// Every central-directory record, in archive order.
    func entries() throws -> [Entry] {
        let count = zip_get_num_entries(archive, 0)
        guard count >= 0 else { throw failure("cannot list the entries") }
        guard count == rawNames.count else {
            throw SignetError(.malformedArchive, "'\(path)' is not a valid zip archive: libzip counts \(count) entries, its central directory \(rawNames.count)", path: path)
        }
        var entries: [Entry] = []
        entries.reserveCapacity(Int(count))
        for index in 0..<UInt64(count) {
            var info = zip_stat_t()
            guard zip_stat_index(archive, index, zip_flags_t(ZIP_FL_ENC_RAW), &info) == 0, let name = info.name else {
                throw failure("entry \(index) is unreadable")
            }
            var opsys: UInt8 = 0
            var attributes: UInt32 = 0
            let unixMode: UInt32? = zip_file_get_external_attributes(archive, index, 0, &opsys, &attributes) == 0 && opsys == UInt8(ZIP_OPSYS_UNIX)
                ? attributes >> 16 : nil
            let libzipName = Array(UnsafeBufferPointer(start: UnsafeRawPointer(name).assumingMemoryBound(to: UInt8.self), count: strlen(name)))
            let rawName = rawNames[Int(index)]
            // The same name, unless the stored one holds a NUL, which libzip 1.7 silently rewrites
            // (to a space); the policy then refuses the stored name.
            guard rawName == libzipName || rawName.contains(0) else {
                throw SignetError(.malformedArchive, "'\(path)' is not a valid zip archive: entry \(index) has two different names", path: path)
            }
            entries.append(Entry(index: index, rawName: rawName, size: info.size, compressedSize: info.comp_size,
                                 method: info.comp_method, encrypted: info.encryption_method != ZIP_EM_NONE, unixMode: unixMode))
        }
        return entries
    }

    /// Streams an entry's uncompressed bytes to `body`, reading at most `limit + 1` bytes whatever
    /// the headers claim. Returns how many bytes were read (more than `limit` means "too long").
    @discardableResult
    func read(_ entry: Entry, limit: UInt64, name: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> UInt64 {
        guard let file = zip_fopen_index(archive, entry.index, 0) else {
            throw failure("cannot open the entry '\(name)'", entry: name)
        }
        defer { zip_fclose(file) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: InputFile.chunkSize, alignment: 64)
        defer { buffer.deallocate() }
        var total: UInt64 = 0
        while total <= limit {
            let wanted = UInt64(min(UInt64(buffer.count), limit + 1 - total))
            let n = zip_fread(file, buffer.baseAddress!, wanted)
            if n < 0 {
                let message = zip_file_strerror(file).map { String(cString: $0) } ?? "read error"
                throw SignetError(.malformedArchive, "the entry '\(name)' in '\(path)' is corrupt: \(message)", path: path, entry: name)
            }
            if n == 0 { break }
            total += UInt64(n)
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<Int(n)]))
        }
        return total
    }

    /// Reads a small entry whole, refusing more than `limit` bytes.
    func readAll(_ entry: Entry, limit: UInt64, name: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        let total = try read(entry, limit: limit, name: name) { bytes.append(contentsOf: $0) }
        guard total <= limit else {
            throw SignetError(.malformedArchive, "the entry '\(name)' in '\(path)' is larger than the \(limit) bytes allowed for it", path: path, entry: name)
        }
        return bytes
    }

    private func failure(_ what: String, entry: String? = nil) -> SignetError {
        let message = zip_get_error(archive).flatMap { zip_error_strerror($0) }.map { String(cString: $0) } ?? "unknown libzip error"
        return SignetError(.malformedArchive, "\(what) in '\(path)': \(message)", path: path, entry: entry)
    }

    static let methodStore = UInt16(ZIP_CM_STORE)
    static let methodDeflate = UInt16(ZIP_CM_DEFLATE)
}
