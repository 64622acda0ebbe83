import SignetCore
import SignetCrypto

/// A file's fs-verity digest, computed from its bytes as the kernel measures an fs-verity file
/// (Documentation/filesystems/fsverity.rst, "File digest computation"): SHA-256,
/// 4,096-byte blocks, no salt. The data blocks (the last zero-padded) are hashed; each level's
/// hashes are packed into blocks (the last zero-padded) and hashed into the next level, until
/// one block's hash is left — the root hash (all zeros for an empty file; a file of one block
/// has the hash of that block). The digest is the SHA-256 of the 256-byte `fsverity_descriptor`
/// (version 1, algorithm 1, log2 block size 12, salt size 0, the file's size little-endian,
/// the root hash zero-padded to 64 bytes, the rest zero): what `FS_IOC_MEASURE_VERITY` and
/// `fsverity digest` give. Streaming: memory is one pending block per tree level.
package final class VerityDigest {
    /// Bytes of a data or tree block.
    package static let blockSize = 4096
    private static let hashSize = 32

    private let hasher: Digest.Hasher
    /// The data block being filled.
    private var block: [UInt8] = []
    /// Per tree level (0: the hashes of data blocks), the hashes of the block being filled, and
    /// how many hashes the level has had in all.
    private var levels: [(pending: [UInt8], count: UInt64)] = []
    private var size: UInt64 = 0

    package init() throws {
        hasher = try Digest.Hasher(.sha256)
        block.reserveCapacity(Self.blockSize)
    }

    private func hash(_ bytes: UnsafeRawBufferPointer) throws -> [UInt8] {
        try hasher.restart()
        hasher.update(bytes)
        return try hasher.finalize().bytes
    }

    /// Hashes a whole block (`bytes`, zero-padded to a block) into `level`.
    private func add(_ bytes: [UInt8], to level: Int) throws {
        var padded = bytes
        if padded.count < Self.blockSize { padded += [UInt8](repeating: 0, count: Self.blockSize - padded.count) }
        let digest = try padded.withUnsafeBytes { try hash($0) }
        if level == levels.count { levels.append(([], 0)) }
        levels[level].pending += digest
        levels[level].count += 1
        if levels[level].pending.count == Self.blockSize {
            let full = levels[level].pending
            levels[level].pending.removeAll(keepingCapacity: true)
            try add(full, to: level + 1)
        }
    }

    /// The file's next bytes.
    package func update(_ bytes: UnsafeRawBufferPointer) throws {
        var at = 0
        while at < bytes.count {
            if block.isEmpty, bytes.count - at >= Self.blockSize {
                // A whole block in place: hashed without a copy.
                let digest = try hash(UnsafeRawBufferPointer(rebasing: bytes[at..<(at + Self.blockSize)]))
                try append(digest)
                at += Self.blockSize
                continue
            }
            let take = min(Self.blockSize - block.count, bytes.count - at)
            block += bytes[at..<(at + take)]
            at += take
            if block.count == Self.blockSize {
                let full = block
                block.removeAll(keepingCapacity: true)
                try add(full, to: 0)
            }
        }
        size += UInt64(bytes.count)
    }

    /// A data block's hash, appended to level 0.
    private func append(_ digest: [UInt8]) throws {
        if levels.isEmpty { levels.append(([], 0)) }
        levels[0].pending += digest
        levels[0].count += 1
        if levels[0].pending.count == Self.blockSize {
            let full = levels[0].pending
            levels[0].pending.removeAll(keepingCapacity: true)
            try add(full, to: 1)
        }
    }

    /// The 32-byte fs-verity digest of the bytes given.
    package func finalize() throws -> [UInt8] {
        if !block.isEmpty {
            let last = block
            block.removeAll()
            try add(last, to: 0)
        }
        var root = [UInt8](repeating: 0, count: Self.hashSize)
        var level = 0
        while level < levels.count {
            if level == levels.count - 1, levels[level].count == 1 {
                root = Array(levels[level].pending.prefix(Self.hashSize))
                break
            }
            if !levels[level].pending.isEmpty {
                let partial = levels[level].pending
                levels[level].pending.removeAll()
                try add(partial, to: level + 1)
            }
            level += 1
        }
        var descriptor = [UInt8](repeating: 0, count: 256)
        descriptor[0] = 1 // version
        descriptor[1] = 1 // FS_VERITY_HASH_ALG_SHA256
        descriptor[2] = 12 // log2 of the block size
        for index in 0..<8 { descriptor[8 + index] = UInt8(truncatingIfNeeded: size >> (8 * UInt64(index))) }
        descriptor.replaceSubrange(16..<(16 + Self.hashSize), with: root)
        return try descriptor.withUnsafeBytes { try hash($0) }
    }
}
