import SignetCore
import SignetCrypto
/// Cuts a stream into content-defined chunks (FastCDC: Xia et al., USENIX ATC 2016, with its
/// normalised chunking) and hashes each, as `pack` reads a large resource. A cut
/// depends only on the bytes before it within the chunk, so an insertion moves the cuts around
/// it and the chunks after it are found again, shifted.
///
/// - A gear hash over the bytes since the chunk's ``minimum``-th: `fp = fp << 1 + gear[byte]`.
/// - Up to ``average`` bytes a cut needs 17 of fp's top bits zero, after it 15 (normalised
///   chunking keeps most chunks near the average); at ``maximum`` the chunk is cut anyway.
/// - The gear table is the first 8 bytes of SHA-256("signet fastcdc gear " + i) for i in
///   0...255 (OpenSSL), so every Signet cuts the same bytes the same way.
package final class ContentChunker {
    /// The smallest chunk (the last may be shorter).
    package static let minimum = 16 << 10
    /// The size most chunks are near.
    static let average = 64 << 10
    /// The largest chunk.
    package static let maximum = 256 << 10
    /// Cut masks: before the average, 17 top bits; after it, 15.
    static let maskSmall: UInt64 = ~0 << (64 - 17)
    static let maskLarge: UInt64 = ~0 << (64 - 15)

    /// The gear table (SHA-256 of constant text: OpenSSL cannot fail on it unless it cannot
    /// hash at all, and then nothing in Signet works).
    static let gear: [UInt64] = (0..<256).map { index in
        let digest = try! Digest.compute(Array("signet fastcdc gear \(index)".utf8), algorithm: .sha256)
        return digest.bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    private let hasher: Digest.Hasher
    private var fingerprint: UInt64 = 0
    private var length = 0
    private(set) var index = ChunkIndex()
    /// The fixed 4 KiB blocks' hints (``ChunkIndex/blockSize``), beside the chunks: a CRC-32
    /// (the chunk-index entry's), or the first bytes of a SHA-256 (``blockHasher``; an installed
    /// copy compared with a package that carries its block hashes inline).
    private let blockHasher: Digest.Hasher?
    private var blockCRC: UInt32 = 0
    private var blockFill = 0

    package init(blocks: ChunkIndex.BlockScheme = .crc32) throws {
        hasher = try Digest.Hasher(.sha256)
        blockHasher = blocks == .sha256Prefix ? try Digest.Hasher(.sha256) : nil
        index = ChunkIndex(blockScheme: blocks)
    }

    /// Hashes the bytes into their 4 KiB blocks.
    private func updateBlocks(_ bytes: UnsafeRawBufferPointer) throws {
        var position = 0
        while position < bytes.count {
            let take = min(ChunkIndex.blockSize - blockFill, bytes.count - position)
            let part = UnsafeRawBufferPointer(rebasing: bytes[position..<(position + take)])
            if let blockHasher { blockHasher.update(part) } else { blockCRC = ChunkIndex.crc32(blockCRC, part) }
            blockFill += take
            position += take
            if blockFill == ChunkIndex.blockSize { try endBlock() }
        }
    }

    private func endBlock() throws {
        if let blockHasher {
            index.appendBlock(try blockHasher.finalize())
            try blockHasher.restart()
        } else {
            index.appendBlock(crc32: blockCRC)
            blockCRC = 0
        }
        blockFill = 0
    }

    /// The next bytes of the stream.
    package func update(_ bytes: UnsafeRawBufferPointer) throws {
        try updateBlocks(bytes)
        let count = bytes.count
        var start = 0
        var position = 0
        while position < count {
            // The bytes before the minimum are not looked at.
            if length < Self.minimum {
                let skip = min(Self.minimum - length, count - position)
                length += skip
                position += skip
                continue
            }
            // One tight loop per mask, to the average and then to the maximum.
            let mask = length < Self.average ? Self.maskSmall : Self.maskLarge
            let end = position + min(count - position, (length < Self.average ? Self.average : Self.maximum) - length)
            var fingerprint = self.fingerprint
            var cutAt = -1
            Self.gear.withUnsafeBufferPointer { gear in
                var index = position
                while index < end {
                    fingerprint = fingerprint &<< 1 &+ gear[Int(bytes[index])]
                    index += 1
                    if fingerprint & mask == 0 { cutAt = index; break }
                }
            }
            self.fingerprint = fingerprint
            let stop = cutAt >= 0 ? cutAt : end
            length += stop - position
            position = stop
            if cutAt >= 0 || length >= Self.maximum {
                hasher.update(UnsafeRawBufferPointer(rebasing: bytes[start..<position]))
                try cut()
                start = position
            }
        }
        hasher.update(UnsafeRawBufferPointer(rebasing: bytes[start..<count]))
    }

    /// Ends the stream: the last chunk, and the index.
    package func finish() throws -> ChunkIndex {
        if length > 0 { try cut() }
        if blockFill > 0 { try endBlock() }
        return index
    }

    private func cut() throws {
        index.append(length: UInt32(length), sha256: try hasher.finalize())
        try hasher.restart()
        fingerprint = 0
        length = 0
    }
}
