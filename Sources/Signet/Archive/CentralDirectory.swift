#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The raw entry names of a zip's central directory, read by Signet itself.
///
/// libzip hands names out as C strings and silently rewrites an embedded NUL (1.7 turns
/// "evil\0.txt" into "evil .txt"), so a forbidden name would reach Signet looking harmless.
/// Signet's entry policy must judge the name as stored, which is what other tools see, so it
/// reads each record's name by its length here.
enum CentralDirectory {
    /// Largest central directory Signet reads (about 6 MiB per 100,000 entries).
    static let maximumSize: UInt64 = 256 << 20

    static func rawNames(of file: InputFile, archive: String) throws -> [[UInt8]] {
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
        var names: [[UInt8]] = []
        names.reserveCapacity(Int(count))
        var at = 0
        for _ in 0..<count {
            guard at + 46 <= directory.count, directory[at] == 0x50, directory[at + 1] == 0x4b, directory[at + 2] == 1, directory[at + 3] == 2 else {
                throw malformed("its central directory is damaged")
            }
            let nameLength = Int(u16(directory, at + 28))
            let next = at + 46 + nameLength + Int(u16(directory, at + 30)) + Int(u16(directory, at + 32))
            guard next <= directory.count else { throw malformed("its central directory is damaged") }
            names.append(Array(directory[(at + 46)..<(at + 46 + nameLength)]))
            at = next
        }
        return names
    }
}
