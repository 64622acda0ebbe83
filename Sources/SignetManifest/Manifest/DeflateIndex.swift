import Foundation

/// Where a chunked, deflated resource's bytes are in its deflate stream (FORMAT.md §2,
/// `deflate`): the stream has a sync flush after every ``segmentSize`` bytes of the
/// file (byte-aligned, the window kept), and this lists each segment's compressed length, so
/// that a device can fetch the compressed bytes of just the segments it lacks and inflate each
/// one with the 32 KiB of the file that precede it as the dictionary. The entry stays one valid
/// deflate stream that any unzip reads. Carried in the manifest's file entry, beside `chunks`,
/// as one string: `sync8192:` and the padded base64 of each segment's compressed length
/// (2 bytes, big-endian), in file order.
package struct DeflateIndex: Sendable, Equatable {
    /// The prefix naming the layout: a sync flush every 8,192 bytes of the file.
    package static let scheme = "sync8192:"
    /// Bytes of the file per segment (the last one perhaps shorter).
    package static let segmentSize = 8192
    /// Every segment holds at least one byte of the file, so at least one compressed byte (the
    /// last one, which ends the stream, can be 2 or 3 bytes; the others end with a sync flush's
    /// empty stored block); an incompressible one is its bytes in stored blocks and a few block
    /// headers.
    static let smallest = 1
    static let largest = segmentSize + 64

    /// Each segment's compressed length.
    private(set) var lengths: [UInt16] = []

    package init() {}

    /// Segments of a file of `size` bytes.
    package static func segments(of size: UInt64) -> Int { Int((size + UInt64(segmentSize) - 1) / UInt64(segmentSize)) }

    package var count: Int { lengths.count }

    package mutating func append(compressedLength: Int) {
        lengths.append(UInt16(clamping: compressedLength))
    }

    /// Adds `bytes` to the last segment (the stream's final block after its last flush).
    package mutating func extendLast(by bytes: Int) {
        guard let last = lengths.last else { return }
        lengths[lengths.count - 1] = UInt16(clamping: Int(last) + bytes)
    }

    /// Each segment's start in the deflate stream, and one more: the stream's length.
    package var offsets: [UInt64] {
        var offsets = [UInt64](repeating: 0, count: lengths.count + 1)
        for (index, length) in lengths.enumerated() { offsets[index + 1] = offsets[index] + UInt64(length) }
        return offsets
    }

    /// The deflate stream's length.
    package var compressedSize: UInt64 { lengths.reduce(0) { $0 + UInt64($1) } }

    /// Each segment's compressed length, 2 bytes big-endian (the chunk-index entry's form).
    package var binary: [UInt8] {
        var binary = [UInt8]()
        binary.reserveCapacity(lengths.count * 2)
        for length in lengths { binary += [UInt8(length >> 8), UInt8(truncatingIfNeeded: length)] }
        return binary
    }

    /// The manifest's string (inline, as packages before the chunk-index entry carry it).
    package var encoded: String { Self.scheme + Data(binary).base64EncodedString() }

    /// Reads binary lengths (2 bytes each) for a file of `size` bytes: exactly one per segment,
    /// each between 1 and 8,256 bytes.
    package init(lengths raw: UnsafeRawBufferPointer, size: UInt64) throws {
        let count = Self.segments(of: size)
        guard raw.count == count * 2 else {
            throw ChunkIndex.Refused(reason: "a deflate index that is not one length per \(Self.segmentSize)-byte segment")
        }
        lengths.reserveCapacity(count)
        for index in 0..<count {
            let length = UInt16(raw[2 * index]) << 8 | UInt16(raw[2 * index + 1])
            guard Int(length) >= Self.smallest, Int(length) <= Self.largest else {
                throw ChunkIndex.Refused(reason: "a deflate segment of \(length) compressed bytes (\(Self.smallest) to \(Self.largest))")
            }
            lengths.append(length)
        }
    }

    /// Parses a manifest's `deflate` string for a file of `size` bytes: exactly one length per
    /// segment, each between 1 and 8,256 bytes.
    package init(parsing text: String, size: UInt64) throws {
        guard text.hasPrefix(Self.scheme) else {
            throw ChunkIndex.Refused(reason: "a deflate index of an unknown scheme '\(text.prefix(16))' (this Signet knows \(Self.scheme.dropLast()))")
        }
        let count = Self.segments(of: size)
        guard text.utf8.count - Self.scheme.utf8.count == (count * 2 + 2) / 3 * 4,
            let binary = Data(base64Encoded: String(text.dropFirst(Self.scheme.count))), binary.count == count * 2
        else {
            throw ChunkIndex.Refused(reason: "a deflate index that is not one length per \(Self.segmentSize)-byte segment of base64")
        }
        self = try binary.withUnsafeBytes { try DeflateIndex(lengths: $0, size: size) }
    }
}
