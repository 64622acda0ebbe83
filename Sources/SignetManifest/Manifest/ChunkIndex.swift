import Foundation
internal import CSignetZlib
import SignetCore
import SignetCrypto

/// The content-defined chunks of one large resource (FORMAT.md §2, "Chunk indexes"):
/// each chunk's length and SHA-256, in file order, as ``ContentChunker`` cut them. Carried in
/// the manifest's file entry as one string (`"chunks"`), so the manifest's signature covers it
/// and a Signet that does not know the field skips it.
///
/// The string is `fastcdc1:` and the base64 (RFC 4648, padded) of, per chunk, its length as
/// 3 bytes big-endian then its 32-byte SHA-256. A parsed index is checked against the file's
/// size: every chunk but the last between ``ContentChunker/minimum`` and
/// ``ContentChunker/maximum`` bytes, the last between 1 and the maximum, their sum the size.
package struct ChunkIndex: Sendable, Equatable {
    /// The prefix naming the chunking (FastCDC with Signet's gear table and sizes).
    package static let scheme = "fastcdc1:"
    /// Bytes per chunk in the binary form.
    package static let recordSize = 35

    /// Each chunk's length.
    private(set) var lengths: [UInt32] = []
    /// The chunks' SHA-256s, 32 bytes each, in order.
    private(set) var hashes: [UInt8] = []
    /// Bytes of each chunk's SHA-256 kept: 32 in a computed or inline index, 16 (the first) in
    /// a package's chunk-index entry (``ChunkIndexEntry/hashSize``).
    package private(set) var hashSize = 32
    /// The file's fixed blocks (``blockSize`` bytes, the last perhaps shorter): a
    /// ``blockHashSize``-byte hint of each, in order, of ``blockScheme``. Every block's in a
    /// computed index; in one read from a package's chunk-index entry, only those of the blocks
    /// fetched (``fillBlocks(_:from:)``), the rest zero and never asked for.
    private(set) var blocks: [UInt8] = []

    /// How a block's hint is made. Hints only say which installed block may hold a new one's
    /// bytes: the chunk's SHA-256 decides, so they need not resist collisions.
    package enum BlockScheme: String, Sendable {
        /// The first 4 bytes of the block's SHA-256: the manifest's inline `"blocks"` (packages
        /// made before the chunk-index entry, FORMAT.md §2).
        case sha256Prefix = "sha256t4-4096:"
        /// zlib's CRC-32 of the block, big-endian: the chunk-index entry's (FORMAT.md §2).
        case crc32 = "crc32-4096:"
    }

    /// The scheme of ``blocks``.
    package private(set) var blockScheme: BlockScheme = .crc32

    /// Bytes of a fixed block.
    package static let blockSize = 4096
    /// Bytes of a block's hint: enough to tell a changed block from the one at the same offset
    /// (a false match, 1 in 2^32, is caught by the chunk's whole SHA-256 and fetched).
    static let blockHashSize = 4
    /// The prefix naming the inline block hashes.
    package static let blockScheme = BlockScheme.sha256Prefix.rawValue

    package var blockCount: Int { blocks.count / Self.blockHashSize }

    /// Blocks of a file of `size` bytes.
    package static func blocks(of size: UInt64) -> Int { Int((size + UInt64(blockSize) - 1) / UInt64(blockSize)) }

    /// Block `index`'s hint.
    package func block(_ index: Int) -> ArraySlice<UInt8> { blocks[(index * Self.blockHashSize)..<((index + 1) * Self.blockHashSize)] }

    /// Block `index`'s hint as a number (a lookup key).
    package func blockKey(_ index: Int) -> UInt32 { block(index).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }

    mutating func appendBlock(_ sha256: Digest) {
        blocks.append(contentsOf: sha256.bytes.prefix(Self.blockHashSize))
    }

    mutating func appendBlock(crc32: UInt32) {
        blocks += [
            UInt8(truncatingIfNeeded: crc32 >> 24), UInt8(truncatingIfNeeded: crc32 >> 16), UInt8(truncatingIfNeeded: crc32 >> 8),
            UInt8(truncatingIfNeeded: crc32)
        ]
    }

    /// zlib's CRC-32 of `bytes`, continuing `crc`.
    package static func crc32(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        UInt32(truncatingIfNeeded: signet_crc32(UInt(crc), bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count))
    }

    /// The manifest's `"blocks"` string (inline, ``BlockScheme/sha256Prefix``).
    package var encodedBlocks: String { blockScheme.rawValue + Data(blocks).base64EncodedString() }

    /// Adds a manifest's `"blocks"` string for a file of `size` bytes: exactly one hash per block.
    package mutating func parseBlocks(_ text: String, size: UInt64) throws {
        let count = Self.blocks(of: size)
        guard text.hasPrefix(Self.blockScheme) else {
            throw Refused(reason: "block hashes of an unknown scheme '\(text.prefix(16))' (this Signet knows \(Self.blockScheme.dropLast()))")
        }
        guard text.utf8.count - Self.blockScheme.utf8.count == (count * Self.blockHashSize + 2) / 3 * 4,
            let binary = Data(base64Encoded: String(text.dropFirst(Self.blockScheme.count))), binary.count == count * Self.blockHashSize
        else {
            throw Refused(reason: "block hashes that are not one per \(Self.blockSize)-byte block of base64")
        }
        blocks = Array(binary)
        blockScheme = .sha256Prefix
    }

    /// Sets the hints of blocks `first...` from a chunk-index entry's bytes (4 per block); the
    /// others stay as they were (zero until filled). `total` is the file's block count.
    package mutating func fillBlocks(_ hints: UnsafeRawBufferPointer, from first: Int, total: Int) {
        if blocks.count != total * Self.blockHashSize { blocks = [UInt8](repeating: 0, count: total * Self.blockHashSize) }
        let start = first * Self.blockHashSize
        let count = min(hints.count, blocks.count - start)
        guard count > 0 else { return }
        blocks.withUnsafeMutableBytes {
            UnsafeMutableRawBufferPointer(rebasing: $0[start..<(start + count)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: hints[0..<count]))
        }
        blockScheme = .crc32
    }

    package var count: Int { lengths.count }

    init(blockScheme: BlockScheme = .crc32) { self.blockScheme = blockScheme }

    mutating func append(length: UInt32, sha256: Digest) {
        lengths.append(length)
        hashes.append(contentsOf: sha256.bytes)
    }

    /// Chunk `index`'s SHA-256.
    package func hash(_ index: Int) -> ArraySlice<UInt8> { hashes[(index * hashSize)..<((index + 1) * hashSize)] }

    /// Whether `digest` (a chunk's whole SHA-256) is chunk `index`'s, as far as the index keeps it.
    package func matches(_ index: Int, _ digest: Digest) -> Bool { digest.bytes.prefix(hashSize).elementsEqual(hash(index)) }

    /// Each chunk's offset in the file and length.
    package var spans: [(offset: UInt64, length: UInt64)] {
        var offset: UInt64 = 0
        return lengths.map { length in
            defer { offset += UInt64(length) }
            return (offset, UInt64(length))
        }
    }

    /// The chunk records, binary: per chunk its length (3 bytes, big-endian) and the first
    /// `hashSize` bytes of its SHA-256 (all 32 inline; 16 in the chunk-index entry).
    package func records(hashSize: Int = 32) -> [UInt8] {
        var binary = [UInt8]()
        binary.reserveCapacity(count * (3 + hashSize))
        for (index, length) in lengths.enumerated() {
            binary += [UInt8(truncatingIfNeeded: length >> 16), UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
            binary += hash(index).prefix(hashSize)
        }
        return binary
    }

    /// The block hints, binary (4 bytes per block).
    package var blockHints: [UInt8] { blocks }

    /// The manifest's string (inline, as packages before the chunk-index entry carry it).
    package var encoded: String { Self.scheme + Data(records()).base64EncodedString() }

    /// Why a manifest's `chunks` string is refused.
    package struct Refused: Error {
        package let reason: String
        package init(reason: String) { self.reason = reason }
    }

    /// Parses a manifest's `chunks` string for a file of `size` bytes.
    package init(parsing text: String, size: UInt64) throws {
        guard text.hasPrefix(Self.scheme) else {
            throw Refused(reason: "a chunk index of an unknown scheme '\(text.prefix(16))' (this Signet knows \(Self.scheme.dropLast()))")
        }
        // At most one record per minimum-size chunk (and one more for the last): the string's
        // length is checked before it is decoded.
        let most = size / UInt64(ContentChunker.minimum) + 1
        let encodedLength = text.utf8.count - Self.scheme.utf8.count
        guard UInt64(encodedLength) <= (most * UInt64(Self.recordSize) + 2) / 3 * 4,
            let binary = Data(base64Encoded: String(text.dropFirst(Self.scheme.count))), binary.count % Self.recordSize == 0
        else {
            throw Refused(reason: "a chunk index that is not whole records of base64")
        }
        self = try binary.withUnsafeBytes { try ChunkIndex(records: $0, size: size) }
        blockScheme = .sha256Prefix
    }

    /// Reads binary chunk records (a 3-byte length and `hashSize` bytes of SHA-256 each) for a
    /// file of `size` bytes, with the same checks as the manifest's string.
    package init(records raw: UnsafeRawBufferPointer, size: UInt64, hashSize: Int = 32) throws {
        let recordSize = 3 + hashSize
        guard raw.count % recordSize == 0, UInt64(raw.count / recordSize) <= size / UInt64(ContentChunker.minimum) + 1 else {
            throw Refused(reason: "a chunk index that is not whole records, at most one per \(ContentChunker.minimum) bytes")
        }
        self.hashSize = hashSize
        let records = raw.count / recordSize
        var total: UInt64 = 0
        lengths.reserveCapacity(records)
        hashes.reserveCapacity(records * hashSize)
        for index in 0..<records {
            let base = index * recordSize
            let length = UInt32(raw[base]) << 16 | UInt32(raw[base + 1]) << 8 | UInt32(raw[base + 2])
            let last = index == records - 1
            guard length >= 1, length <= ContentChunker.maximum, last || length >= ContentChunker.minimum else {
                throw Refused(
                    reason: "a chunk of \(length) bytes (chunks are \(ContentChunker.minimum) to \(ContentChunker.maximum) bytes, the last at least 1)")
            }
            total += UInt64(length)
            lengths.append(length)
            hashes.append(contentsOf: UnsafeRawBufferPointer(rebasing: raw[(base + 3)..<(base + recordSize)]))
        }
        guard total == size, records > 0 || size == 0 else {
            throw Refused(reason: "chunks of \(total) bytes in all for a file of \(size)")
        }
    }
}
