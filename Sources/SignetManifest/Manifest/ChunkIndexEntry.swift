import Foundation
import SignetCore
import SignetCrypto

/// The package's chunk-index entry (FORMAT.md §2, "The chunk-index entry"): the chunk
/// records, deflate segment lengths and block hints of every chunked resource, out of the
/// manifest, so that an update reads by range only what it needs — the chunk records of the
/// files it rebuilds, and the block hints of just the chunks it lacks. The manifest binds it
/// with the SHA-256 of each ``sliceSize``-byte slice (`"chunk_index"`), so a device checks every
/// slice it reads before it uses a byte of it.
package struct ChunkIndexEntry: Sendable, Equatable {
    /// Bytes of the entry per slice hash (the last slice perhaps shorter).
    package static let sliceSize = 4096
    /// The prefix of the manifest's `"chunk_index"` string.
    package static let scheme = "sha256-4096:"
    /// Bytes of a chunk's SHA-256 a record keeps (the first 16): a chunk is found by them and
    /// checked by them as it is assembled; the whole file's SHA-256 and signature still decide
    /// what is installed, so a match by chance (2^-128) would cost a refused install, never a
    /// wrong one.
    package static let hashSize = 16
    /// Bytes of a chunk record: its length (3) and ``hashSize``.
    package static let recordSize = 3 + hashSize

    /// The entry's size: the sum of its files' sections.
    package let size: UInt64
    /// Each slice's SHA-256, in order.
    private let hashes: [UInt8]

    package var sliceCount: Int { hashes.count / 32 }

    /// Slices of an entry of `size` bytes.
    static func slices(of size: UInt64) -> Int { Int((size + UInt64(sliceSize) - 1) / UInt64(sliceSize)) }

    /// Slice `index`'s SHA-256.
    package func sliceHash(_ index: Int) -> ArraySlice<UInt8> { hashes[(index * 32)..<(index * 32 + 32)] }

    /// Slice `index`'s bytes in the entry.
    package func slice(_ index: Int) -> Range<UInt64> {
        UInt64(index * Self.sliceSize)..<min(size, UInt64((index + 1) * Self.sliceSize))
    }

    /// The slices that hold `range` of the entry (empty for an empty range).
    package func slices(covering range: Range<UInt64>) -> Range<Int> {
        guard !range.isEmpty else { return 0..<0 }
        return Int(range.lowerBound / UInt64(Self.sliceSize))..<Int((range.upperBound + UInt64(Self.sliceSize) - 1) / UInt64(Self.sliceSize))
    }

    /// The manifest's string: the scheme and the padded base64 of the slice hashes.
    package var encoded: String { Self.scheme + Data(hashes).base64EncodedString() }

    /// The manifest's `"chunk_index"` string for an entry of `size` bytes (the sum of the
    /// sections its files declare): exactly one SHA-256 per slice.
    package init(parsing text: String, size: UInt64) throws {
        let count = Self.slices(of: size)
        guard text.hasPrefix(Self.scheme) else {
            throw ChunkIndex.Refused(
                reason: "a chunk-index entry hashed by an unknown scheme '\(text.prefix(16))' (this Signet knows \(Self.scheme.dropLast()))")
        }
        guard size > 0, text.utf8.count - Self.scheme.utf8.count == (count * 32 + 2) / 3 * 4,
            let binary = Data(base64Encoded: String(text.dropFirst(Self.scheme.count))), binary.count == count * 32
        else {
            throw ChunkIndex.Refused(reason: "a chunk-index entry whose slice hashes are not one SHA-256 per \(Self.sliceSize) bytes of its \(size) (base64)")
        }
        self.size = size
        hashes = Array(binary)
    }

    private init(bytes: [UInt8]) throws {
        size = UInt64(bytes.count)
        var hashes: [UInt8] = []
        hashes.reserveCapacity(Self.slices(of: size) * 32)
        let hasher = try Digest.Hasher(.sha256)
        for start in stride(from: 0, to: bytes.count, by: Self.sliceSize) {
            try hasher.restart()
            bytes[start..<min(bytes.count, start + Self.sliceSize)].withUnsafeBytes { hasher.update($0) }
            hashes += try hasher.finalize().bytes
        }
        self.hashes = hashes
    }

    /// Lays the chunked files of `files` (manifest order) out in one entry: first every file's
    /// block hints, then every file's chunk records and segment lengths (deflated), so that
    /// what every update reads ends the entry, beside the manifest, where the first request
    /// (the zip's tail) already holds some of it. Sets each file's ``Manifest/File/indexed``
    /// and drops its inline indexes (the entry holds them). Nil, with nothing changed, when no
    /// file is chunked.
    package static func make(_ files: inout [Manifest.File]) throws -> (entry: ChunkIndexEntry, bytes: [UInt8])? {
        guard files.contains(where: { $0.chunks != nil }) else { return nil }
        var hints: [UInt8] = [], records: [UInt8] = []
        var sections: [Int: IndexedChunks] = [:]
        for index in files.indices {
            guard let chunks = files[index].chunks else { continue }
            guard chunks.blockScheme == .crc32, chunks.blockCount == ChunkIndex.blocks(of: files[index].size) else {
                throw ChunkIndex.Refused(reason: "block hints that are not one CRC-32 per block")
            }
            var section = IndexedChunks(chunkCount: chunks.count, deflated: files[index].deflate != nil, size: files[index].size)
            section.hintsOffset = UInt64(hints.count)
            section.recordsOffset = UInt64(records.count) // moved past the hints below
            hints += chunks.blockHints
            records += chunks.records(hashSize: Self.hashSize)
            if let deflate = files[index].deflate { records += deflate.binary }
            sections[index] = section
        }
        for (index, var section) in sections {
            section.recordsOffset += UInt64(hints.count)
            files[index].indexed = section
            files[index].chunks = nil
            files[index].deflate = nil
        }
        var laidOut = files
        guard layOut(&laidOut) == UInt64(hints.count + records.count), laidOut == files else {
            throw ChunkIndex.Refused(reason: "sections that are not their declared sizes")
        }
        let bytes = hints + records
        return (try ChunkIndexEntry(bytes: bytes), bytes)
    }

    /// Sets the entry's offsets of each indexed file of `files` (manifest order, as ``make(_:)``
    /// lays them out), and gives the entry's size; nil when one would pass 2^64.
    static func layOut(_ files: inout [Manifest.File]) -> UInt64? {
        var hints: UInt64 = 0
        for index in files.indices where files[index].indexed != nil {
            files[index].indexed!.hintsOffset = hints
            guard let length = files[index].indexed!.hintsLength else { return nil }
            let (sum, overflow) = hints.addingReportingOverflow(length)
            guard !overflow else { return nil }
            hints = sum
        }
        var offset = hints
        for index in files.indices where files[index].indexed != nil {
            files[index].indexed!.recordsOffset = offset
            guard let length = files[index].indexed!.recordsLength else { return nil }
            let (sum, overflow) = offset.addingReportingOverflow(length)
            guard !overflow else { return nil }
            offset = sum
        }
        return offset
    }
}

