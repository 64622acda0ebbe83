#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

extension CentralDirectory {
    /// The records of an archive, in directory order, and their names in one buffer (tens of
    /// thousands of names cost their bytes, not an allocation each).
    package struct Directory: RandomAccessCollection {
        private(set) var records: [Record] = []
        /// Every record's name, one after another.
        private(set) var names: [UInt8] = []
        /// Where the central directory starts in the file, and its size.
        package private(set) var offset: UInt64 = 0
        package private(set) var size: UInt64 = 0
        /// With local headers checked as entries are read (``LocalHeaders/deferred``): where each
        /// record's entry must end, which is where the next entry in the file starts (or the
        /// central directory). Empty when every header was checked up front.
        private(set) var ends: [UInt64] = []

        /// An empty directory of the central directory at `offset`, `size` bytes long.
        init(offset: UInt64, size: UInt64) {
            self.offset = offset
            self.size = size
        }

        /// Records where each entry must end (``LocalHeaders/deferred``), once, after the records.
        mutating func bound(by ends: [UInt64]) {
            self.ends = ends
        }

        /// The bytes of the file entry `position` occupies, local header, data and descriptor:
        /// known exactly only when the entries are laid end to end, which the up-front check
        /// proves and the deferred one bounds (a later read checks the rest).
        package func span(ofRecord position: Int) -> Range<UInt64>? {
            guard position < ends.count else { return nil }
            return records[position].localHeaderOffset..<ends[position]
        }

        /// Where the record at `position` starts in the file; `endIndex` gives the directory's end.
        package func fileOffset(ofRecord position: Int) -> UInt64 {
            position == records.endIndex ? offset + size : offset + UInt64(records[position].recordOffset)
        }

        package var startIndex: Int { records.startIndex }
        package var endIndex: Int { records.endIndex }
        package subscript(position: Int) -> Record { records[position] }

        /// The name of `record`, exactly as stored.
        package func name(of record: Record) -> ArraySlice<UInt8> {
            names[Int(record.nameStart)..<Int(record.nameStart) + Int(record.nameLength)]
        }

        /// The name of `record` for messages (invalid UTF-8 shown as U+FFFD).
        package func shownName(of record: Record) -> String { String(decoding: name(of: record), as: UTF8.self) }

        /// Where the next name goes. The directory is at most 256 MiB, so offsets fit UInt32.
        var nextNameStart: UInt32 { UInt32(names.count) }

        mutating func append(_ record: Record, name: ArraySlice<UInt8>) {
            records.append(record)
            names.append(contentsOf: name)
        }

        mutating func reserve(_ count: Int) { records.reserveCapacity(count) }

        /// Which part of a name a lookup compares: `prefix` bytes are skipped at the front and
        /// `suffix` bytes at the end (a signature entry `.signet/sigs/PATH.sig` is found by PATH).
        package struct NameKey: Sendable {
            var prefix = 0
            var suffix = 0

            package init(prefix: Int = 0, suffix: Int = 0) { (self.prefix, self.suffix) = (prefix, suffix) }
        }

        /// `positions` sorted by the bytes of their names' keys, for ``find(_:in:key:)``: an
        /// index of four bytes per entry instead of a String and a hash-table slot each.
        package func sortedByName(_ positions: [Int32], key: NameKey = NameKey()) -> [Int32] {
            names.withUnsafeBufferPointer { buffer in
                positions.sorted { compareNames(buffer, $0, $1, key) < 0 }
            }
        }

        /// The first two neighbours of `sorted` (see ``sortedByName(_:key:)``) whose keys are
        /// the same bytes, if any.
        package func firstRepeat(in sorted: [Int32], key: NameKey = NameKey()) -> Int32? {
            names.withUnsafeBufferPointer { buffer in
                zip(sorted, sorted.dropFirst()).first { compareNames(buffer, $0.0, $0.1, key) == 0 }?.1
            }
        }

        /// The position in `sorted` whose name's key is exactly the UTF-8 bytes of `path`.
        package func find(_ path: String, in sorted: [Int32], key: NameKey = NameKey()) -> Int32? {
            var path = path
            return path.withUTF8 { wanted in
                names.withUnsafeBufferPointer { buffer in
                    var low = 0, high = sorted.count
                    while low < high {
                        let middle = low + (high - low) / 2
                        let order = compareBytes(nameKey(buffer, sorted[middle], key), wanted)
                        if order == 0 { return sorted[middle] }
                        if order < 0 { low = middle + 1 } else { high = middle }
                    }
                    return nil
                }
            }
        }

        /// The name's key at `position`, for messages and listings.
        package func keyString(at position: Int32, key: NameKey = NameKey()) -> String {
            names.withUnsafeBufferPointer { String(decoding: nameKey($0, position, key), as: UTF8.self) }
        }

        private func nameKey(_ buffer: UnsafeBufferPointer<UInt8>, _ position: Int32, _ key: NameKey) -> UnsafeBufferPointer<UInt8> {
            let record = records[Int(position)]
            // Clamped to the name, whatever the key: never a range outside the buffer.
            let prefix = Swift.min(key.prefix, Int(record.nameLength))
            let start = Int(record.nameStart) + prefix
            let count = Swift.max(0, Int(record.nameLength) - prefix - key.suffix)
            return UnsafeBufferPointer(rebasing: buffer[start..<start + count])
        }

        private func compareNames(_ buffer: UnsafeBufferPointer<UInt8>, _ a: Int32, _ b: Int32, _ key: NameKey) -> Int {
            compareBytes(nameKey(buffer, a, key), nameKey(buffer, b, key))
        }
    }
}
