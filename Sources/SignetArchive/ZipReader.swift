#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CZip
internal import CSignetZlib
import SignetCore

/// Reads a zip through libzip (read-only, with its consistency checks), a window of entries at a
/// time. Never writes.
///
/// The archive's structure is checked by ``CentralDirectory`` first, through one descriptor that
/// libzip then reads too, so both read the same file: a path cannot be swapped between the check
/// and the open. libzip's view of every entry must equal Signet's.
///
/// libzip keeps every entry of an archive it opens in memory (about 500 bytes each, 26 MiB for a
/// 50,000-file package), so it is never shown the whole archive: it opens a view of the file that
/// ends after ``windowSize`` central-directory records, followed by an end record for just those
/// (``WindowSource``). Every window is opened and checked once when the reader opens; afterwards
/// at most ``cachedWindows`` are open at a time, reopened as entries are read. Memory is bounded
/// by the window, not by the number of entries.
package final class ZipReader {
    /// One central-directory record; nothing here is trusted yet. Its name is ``rawName(of:)``.
    package struct Entry {
        let index: UInt64
        package let size: UInt64
        package let compressedSize: UInt64
        package let method: UInt16
        /// The CRC-32 its headers state.
        let crc: UInt32
        package let encrypted: Bool
        /// The UNIX file type and permissions, if the entry was made on a UNIX system.
        package let unixMode: UInt32?
    }

    /// Entries libzip sees at once.
    package static let windowSize = 256
    /// Windows kept open: a Signet package is read as two ascending streams (resources, then
    /// their signatures further on), with the manifest beside them.
    package static let cachedWindows = 3

    package let path: String
    /// The records as Signet read and cross-checked them, names in one buffer.
    package let directory: CentralDirectory.Directory
    private let file: any ArchiveInput
    /// Open windows, the most recently used last.
    private var windows: [Window] = []
    /// With deferred local headers: which entries' headers were checked (empty: all were, up front).
    private var headersChecked: [Bool] = []

    /// The file bytes of entry `position` (for a ranged read's plan); nil when unknown.
    package func span(of entry: Entry) -> Range<UInt64>? { directory.span(ofRecord: Int(entry.index)) }

    /// Opens `path`, refusing (before libzip spends memory on it) more than `maximumEntries`
    /// entries; `limitFlag` names the option that raises that limit. libzip's view of every
    /// entry is then checked against Signet's, one window at a time.
    package convenience init(path: String, maximumEntries: Int = Int.max, limitFlag: String = "--max-files") throws {
        // Only regular files: a FIFO or device would block or never end.
        try self.init(input: try InputFile.open(path, what: "package"), maximumEntries: maximumEntries, limitFlag: limitFlag)
    }

    /// Opens the package `input` holds (a file, or any other ``ArchiveInput``), with the same
    /// checks.
    ///
    /// With `localHeaders` ``CentralDirectory/LocalHeaders/deferred`` (a package read with range
    /// requests), each entry's local header is checked when the entry is first read, and libzip
    /// opens windows without its own pass over every local header: only the entries read are
    /// fetched.
    package init(
        input file: any ArchiveInput, maximumEntries: Int = Int.max, limitFlag: String = "--max-files",
        localHeaders: CentralDirectory.LocalHeaders = .upFront
    ) throws {
        let path = file.path
        directory = try CentralDirectory.records(of: file, archive: path, maximumEntries: maximumEntries, limitFlag: limitFlag, localHeaders: localHeaders)
        self.file = file
        self.path = path
        if case .deferred = localHeaders {
            headersChecked = [Bool](repeating: false, count: directory.count)
        }
        try file.directoryRead(directory)
        var first = 0
        repeat {
            remember(try openWindow(at: first))
            first += Self.windowSize
        } while first < directory.count
    }

    /// A libzip archive over records `first ..< first + count` (``WindowSource``).
    private final class Window {
        let first: Int
        let count: Int
        let archive: OpaquePointer
        /// What libzip reads (it holds it too): asked why a read failed.
        let source: WindowSource

        init(first: Int, count: Int, archive: OpaquePointer, source: WindowSource) {
            self.first = first
            self.count = count
            self.archive = archive
            self.source = source
        }

        deinit { zip_discard(archive) }

        func holds(_ position: Int) -> Bool { position >= first && position - first < count }
    }

    /// The records of the open windows, most recently used last (for tests).
    package var openWindows: [Range<Int>] { windows.map { $0.first..<($0.first + $0.count) } }

    private func remember(_ window: Window) {
        if windows.count >= Self.cachedWindows { windows.removeFirst() }
        windows.append(window)
    }

    /// The open window holding `position`, opened (and checked) if none does.
    private func window(holding position: Int) throws -> Window {
        if let at = windows.lastIndex(where: { $0.holds(position) }) {
            let window = windows[at]
            if at != windows.count - 1 { windows.remove(at: at); windows.append(window) }
            return window
        }
        let window = try openWindow(at: position - position % Self.windowSize)
        remember(window)
        return window
    }

    /// Opens the window of records from `first` in libzip and checks that libzip sees them as
    /// Signet does.
    private func openWindow(at first: Int) throws -> Window {
        let count = min(Self.windowSize, directory.count - first)
        let source = WindowSource(file: ReadAheadInput.over(file), directory: directory, first: first, count: count)
        let context = Unmanaged.passRetained(source).toOpaque()
        var error = zip_error_t()
        zip_error_init(&error)
        defer { zip_error_fini(&error) }
        guard let zipSource = zip_source_function_create(windowSourceCallback, context, &error) else {
            Unmanaged<WindowSource>.fromOpaque(context).release()
            throw SignetError(.io, "cannot read the package '\(path)': \(String(cString: zip_error_strerror(&error)))", path: path)
        }
        // libzip's ZIP_CHECKCONS reads every local header of the window: with deferred
        // headers, Signet checks each as its entry is read instead.
        let flags = headersChecked.isEmpty ? ZIP_RDONLY | ZIP_CHECKCONS : ZIP_RDONLY
        guard let archive = openZipArchive(zipSource, flags, &error) else {
            // Not taken by libzip: still ours (freeing it releases the context).
            zip_source_free(zipSource)
            if let failure = source.failure { throw failure }
            let code = zip_error_code_zip(&error)
            if code == ZIP_ER_OPEN || code == ZIP_ER_READ {
                throw SignetError(.io, "cannot read the package '\(path)': \(ZipWriter.describe(code: code))", path: path)
            }
            let reason =
                switch code {
                case ZIP_ER_EXISTS: "two entries have the same name"
                case ZIP_ER_INCONS: "its headers are inconsistent (local and central records disagree, or entries overlap)"
                case ZIP_ER_NOZIP: "it is not a zip archive, or it is truncated"
                default: ZipWriter.describe(code: code)
                }
            throw SignetError(.malformedArchive, "'\(path)' is not a valid zip archive: \(reason); it may be truncated, corrupt or crafted", path: path)
        }
        let window = Window(first: first, count: count, archive: archive, source: source)
        try agreeWithLibzip(window)
        return window
    }

    /// libzip must see the entries Signet checked: the same count, names, sizes, CRCs, methods
    /// and encryption.
    private func agreeWithLibzip(_ window: Window) throws {
        let count = zip_get_num_entries(window.archive, 0)
        guard count >= 0 else { throw failure(window, "cannot list the entries") }
        guard count == window.count else {
            throw SignetError(
                .malformedArchive,
                "'\(path)' is not a valid zip archive: libzip counts \(count) entries from entry \(window.first), its central directory \(window.count)",
                path: path)
        }
        for offset in 0..<window.count {
            let position = window.first + offset
            let record = directory[position]
            var info = zip_stat_t()
            guard zip_stat_index(window.archive, UInt64(offset), zip_flags_t(ZIP_FL_ENC_RAW), &info) == 0, let name = info.name else {
                throw failure(window, "entry \(position) is unreadable")
            }
            let libzipName = UnsafeRawBufferPointer(start: UnsafeRawPointer(name), count: strlen(name))
            // The same name, unless the stored one holds a NUL, which libzip 1.7 silently rewrites
            // (to a space); the policy then refuses the stored name.
            let stored = directory.name(of: record)
            guard stored.elementsEqual(libzipName) || stored.contains(0) else {
                throw SignetError(.malformedArchive, "'\(path)' is not a valid zip archive: entry \(position) has two different names", path: path)
            }
            guard info.size == record.size, info.comp_size == record.compressedSize, info.crc == record.crc, info.comp_method == record.method,
                (info.encryption_method != ZIP_EM_NONE) == record.isEncrypted
            else {
                throw SignetError(
                    .malformedArchive,
                    "'\(path)' is not a valid zip archive: libzip and Signet read different sizes, CRC, method or encryption for entry \(position)", path: path)
            }
        }
    }

    /// How many entries the archive holds.
    package var count: Int { directory.count }

    /// The entry at `position` in archive order.
    package func entry(at position: Int) -> Entry {
        let record = directory[position]
        return Entry(
            index: UInt64(position), size: record.size, compressedSize: record.compressedSize,
            method: record.method, crc: record.crc, encrypted: record.isEncrypted, unixMode: record.unixMode)
    }

    /// Where a stored entry's bytes are in the archive, once its local header agrees with the
    /// central directory (checked now if it was not): byte N of the entry is at the range's
    /// start + N. Nil for a deflated or encrypted entry.
    package func storedData(of entry: Entry) throws -> Range<UInt64>? {
        guard entry.method == 0, !entry.encrypted, entry.size == entry.compressedSize else { return nil }
        return try data(of: entry)
    }

    /// Where the entry's data (its compressed size of bytes) starts and ends, once its local
    /// header agrees with the central directory.
    private func data(of entry: Entry) throws -> Range<UInt64>? {
        let position = Int(entry.index)
        guard let start = try CentralDirectory.checkLocalHeader(of: position, in: directory, file: file, archive: path) else { return nil }
        if position < headersChecked.count { headersChecked[position] = true }
        let (end, overflow) = start.addingReportingOverflow(entry.compressedSize)
        guard !overflow, let span = span(of: entry), end <= span.upperBound else { return nil }
        return start..<end
    }

    /// Where a deflated entry's compressed bytes are in the archive, once its local header
    /// agrees with the central directory (as ``storedData(of:)``). Nil for another method or an
    /// encrypted entry.
    package func deflatedData(of entry: Entry) throws -> Range<UInt64>? {
        guard entry.method == 8, !entry.encrypted else { return nil }
        return try data(of: entry)
    }

    /// Reads `buffer.count` bytes of a stored entry from byte `offset` of its data, at
    /// `data` (its ``storedData(of:)``, checked once by the caller). False when the range is
    /// not inside the entry or the input ends first.
    package func read(stored data: Range<UInt64>, at offset: UInt64, into buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        let (end, overflow) = offset.addingReportingOverflow(UInt64(buffer.count))
        guard !overflow, end <= UInt64(data.count) else { return false }
        return try file.read(fullyAt: Int64(data.lowerBound + offset), into: buffer) == buffer.count
    }

    /// Every entry, in archive order.
    package func entries() -> [Entry] { (0..<count).map(entry(at:)) }

    /// The central-directory record `entry` was read from (its local header offset, method,
    /// sizes and CRC), for copying its data as it is.
    package func record(of entry: Entry) -> CentralDirectory.Record { directory[Int(entry.index)] }

    /// The entry's name exactly as stored (not trusted: any bytes).
    package func rawName(of entry: Entry) -> ArraySlice<UInt8> { directory.name(of: directory[Int(entry.index)]) }

    /// Streams an entry's uncompressed bytes to `body`. The entry must hold exactly the size its
    /// headers state, and at most `limit` bytes: a larger claim is refused before reading, and
    /// reading stops one byte past the claim, whatever the data would inflate to. A different
    /// amount of data, or a CRC that does not match (libzip checks it at the end), is
    /// `.malformedArchive`. Returns the size.
    @discardableResult
    package func read(_ entry: Entry, limit: UInt64, name: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> UInt64 {
        guard entry.size <= limit else {
            throw SignetError(
                .malformedArchive, "the entry '\(name)' in '\(path)' claims \(entry.size) bytes, more than the \(limit) allowed for it", path: path, entry: name
            )
        }
        let position = Int(entry.index)
        if position < headersChecked.count, !headersChecked[position] {
            try CentralDirectory.checkLocalHeader(of: position, in: directory, file: file, archive: path)
            headersChecked[position] = true
        }
        let window = try window(holding: position)
        if entry.method == Self.methodDeflate {
            return try withExtendedLifetime(window) { try inflate(entry, in: window, name: name, body) }
        }
        // The window must outlive the entry's handle (it owns the zip_t the handle reads).
        let total = try withExtendedLifetime(window) { () throws -> UInt64 in
            guard let file = zip_fopen_index(window.archive, entry.index - UInt64(window.first), 0) else {
                throw failure(window, "cannot open the entry '\(name)'", entry: name)
            }
            defer { zip_fclose(file) }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: InputFile.chunkSize, alignment: 64)
            defer { buffer.deallocate() }
            // entry.size <= limit, so one more byte than the claim is at most limit + 1 (saturated).
            let cap = entry.size == .max ? UInt64.max : entry.size + 1
            var total: UInt64 = 0
            while total < cap {
                let wanted = min(UInt64(buffer.count), cap - total)
                let n = zip_fread(file, buffer.baseAddress!, wanted)
                if n < 0 {
                    if let failure = window.source.failure { throw failure }
                    let message = zip_file_strerror(file).map { String(cString: $0) } ?? "read error"
                    throw SignetError(.malformedArchive, "the entry '\(name)' in '\(path)' is corrupt: \(message)", path: path, entry: name)
                }
                if n == 0 { break }
                total += UInt64(n)
                guard total <= entry.size else {
                    throw SignetError(
                        .malformedArchive, "the entry '\(name)' in '\(path)' holds more data than the \(entry.size) bytes its headers state", path: path,
                        entry: name)
                }
                try body(UnsafeRawBufferPointer(rebasing: buffer[0..<Int(n)]))
            }
            return total
        }
        guard total == entry.size else {
            throw SignetError(
                .malformedArchive, "the entry '\(name)' in '\(path)' holds \(total) bytes, not the \(entry.size) its headers state", path: path, entry: name)
        }
        return total
    }

    /// A deflated entry: its compressed bytes read raw through libzip and inflated here, so that
    /// the stream must end exactly at the entry's end (libzip's own inflate stops at the stream's
    /// end and ignores whatever follows it inside the entry's compressed size: bytes no other
    /// check sees). The inflated data must be exactly the stated size and match the stated CRC.
    private func inflate(_ entry: Entry, in window: Window, name: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> UInt64 {
        guard let file = zip_fopen_index(window.archive, entry.index - UInt64(window.first), zip_flags_t(ZIP_FL_COMPRESSED)) else {
            throw failure(window, "cannot open the entry '\(name)'", entry: name)
        }
        defer { zip_fclose(file) }
        guard let inflater = signet_inflater_new() else { throw SignetError(.crypto, "zlib could not start an inflate stream") }
        defer { signet_inflater_free(inflater) }
        func corrupt(_ reason: String) -> SignetError {
            SignetError(.malformedArchive, "the entry '\(name)' in '\(path)' is corrupt: \(reason)", path: path, entry: name)
        }
        let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 64)
        defer { input.deallocate() }
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: InputFile.chunkSize, alignment: 64)
        defer { output.deallocate() }
        var total: UInt64 = 0
        var crc: UInt = 0
        var ended = false
        while true {
            let n = zip_fread(file, input.baseAddress!, UInt64(input.count))
            if n < 0 {
                if let failure = window.source.failure { throw failure }
                throw corrupt(zip_file_strerror(file).map { String(cString: $0) } ?? "read error")
            }
            if n == 0 { break }
            guard !ended else { throw corrupt("bytes follow the end of its deflate stream inside the entry") }
            var offset = 0
            var full = false
            while offset < Int(n) || full {
                var consumed = 0, produced = 0
                let result = signet_inflate(
                    inflater, input.baseAddress!.assumingMemoryBound(to: UInt8.self) + offset, Int(n) - offset, &consumed,
                    output.baseAddress!.assumingMemoryBound(to: UInt8.self), output.count, &produced)
                guard result >= 0 else { throw corrupt("its data is not a valid deflate stream") }
                offset += consumed
                full = produced == output.count
                if produced > 0 {
                    total += UInt64(produced)
                    guard total <= entry.size else {
                        throw SignetError(
                            .malformedArchive, "the entry '\(name)' in '\(path)' holds more data than the \(entry.size) bytes its headers state", path: path,
                            entry: name)
                    }
                    crc = signet_crc32(crc, output.baseAddress!.assumingMemoryBound(to: UInt8.self), produced)
                    try body(UnsafeRawBufferPointer(rebasing: output[0..<produced]))
                }
                if result == 1 {
                    ended = true
                    guard offset == Int(n) else { throw corrupt("bytes follow the end of its deflate stream inside the entry") }
                    break
                }
                if consumed == 0 && produced == 0 { break } // needs more input
            }
        }
        guard ended else { throw corrupt("its deflate stream is cut short") }
        guard total == entry.size else {
            throw SignetError(
                .malformedArchive, "the entry '\(name)' in '\(path)' holds \(total) bytes, not the \(entry.size) its headers state", path: path, entry: name)
        }
        guard UInt32(truncatingIfNeeded: crc) == entry.crc else { throw corrupt("CRC error (its data does not match the CRC-32 its headers state)") }
        return total
    }

    /// Reads a small entry whole, refusing more than `limit` bytes.
    package func readAll(_ entry: Entry, limit: UInt64, name: String) throws -> [UInt8] {
        var bytes: [UInt8] = []
        // The claimed size, already checked against the limit: a large buffer is only address
        // space until the data fills it, and regrowing would hold two copies at once.
        bytes.reserveCapacity(Int(min(entry.size, limit)))
        try read(entry, limit: limit, name: name) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// Why libzip failed: the input's own error where reading it failed (a transport failure is
    /// never reported as a corrupt archive), else libzip's, as `.malformedArchive`.
    private func failure(_ window: Window, _ what: String, entry: String? = nil) -> any Error {
        if let failure = window.source.failure { return failure }
        let message = zip_get_error(window.archive).flatMap { zip_error_strerror($0) }.map { String(cString: $0) } ?? "unknown libzip error"
        return SignetError(.malformedArchive, "\(what) in '\(path)': \(message)", path: path, entry: entry)
    }

    package static let methodStore = UInt16(ZIP_CM_STORE)
    package static let methodDeflate = UInt16(ZIP_CM_DEFLATE)
}