/// Where one chunked resource's indexes are in the package's ``ChunkIndexEntry``: its block
/// hints (a CRC-32 per ``ChunkIndex/blockSize`` bytes) in the entry's first part, with every
/// file's hints in manifest order; its chunk records (``ChunkIndexEntry/recordSize`` bytes each)
/// then its segment lengths (2 bytes per ``DeflateIndex/segmentSize`` bytes of the file;
/// deflated entries only) in the second part, likewise. The manifest's file entry says
/// `"index": "fastcdc1-crc32:N"` (stored) or `"fastcdc1-sync8192-crc32:N"` (deflated), N the
/// chunk count; the offsets follow from the files before it.
package struct IndexedChunks: Sendable, Equatable {
    static let storedScheme = "fastcdc1-crc32:"
    static let deflatedScheme = "fastcdc1-sync8192-crc32:"

    /// The file's chunks.
    package let chunkCount: Int
    /// Whether the entry is deflated in segments (``DeflateIndex``).
    package let deflated: Bool
    /// The file's size.
    package let size: UInt64
    /// Where its block hints start in the entry.
    package internal(set) var hintsOffset: UInt64 = 0
    /// Where its chunk records start in the entry.
    package internal(set) var recordsOffset: UInt64 = 0

    init(chunkCount: Int, deflated: Bool, size: UInt64) {
        self.chunkCount = chunkCount
        self.deflated = deflated
        self.size = size
    }

    /// Bytes of its block hints.
    var hintsLength: UInt64? {
        let (length, overflow) = UInt64(ChunkIndex.blocks(of: size)).multipliedReportingOverflow(by: UInt64(ChunkIndex.blockHashSize))
        return overflow ? nil : length
    }

    /// Bytes of its chunk records and segment lengths (nil past 2^64: refused).
    var recordsLength: UInt64? {
        let (records, a) = UInt64(chunkCount).multipliedReportingOverflow(by: UInt64(ChunkIndexEntry.recordSize))
        let segments = deflated ? UInt64(DeflateIndex.segments(of: size)) * 2 : 0
        let (sum, b) = records.addingReportingOverflow(segments)
        return a || b ? nil : sum
    }

    /// The chunk records' bytes in the entry.
    package var chunkBytes: Range<UInt64> { recordsOffset..<(recordsOffset + UInt64(chunkCount * ChunkIndexEntry.recordSize)) }
    /// The segment lengths' bytes (empty for a stored entry).
    package var segmentBytes: Range<UInt64> {
        chunkBytes.upperBound..<(chunkBytes.upperBound + (deflated ? UInt64(DeflateIndex.segments(of: size)) * 2 : 0))
    }
    /// The block hints' bytes.
    package var blockBytes: Range<UInt64> {
        hintsOffset..<(hintsOffset + UInt64(ChunkIndex.blocks(of: size) * ChunkIndex.blockHashSize))
    }

    /// The manifest's `"index"` string.
    var encoded: String { (deflated ? Self.deflatedScheme : Self.storedScheme) + String(chunkCount) }

    /// Parses a file entry's `"index"` for a file of `size` bytes: a known layout and a chunk
    /// count the size allows (1 to one per 16,384 bytes and one more).
    init(parsing text: String, size: UInt64) throws {
        let deflated: Bool, count: Substring
        if text.hasPrefix(Self.storedScheme) {
            (deflated, count) = (false, text.dropFirst(Self.storedScheme.count))
        } else if text.hasPrefix(Self.deflatedScheme) {
            (deflated, count) = (true, text.dropFirst(Self.deflatedScheme.count))
        } else {
            throw ChunkIndex.Refused(
                reason:
                    "a chunk index of an unknown layout '\(text.prefix(32))' (this Signet knows \(Self.storedScheme.dropLast()) and \(Self.deflatedScheme.dropLast()))"
            )
        }
        guard count.utf8.count <= 18, count.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), !count.hasPrefix("0"), let chunks = Int(count),
            size > 0, UInt64(chunks) <= size / UInt64(ContentChunker.minimum) + 1
        else {
            throw ChunkIndex.Refused(
                reason: "a chunk index of \(count.prefix(20)) chunks for \(size) bytes (1 to one per \(ContentChunker.minimum) bytes and one more)")
        }
        self.init(chunkCount: chunks, deflated: deflated, size: size)
    }
}
