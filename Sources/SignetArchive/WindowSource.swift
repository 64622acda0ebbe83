#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CZip
import SignetCore

/// What libzip reads when ``ZipReader`` opens a window of an archive: the file up to the end of
/// the window's last central-directory record, then an end of central directory for just the
/// window's records (always in ZIP64 form, so offsets past 4 GiB need no second layout):
///
///     [ file bytes 0 ..< end of record first+count-1 ][ ZIP64 end ][ ZIP64 locator ][ end ]
///
/// The records before the window are, to libzip, bytes between the last entry and the directory;
/// its consistency checks (`ZIP_CHECKCONS`) still compare each of the window's records with its
/// local header, and the directory must end exactly where the synthesized end records start.
/// Nothing is copied but the 98 bytes of end records.
final class WindowSource: ZipSourceContext {
    let file: any ArchiveInput
    /// How many bytes of the file are shown before the end records.
    let shown: UInt64
    let tail: [UInt8]
    private(set) var position: UInt64 = 0
    var zipError = zip_error_t()
    /// Why the last read failed, if it was the file (not libzip) that failed: the input's own
    /// error (a dropped link, a time-out, a cancel, a failing disk), which is what the caller
    /// must see instead of libzip's "read error" or "premature end of file".
    private(set) var failure: (any Error)?

    var size: UInt64 { shown + UInt64(tail.count) }

    init(file: any ArchiveInput, directory: CentralDirectory.Directory, first: Int, count: Int) {
        self.file = file
        let start = directory.fileOffset(ofRecord: first)
        shown = directory.fileOffset(ofRecord: first + count)
        var tail: [UInt8] = []
        tail.reserveCapacity(98)
        func put(_ value: UInt64, _ bytes: Int) {
            for byte in 0..<bytes { tail.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(byte)))) }
        }
        let records = UInt64(count), length = shown - start
        // ZIP64 end of central directory (APPNOTE 4.3.14): 56 bytes at `shown`.
        put(0x0606_4b50, 4); put(44, 8); put(45, 2); put(45, 2); put(0, 4); put(0, 4)
        put(records, 8); put(records, 8); put(length, 8); put(start, 8)
        // ZIP64 locator (4.3.15): the record above, one disk.
        put(0x0706_4b50, 4); put(0, 4); put(shown, 8); put(1, 4)
        // End of central directory (4.3.16); a window holds at most ZipReader.windowSize records.
        put(0x0605_4b50, 4); put(0, 2); put(0, 2); put(records, 2); put(records, 2)
        put(min(length, 0xffff_ffff), 4); put(min(start, 0xffff_ffff), 4); put(0, 2)
        self.tail = tail
        zip_error_init(&zipError)
    }

    deinit { zip_error_fini(&zipError) }

    func rewind() { position = 0 }

    func seek(_ data: UnsafeMutableRawPointer, _ length: UInt64) -> Int64 {
        let next = zip_source_seek_compute_offset(position, size, data, length, &zipError)
        guard next >= 0 else { return -1 }
        position = UInt64(next)
        return 0
    }

    /// Reads from the current position: the file's bytes, then the end records; 0 at the end.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int64 {
        guard position < size, buffer.count > 0 else { return 0 }
        var done = 0
        if position < shown {
            let wanted = Int(min(UInt64(buffer.count), shown - position))
            do {
                let got = try file.read(fullyAt: Int64(position), into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]))
                guard got == wanted else {
                    failure = SignetError(.malformedArchive, "'\(file.path)' became shorter while it was read", path: file.path)
                    zip_error_set(&zipError, ZIP_ER_READ, EIO)
                    return -1
                }
            } catch let thrown {
                failure = thrown
                zip_error_set(&zipError, ZIP_ER_READ, EIO)
                return -1
            }
            done = wanted
            position += UInt64(wanted)
        }
        if done < buffer.count, position >= shown, position < size {
            let from = Int(position - shown)
            let wanted = min(buffer.count - done, tail.count - from)
            tail.withUnsafeBytes { bytes in
                (buffer.baseAddress! + done).copyMemory(from: bytes.baseAddress! + from, byteCount: wanted)
            }
            done += wanted
            position += UInt64(wanted)
        }
        return Int64(done)
    }
}

private let windowCommands = zipSourceCommands([
    ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR,
    ZIP_SOURCE_FREE, ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS
])

/// libzip's callback for a ``WindowSource`` (the context is retained; `FREE` releases it).
let windowSourceCallback: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, zip_uint64_t, zip_source_cmd_t) -> zip_int64_t = {
    context, data, length, command in
    guard let context else { return -1 }
    let source = Unmanaged<WindowSource>.fromOpaque(context).takeUnretainedValue()
    switch command {
    case ZIP_SOURCE_OPEN:
        source.rewind()
        return 0
    case ZIP_SOURCE_READ:
        guard let data else { return -1 }
        return source.read(into: UnsafeMutableRawBufferPointer(start: data, count: Int(min(length, UInt64(Int32.max)))))
    case ZIP_SOURCE_CLOSE:
        return 0
    case ZIP_SOURCE_STAT:
        guard let data, length >= MemoryLayout<zip_stat_t>.size else { return -1 }
        let stat = data.assumingMemoryBound(to: zip_stat_t.self)
        zip_stat_init(stat)
        stat.pointee.size = source.size
        stat.pointee.valid = zip_uint64_t(ZIP_STAT_SIZE)
        return Int64(MemoryLayout<zip_stat_t>.size)
    case ZIP_SOURCE_SEEK:
        guard let data else { return -1 }
        return source.seek(data, length)
    case ZIP_SOURCE_TELL:
        return Int64(source.position)
    default:
        return answerCommonZipSourceCommand(command, of: WindowSource.self, context: context, data: data, length: length, supported: windowCommands)
    }
}
