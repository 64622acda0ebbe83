#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A zip's central directory, read by Signet itself: raw entry names, and where each entry's
/// data is.
///
/// libzip hands names out as C strings and silently rewrites an embedded NUL (1.7 turns
/// "evil\0.txt" into "evil .txt"), so a forbidden name would reach Signet looking harmless.
/// Signet's entry policy must judge the name as stored, which is what other tools see, so it
/// reads each record's name by its length here.
enum CentralDirectory {
    /// Largest central directory Signet reads (about 6 MiB per 100,000 entries).
    static let maximumSize: UInt64 = 256 << 20

    /// The compression method number of deflate (APPNOTE 4.4.5).
    static let deflateMethod: UInt16 = 8

    /// One central-directory record.
    struct Record {
        /// The name exactly as stored.
        let name: [UInt8]
        let method: UInt16
        let crc: UInt32
        let compressedSize: UInt64
        let size: UInt64
        /// Where the entry's local header starts.
        let localHeaderOffset: UInt64
    }

    static func rawNames(of file: InputFile, archive: String) throws -> [[UInt8]] {
        try records(of: file, archive: archive).map(\.name)
    }

    /// Every record, in directory order (ZIP64 sizes and offsets resolved).
    static func records(of file: InputFile, archive: String) throws -> [Record] {
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedArchive, "'\(archive)' is not a valid zip archive: \(reason)", path: archive)
        }
        let size = UInt64(file.size)
        func read(_ offset: UInt64, _ count: Int) throws -> [UInt8] {
            guard offset + UInt64(count) <= size else { throw malformed("a record points past the end of the file") }
            var bytes = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let n = bytes.withUnsafeMutableBytes { raw in
                    retryingOnEINTR { pread(file.descriptor, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
                }
                guard n > 0 else { throw SignetError.posix(errno, "cannot read", path: archive) }
                done += n
            }
            return bytes
        }
        func u16(_ b: [UInt8], _ at: Int) -> UInt64 { UInt64(b[at]) | UInt64(b[at + 1]) << 8 }
        func u32(_ b: [UInt8], _ at: Int) -> UInt64 { u16(b, at) | u16(b, at + 2) << 16 }
        func u64(_ b: [UInt8], _ at: Int) -> UInt64 { u32(b, at) | u32(b, at + 4) << 32 }

        // End of central directory record: the last "PK\5\6" with room for its 22 bytes.
        let tailLength = Int(min(size, 22 + 65535))
        let tailStart = size - UInt64(tailLength)
        let tail = try read(tailStart, tailLength)
        var end = tailLength - 22
        while end >= 0, !(tail[end] == 0x50 && tail[end + 1] == 0x4b && tail[end + 2] == 5 && tail[end + 3] == 6) { end -= 1 }
        guard end >= 0 else { throw malformed("it has no end-of-central-directory record (truncated?)") }
        var count = u16(tail, end + 10)
        var directorySize = u32(tail, end + 12)
        var directoryOffset = u32(tail, end + 16)
        if count == 0xffff || directorySize == 0xffff_ffff || directoryOffset == 0xffff_ffff {
            // ZIP64: the locator sits just before the classic record.
            let locatorAt = tailStart + UInt64(end)
            guard locatorAt >= 20 else { throw malformed("its ZIP64 locator is missing") }
            let locator = try read(locatorAt - 20, 20)
            guard locator[0] == 0x50, locator[1] == 0x4b, locator[2] == 6, locator[3] == 7 else { throw malformed("its ZIP64 locator is missing") }
            let record = try read(u64(locator, 8), 56)
            guard record[0] == 0x50, record[1] == 0x4b, record[2] == 6, record[3] == 6 else { throw malformed("its ZIP64 end record is missing") }
            count = u64(record, 32)
            directorySize = u64(record, 40)
            directoryOffset = u64(record, 48)
        }
        guard directorySize <= maximumSize else { throw malformed("its central directory is larger than \(maximumSize) bytes") }
        guard count <= directorySize / 46 + 1 else { throw malformed("it claims more entries than its central directory can hold") }
        let directory = try read(directoryOffset, Int(directorySize))
        var records: [Record] = []
        records.reserveCapacity(Int(count))
        var at = 0
        for _ in 0..<count {
            guard at + 46 <= directory.count, directory[at] == 0x50, directory[at + 1] == 0x4b, directory[at + 2] == 1, directory[at + 3] == 2 else {
                throw malformed("its central directory is damaged")
            }
            let nameLength = Int(u16(directory, at + 28))
            let extraLength = Int(u16(directory, at + 30))
            let next = at + 46 + nameLength + extraLength + Int(u16(directory, at + 32))
            guard next <= directory.count else { throw malformed("its central directory is damaged") }
            var size = u32(directory, at + 24), compressedSize = u32(directory, at + 20), offset = u32(directory, at + 42)
            if size == 0xffff_ffff || compressedSize == 0xffff_ffff || offset == 0xffff_ffff {
                // The ZIP64 extra field (0x0001) holds, in this order, the fields that overflowed.
                var field = at + 46 + nameLength
                let extraEnd = field + extraLength
                while field + 4 <= extraEnd, u16(directory, field) != 1 { field += 4 + Int(u16(directory, field + 2)) }
                guard field + 4 <= extraEnd else { throw malformed("an entry lacks its ZIP64 sizes") }
                var value = field + 4
                let valueEnd = min(extraEnd, value + Int(u16(directory, field + 2)))
                func next64() throws -> UInt64 {
                    guard value + 8 <= valueEnd else { throw malformed("an entry's ZIP64 sizes are truncated") }
                    defer { value += 8 }
                    return u64(directory, value)
                }
                if size == 0xffff_ffff { size = try next64() }
                if compressedSize == 0xffff_ffff { compressedSize = try next64() }
                if offset == 0xffff_ffff { offset = try next64() }
            }
            records.append(Record(name: Array(directory[(at + 46)..<(at + 46 + nameLength)]), method: UInt16(u16(directory, at + 10)),
                                  crc: UInt32(u32(directory, at + 16)), compressedSize: compressedSize, size: size, localHeaderOffset: offset))
            at = next
        }
        return records
    }
}
