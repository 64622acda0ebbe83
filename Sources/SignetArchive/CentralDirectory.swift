#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// A zip's structure, read and cross-checked by Signet itself before libzip opens the file.
///
/// Two readers of one archive must never disagree about what is in it, and an archive is read
/// by Signet, by libzip, and by whatever tool a person uses to look inside. So every field a zip
/// states twice must agree: the end record and its ZIP64 twin, each central record and its local
/// header (name, flags, method, CRC, sizes, ZIP64 extras), and a data descriptor where there is
/// one. The file must be exactly the entries one after another from byte 0, then the central
/// directory, then the end records: no gaps, overlaps, prepended or hidden data. Names are read
/// by their length (libzip 1.7 rewrites an embedded NUL to a space), and a second name in an
/// Info-ZIP Unicode path field, which other tools would show instead, is refused. What the data
/// itself holds (CRC, uncompressed size) is checked as it is read (``ZipReader/read``).
///
/// The entry count is checked against the caller's limit before any per-entry memory is spent,
/// and the directory is streamed, so a hostile archive costs bounded memory and time.
package enum CentralDirectory {
    /// Largest central directory Signet reads.
    static let maximumSize: UInt64 = 256 << 20

    /// The compression method number of deflate (APPNOTE 4.4.5).
    package static let deflateMethod: UInt16 = 8

    /// General-purpose flag bits Signet accepts: 0 (encrypted; refused by the package policy with
    /// its own message), 1-2 (deflate options), 3 (data descriptor), 11 (UTF-8 names).
    static let acceptedFlags: UInt16 = 0b0000_1000_0000_1111

    /// One central-directory record, cross-checked with its local header.
    package struct Record {
        /// Where the name, exactly as stored, is in ``Directory/names``, and its length.
        let nameStart: UInt32
        let nameLength: UInt16
        package let flags: UInt16
        package let method: UInt16
        package let crc: UInt32
        package let compressedSize: UInt64
        package let size: UInt64
        /// Where the entry's local header starts.
        package let localHeaderOffset: UInt64
        /// Where this record starts, from the start of the central directory (at most 256 MiB).
        let recordOffset: UInt32
        /// The UNIX file type and permissions, if made on a UNIX system.
        let unixMode: UInt32?

        var isEncrypted: Bool { flags & 1 != 0 }
    }

    /// When local headers are checked against their central records.
    package enum LocalHeaders {
        /// All of them, before the directory is returned (a file on disk: each is a small read).
        case upFront
        /// Each when its entry is first read (``ZipReader`` calls ``checkLocalHeader(of:in:file:archive:)``):
        /// for a package read with range requests, where reading every header would fetch the
        /// whole file. The entries' offsets must still rise from byte 0 to the directory, each
        /// span large enough for its header and data, so entries cannot overlap.
        case deferred
    }

    /// Every record, in directory order, after the whole layout was checked. Throws
    /// `.malformedArchive` for any disagreement, and for more than `maximumEntries` entries.
    package static func records(
        of file: any ArchiveInput, archive: String, maximumEntries: Int = Int.max, limitFlag: String = "--max-files",
        localHeaders: LocalHeaders = .upFront
    ) throws -> Directory {
        var reader = Reader(file: file, archive: archive)
        let end = try reader.endOfCentralDirectory()
        guard end.count <= UInt64(maximumEntries) else {
            throw reader.malformed("it has \(end.count) entries, more than the \(maximumEntries) a package within the limits can have (\(limitFlag))")
        }
        var directory = Directory(offset: end.directoryOffset, size: end.directorySize)
        directory.reserve(Int(end.count))
        var stream = try reader.stream(from: end.directoryOffset, count: end.directorySize)
        for index in 0..<end.count {
            // The directory is at most 256 MiB (checked with the end record): fits UInt32.
            let at = UInt32(end.directorySize - stream.remaining - UInt64(stream.buffer.count - stream.used))
            let (record, name) = try reader.centralRecord(&stream, index: index, nameStart: directory.nextNameStart, recordOffset: at)
            directory.append(record, name: name)
        }
        guard stream.remaining == 0, stream.used == stream.buffer.count else {
            throw reader.malformed("its central directory holds more than its \(end.count) records")
        }
        switch localHeaders {
        case .upFront:
            // Every header in offset order, each a small read: through one read-ahead block.
            try Reader(file: ReadAheadInput.over(file), archive: archive).checkLocalHeaders(directory, directoryOffset: end.directoryOffset)
        case .deferred: directory.bound(by: try reader.spanEnds(directory, directoryOffset: end.directoryOffset))
        }
        return directory
    }

    /// Checks the local header (and data descriptor) of the record at `position` of a directory
    /// read with ``LocalHeaders/deferred``: as the up-front check does, and the entry must end
    /// exactly where the next one starts.
    /// Returns where the entry's data starts (nil for a record without a span).
    @discardableResult
    static func checkLocalHeader(of position: Int, in directory: Directory, file: any ArchiveInput, archive: String) throws -> UInt64? {
        guard let span = directory.span(ofRecord: position) else { return nil }
        let reader = Reader(file: file, archive: archive)
        let (data, end) = try reader.checkLocalHeader(directory[position], in: directory, limit: span.upperBound)
        guard end == span.upperBound else {
            let shown = directory.shownName(of: directory[position])
            throw reader.malformed(
                end < span.upperBound
                    ? "there are \(span.upperBound - end) bytes after the entry '\(shown)' that belong to no entry"
                    : "the entry '\(shown)' runs into the one after it")
        }
        return data
    }

    /// The end of central directory, resolved through ZIP64 where used.
    struct End {
        let count: UInt64
        let directorySize: UInt64
        let directoryOffset: UInt64
    }

    /// Little-endian field reads with bounds and overflow checks; every failure is `.malformedArchive`.
    struct Reader {
        let file: any ArchiveInput
        let archive: String
        let size: UInt64

        init(file: any ArchiveInput, archive: String) {
            self.file = file
            self.archive = archive
            self.size = UInt64(max(0, file.size))
        }

        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedArchive, "'\(archive)' is not a valid zip archive: \(reason); it may be truncated, corrupt or crafted", path: archive)
        }

        /// `a + b`, or a malformed-archive error when it overflows.
        func sum(_ a: UInt64, _ b: UInt64) throws -> UInt64 {
            let (value, overflow) = a.addingReportingOverflow(b)
            guard !overflow else { throw malformed("an offset or size overflows") }
            return value
        }

        func read(_ offset: UInt64, _ count: Int) throws -> [UInt8] {
            guard try sum(offset, UInt64(count)) <= size else { throw malformed("a record points past the end of the file") }
            var bytes = [UInt8](repeating: 0, count: count)
            let done = try bytes.withUnsafeMutableBytes { try file.read(fullyAt: Int64(offset), into: $0) }
            guard done == count else { throw malformed("the file ended while it was read") }
            return bytes
        }

        /// The end record (the one whose comment ends exactly at the end of the file), and its
        /// ZIP64 record and locator when present, which must agree with it.
        mutating func endOfCentralDirectory() throws -> End {
            let tailLength = Int(min(size, 22 + 65535))
            guard tailLength >= 22 else { throw malformed("it has no end-of-central-directory record (truncated?)") }
            let tailStart = size - UInt64(tailLength)
            let tail = try read(tailStart, tailLength)
            var at = tailLength - 22
            // Comments may hold bytes that look like an end record: only one ending at EOF counts.
            while at >= 0 {
                if tail[at] == 0x50, tail[at + 1] == 0x4b, tail[at + 2] == 5, tail[at + 3] == 6,
                    at + 22 + Int(u16(tail, at + 20)) == tailLength
                {
                    break
                }
                at -= 1
            }
            guard at >= 0 else { throw malformed("it has no end-of-central-directory record (truncated?)") }
            let endOffset = tailStart + UInt64(at)
            guard u16(tail, at + 4) == 0, u16(tail, at + 6) == 0 else { throw malformed("it spans several disks") }
            let onDisk = u16(tail, at + 8), total = u16(tail, at + 10)
            guard onDisk == total else { throw malformed("its end record counts \(onDisk) entries on this disk and \(total) in all") }
            var end = End(count: total, directorySize: u32(tail, at + 12), directoryOffset: u32(tail, at + 16))
            var directoryEnd = endOffset
            // A ZIP64 locator directly before the end record: libzip and other readers use it,
            // so it must exist exactly when it is needed and agree with the classic fields.
            let needsZip64 = end.count == 0xffff || end.directorySize == 0xffff_ffff || end.directoryOffset == 0xffff_ffff
            let locator = endOffset >= 20 ? try read(endOffset - 20, 20) : []
            let hasLocator = locator.count == 20 && locator[0] == 0x50 && locator[1] == 0x4b && locator[2] == 6 && locator[3] == 7
            if needsZip64 || hasLocator {
                guard hasLocator else { throw malformed("its ZIP64 locator is missing") }
                guard u32(locator, 4) == 0, u32(locator, 16) == 1 else { throw malformed("its ZIP64 locator names other disks") }
                let recordOffset = u64(locator, 8)
                let head = try read(recordOffset, 56)
                guard head[0] == 0x50, head[1] == 0x4b, head[2] == 6, head[3] == 6 else { throw malformed("its ZIP64 end record is missing") }
                // The record (12 bytes + its stated size) must end where the locator starts.
                guard u64(head, 4) >= 44, try sum(try sum(recordOffset, 12), u64(head, 4)) == endOffset - 20 else {
                    throw malformed("its ZIP64 end record does not end where its locator starts")
                }
                guard u32(head, 16) == 0, u32(head, 20) == 0 else { throw malformed("it spans several disks") }
                guard u64(head, 24) == u64(head, 32) else { throw malformed("its ZIP64 end record counts entries twice, differently") }
                let zip64 = End(count: u64(head, 32), directorySize: u64(head, 40), directoryOffset: u64(head, 48))
                guard (end.count == 0xffff || end.count == zip64.count),
                    (end.directorySize == 0xffff_ffff || end.directorySize == zip64.directorySize),
                    (end.directoryOffset == 0xffff_ffff || end.directoryOffset == zip64.directoryOffset)
                else {
                    throw malformed("its end record and its ZIP64 end record disagree")
                }
                end = zip64
                directoryEnd = recordOffset
            }
            guard end.directorySize <= CentralDirectory.maximumSize else {
                throw malformed("its central directory is larger than \(CentralDirectory.maximumSize) bytes")
            }
            guard try sum(end.directoryOffset, end.directorySize) == directoryEnd else {
                throw malformed("its central directory does not end where its end record starts")
            }
            guard end.count <= end.directorySize / 46 else {
                throw malformed("it claims \(end.count) entries, more than its central directory can hold")
            }
            return end
        }

        /// A buffered sequential view of `count` bytes from `offset`.
        func stream(from offset: UInt64, count: UInt64) throws -> Stream {
            guard try sum(offset, count) <= size else { throw malformed("its central directory lies past the end of the file") }
            return Stream(next: offset, remaining: count)
        }

        struct Stream {
            var next: UInt64
            var remaining: UInt64
            var buffer: [UInt8] = []
            var used = 0
        }

        /// The next `count` bytes of `stream`.
        func take(_ stream: inout Stream, _ count: Int) throws -> ArraySlice<UInt8> {
            guard UInt64(count) <= stream.remaining + UInt64(stream.buffer.count - stream.used) else {
                throw malformed("its central directory is damaged (a record runs past its end)")
            }
            if stream.buffer.count - stream.used < count {
                let kept = Array(stream.buffer[stream.used...])
                let wanted = Int(min(stream.remaining, UInt64(max(count - kept.count, 1 << 20))))
                stream.buffer = kept + (try read(stream.next, wanted))
                stream.used = 0
                stream.next += UInt64(wanted)
                stream.remaining -= UInt64(wanted)
            }
            defer { stream.used += count }
            return stream.buffer[stream.used..<(stream.used + count)]
        }

        /// Extra fields: each header and its data within the extra area, which they fill exactly.
        /// Returns the ZIP64 field's data, if any.
        func extraFields(_ extra: [UInt8], entry: String) throws -> [UInt8]? {
            var at = 0
            var zip64: [UInt8]? = nil
            while at < extra.count {
                guard at + 4 <= extra.count else { throw malformed("the extra field of '\(entry)' is damaged") }
                let id = u16(extra, at), length = Int(u16(extra, at + 2))
                guard at + 4 + length <= extra.count else { throw malformed("the extra field of '\(entry)' is damaged") }
                switch id {
                case 0x0001:
                    guard zip64 == nil else { throw malformed("'\(entry)' has two ZIP64 extra fields") }
                    zip64 = Array(extra[(at + 4)..<(at + 4 + length)])
                case 0x7075:
                    throw malformed(
                        "'\(entry)' carries a second name in an Info-ZIP Unicode path field, which other tools would show instead of the one Signet checks")
                default: break
                }
                at += 4 + length
            }
            return zip64
        }

        /// Resolves the 0xffffffff fields of a record from its ZIP64 extra, in APPNOTE order.
        func resolveZip64(_ zip64: [UInt8]?, size: inout UInt64, compressedSize: inout UInt64, offset: inout UInt64?, entry: String) throws {
            guard size == 0xffff_ffff || compressedSize == 0xffff_ffff || offset == 0xffff_ffff else { return }
            guard let zip64 else { throw malformed("'\(entry)' lacks its ZIP64 sizes") }
            var at = 0
            func next() throws -> UInt64 {
                guard at + 8 <= zip64.count else { throw malformed("the ZIP64 sizes of '\(entry)' are truncated") }
                defer { at += 8 }
                return u64(zip64, at)
            }
            if size == 0xffff_ffff { size = try next() }
            if compressedSize == 0xffff_ffff { compressedSize = try next() }
            if offset == 0xffff_ffff { offset = try next() }
        }

        /// The next record, its name to be stored at `nameStart`, and the name.
        func centralRecord(_ stream: inout Stream, index: UInt64, nameStart: UInt32, recordOffset: UInt32) throws -> (Record, name: ArraySlice<UInt8>) {
            let fixed = Array(try take(&stream, 46))
            guard fixed[0] == 0x50, fixed[1] == 0x4b, fixed[2] == 1, fixed[3] == 2 else {
                throw malformed("its central directory is damaged (record \(index) has no signature)")
            }
            let name = ArraySlice(try take(&stream, Int(u16(fixed, 28))))
            let extra = Array(try take(&stream, Int(u16(fixed, 30))))
            _ = try take(&stream, Int(u16(fixed, 32)))
            let shown = String(decoding: name, as: UTF8.self)
            let flags = UInt16(u16(fixed, 8))
            guard flags & ~CentralDirectory.acceptedFlags == 0 else {
                throw malformed("'\(shown)' uses general-purpose flags 0x\(String(flags, radix: 16)) (strong encryption, masked headers or reserved bits)")
            }
            let disk = u16(fixed, 34)
            var size = u32(fixed, 24), compressedSize = u32(fixed, 20)
            var offset: UInt64? = u32(fixed, 42)
            try resolveZip64(try extraFields(extra, entry: shown), size: &size, compressedSize: &compressedSize, offset: &offset, entry: shown)
            guard disk == 0 else { throw malformed("'\(shown)' starts on another disk") }
            let madeBy = fixed[5]
            return (
                Record(
                    nameStart: nameStart, nameLength: UInt16(name.count), flags: flags, method: UInt16(u16(fixed, 10)),
                    crc: UInt32(u32(fixed, 16)), compressedSize: compressedSize, size: size, localHeaderOffset: offset!, recordOffset: recordOffset,
                    unixMode: madeBy == 3 ? UInt32(u32(fixed, 38) >> 16) : nil), name
            )
        }

        /// For ``LocalHeaders/deferred``: the entries sorted by offset must start at byte 0 and
        /// rise, each leaving room for at least its header, name and data before the next (or
        /// the directory); returns where each must end, by record.
        func spanEnds(_ records: Directory, directoryOffset: UInt64) throws -> [UInt64] {
            let inOrder = zip(records.records, records.records.dropFirst()).allSatisfy { $0.localHeaderOffset < $1.localHeaderOffset }
            let order = inOrder ? Array(records.indices) : records.indices.sorted { records[$0].localHeaderOffset < records[$1].localHeaderOffset }
            var ends = [UInt64](repeating: 0, count: records.count)
            var expected: UInt64 = 0
            for (rank, index) in order.enumerated() {
                let record = records[index]
                let shown = records.shownName(of: record)
                if rank == 0, record.localHeaderOffset != 0 {
                    throw malformed("there are \(record.localHeaderOffset) bytes before the entry '\(shown)' that belong to no entry")
                }
                guard record.localHeaderOffset >= expected else { throw malformed("the entry '\(shown)' overlaps the one before it") }
                let next = rank + 1 < order.count ? records[order[rank + 1]].localHeaderOffset : directoryOffset
                let least = try sum(try sum(record.localHeaderOffset, UInt64(30 + Int(record.nameLength))), record.compressedSize)
                guard least <= next else {
                    throw malformed(
                        rank + 1 < order.count ? "the entry '\(shown)' overlaps the one after it" : "the last entry runs into the central directory")
                }
                ends[index] = next
                expected = least
            }
            return ends
        }

        /// Each local header against its central record, each data descriptor too, and the
        /// entries laid end to end from byte 0 up to the central directory.
        func checkLocalHeaders(_ records: Directory, directoryOffset: UInt64) throws {
            // Usually already in offset order: then no index array is sorted.
            let inOrder = zip(records.records, records.records.dropFirst()).allSatisfy { $0.localHeaderOffset < $1.localHeaderOffset }
            let order = inOrder ? Array(records.indices) : records.indices.sorted { records[$0].localHeaderOffset < records[$1].localHeaderOffset }
            var expected: UInt64 = 0
            for index in order {
                let record = records[index]
                let shown = records.shownName(of: record)
                guard record.localHeaderOffset == expected else {
                    throw malformed(
                        record.localHeaderOffset < expected
                            ? "the entry '\(shown)' overlaps the one before it"
                            : "there are \(record.localHeaderOffset - expected) bytes before the entry '\(shown)' that belong to no entry")
                }
                expected = try checkLocalHeader(record, in: records, limit: directoryOffset).end
            }
            guard expected == directoryOffset else {
                throw malformed(
                    expected < directoryOffset
                        ? "there are \(directoryOffset - expected) bytes before the central directory that belong to no entry"
                        : "the last entry runs into the central directory")
            }
        }

        /// One entry's local header against its central record, and its data descriptor;
        /// returns where the entry's data starts and where the entry ends. Nothing is read at or
        /// past `limit` but a descriptor's probe up to it.
        func checkLocalHeader(_ record: Record, in records: Directory, limit: UInt64) throws -> (data: UInt64, end: UInt64) {
            let shown = records.shownName(of: record)
            let header = try read(record.localHeaderOffset, 30)
            guard header[0] == 0x50, header[1] == 0x4b, header[2] == 3, header[3] == 4 else {
                throw malformed("the local header of '\(shown)' is missing")
            }
            let nameLength = Int(u16(header, 26)), extraLength = Int(u16(header, 28))
            let variable = try read(record.localHeaderOffset + 30, nameLength + extraLength)
            guard variable.prefix(nameLength).elementsEqual(records.name(of: record)) else {
                throw malformed("the local header of '\(shown)' names another file")
            }
            guard UInt16(u16(header, 6)) == record.flags else {
                throw malformed("the local header and the central directory of '\(shown)' disagree on its flags")
            }
            guard UInt16(u16(header, 8)) == record.method else {
                throw malformed("the local header and the central directory of '\(shown)' disagree on its compression method")
            }
            let localZip64 = try extraFields(Array(variable.dropFirst(nameLength)), entry: shown)
            var size = u32(header, 22), compressedSize = u32(header, 18)
            var noOffset: UInt64? = nil
            try resolveZip64(localZip64, size: &size, compressedSize: &compressedSize, offset: &noOffset, entry: shown)
            let descriptor = record.flags & 0x8 != 0
            if descriptor {
                // Sizes and CRC follow the data; the header may leave them zero, or state them.
                guard (u32(header, 14) == 0 || UInt32(u32(header, 14)) == record.crc),
                    (size == 0 || size == record.size), (compressedSize == 0 || compressedSize == record.compressedSize)
                else {
                    throw malformed("the local header and the central directory of '\(shown)' disagree on its CRC or sizes")
                }
            } else {
                guard UInt32(u32(header, 14)) == record.crc, size == record.size, compressedSize == record.compressedSize else {
                    throw malformed("the local header and the central directory of '\(shown)' disagree on its CRC or sizes")
                }
            }
            if record.method == 0 {
                guard record.compressedSize == record.size else {
                    throw malformed("the stored entry '\(shown)' has \(record.compressedSize) bytes of data but claims \(record.size)")
                }
            }
            let data = try sum(record.localHeaderOffset, UInt64(30 + nameLength + extraLength))
            var end = try sum(data, record.compressedSize)
            if descriptor {
                // Optional signature, CRC, then both sizes in 8 bytes with ZIP64, else 4.
                let wide = localZip64 != nil
                let plain = wide ? 20 : 12
                let probe = try read(end, min(plain + 4, Int(min(UInt64(plain + 4), limit > end ? limit - end : 0))))
                let signed = probe.count >= 4 && probe[0] == 0x50 && probe[1] == 0x4b && probe[2] == 7 && probe[3] == 8
                let body = signed ? 4 : 0
                guard probe.count >= body + plain else { throw malformed("the data descriptor of '\(shown)' is missing") }
                let crc = UInt32(u32(probe, body))
                let described = wide ? (u64(probe, body + 4), u64(probe, body + 12)) : (u32(probe, body + 4), u32(probe, body + 8))
                guard crc == record.crc, described.0 == record.compressedSize, described.1 == record.size else {
                    throw malformed("the data descriptor and the central directory of '\(shown)' disagree on its CRC or sizes")
                }
                end = try sum(end, UInt64(body + plain))
            }
            return (data, end)
        }
    }
}

@inline(__always) private func u16<C: RandomAccessCollection>(_ b: C, _ at: Int) -> UInt64 where C.Element == UInt8, C.Index == Int {
    UInt64(b[b.startIndex + at]) | UInt64(b[b.startIndex + at + 1]) << 8
}
@inline(__always) private func u32<C: RandomAccessCollection>(_ b: C, _ at: Int) -> UInt64 where C.Element == UInt8, C.Index == Int {
    u16(b, at) | u16(b, at + 2) << 16
}
@inline(__always) private func u64<C: RandomAccessCollection>(_ b: C, _ at: Int) -> UInt64 where C.Element == UInt8, C.Index == Int {
    u32(b, at) | u32(b, at + 4) << 32
}
