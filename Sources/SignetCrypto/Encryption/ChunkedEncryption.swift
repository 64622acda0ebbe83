internal import COpenSSL
import SignetCore

/// c2sp.org/chunked-encryption@v1, instantiated with HKDF-SHA-256 and AES-256-GCM (FORMAT.md
/// §8): a message is cut into chunks of 16 KiB, the last one always shorter (possibly empty),
/// and each chunk is sealed on its own, so that any chunk can be read and authenticated without
/// the others. The sealed form is salt (24 bytes) ‖ commitment (32) ‖ the sealed chunks; chunk k
/// starts at byte 56 + k × (16 KiB + 16).
///
/// The key, base nonce and commitment of one message come from HKDF-Expand over the input key
/// with `"c2sp.org/chunked-encryption@v1+AEAD_AES_256_GCM" ‖ 0x00 ‖ salt ‖ context`; the
/// commitment is checked before any chunk is opened.
package enum ChunkedEncryption {
    /// Plaintext bytes per chunk.
    package static let chunkSize = 16_384
    /// AES-GCM's tag.
    package static let tagSize = 16
    /// Salt and commitment, before the first chunk.
    package static let headerSize = 56
    package static let saltSize = 24
    package static let commitmentSize = 32
    /// A full chunk sealed.
    package static let sealedChunkSize = chunkSize + tagSize
    /// The input key's size (AES-256's key).
    package static let keySize = 32
    static let nonceSize = 12
    /// The most chunks a message may have (the specification's 2³⁸).
    static let maximumChunks: UInt64 = 1 << 38
    /// The longest context HKDF's info takes with the prefix and salt (OpenSSL bounds it).
    package static let maximumContext = 1_024
    static let infoPrefix = Array("c2sp.org/chunked-encryption@v1+AEAD_AES_256_GCM".utf8) + [0]

    /// The sealed size of a message of `size` bytes (nil past the specification's bound).
    package static func sealedSize(plaintext size: UInt64) -> UInt64? {
        let chunks = size / UInt64(chunkSize) + 1
        guard chunks <= maximumChunks else { return nil }
        return UInt64(headerSize) + size + chunks * UInt64(tagSize)
    }

    /// The plaintext size of a sealed message of `size` bytes; nil for a size no message has
    /// (shorter than a header and an empty chunk, or ending in a whole chunk: truncated, or
    /// with a final chunk shorter than its tag).
    package static func plaintextSize(sealed size: UInt64) -> UInt64? {
        guard size >= UInt64(headerSize + tagSize) else { return nil }
        let body = size - UInt64(headerSize)
        let full = body / UInt64(sealedChunkSize), rest = body % UInt64(sealedChunkSize)
        guard rest >= UInt64(tagSize), full < maximumChunks else { return nil }
        return full * UInt64(chunkSize) + rest - UInt64(tagSize)
    }

    /// Where chunk `index` starts in the sealed message.
    package static func sealedOffset(chunk index: UInt64) -> UInt64 {
        UInt64(headerSize) + index * UInt64(sealedChunkSize)
    }

    /// A fresh random input key.
    package static func randomKey() throws -> [UInt8] { try random(keySize) }

    static func random(_ count: Int) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { throw OpenSSLErrorQueue.error(.crypto, "OpenSSL's random generator failed") }
        return bytes
    }

    /// The key, base nonce and commitment of one message.
    struct Derived {
        let key: [UInt8]
        let baseNonce: [UInt8]
        let commitment: [UInt8]

        init(inputKey: [UInt8], salt: [UInt8], context: [UInt8]) throws {
            guard inputKey.count == keySize, salt.count == saltSize else {
                throw SignetError(.crypto, "chunked encryption takes a \(keySize)-byte key and a \(saltSize)-byte salt")
            }
            guard context.count <= maximumContext else {
                throw SignetError(.malformedInput, "a chunked-encryption context of \(context.count) bytes is longer than \(maximumContext)")
            }
            let out = try HKDF.expand(key: inputKey, info: infoPrefix + salt + context, count: keySize + nonceSize + commitmentSize)
            key = Array(out[0..<keySize])
            baseNonce = Array(out[keySize..<(keySize + nonceSize)])
            commitment = Array(out[(keySize + nonceSize)...])
        }

        /// The base nonce XOR the chunk number, big-endian, in its last bytes.
        func nonce(_ index: UInt64) -> [UInt8] {
            var nonce = baseNonce
            for byte in 0..<8 { nonce[nonceSize - 1 - byte] ^= UInt8(truncatingIfNeeded: index >> (8 * UInt64(byte))) }
            return nonce
        }
    }
}

/// Seals a message as it streams: ``header`` first, then what ``append(_:)`` and
/// ``finish()`` return, in order. Holds at most one chunk.
package struct ChunkedSealer {
    /// Salt and commitment: the first 56 bytes of the sealed message.
    package let header: [UInt8]
    private let derived: ChunkedEncryption.Derived
    private let cipher: AESGCM
    private var pending: [UInt8] = []
    private var index: UInt64 = 0
    private var finished = false

    /// A sealer for one message under `inputKey` with `context` bound in (a fresh random salt,
    /// or `salt` when a test gives one).
    package init(inputKey: [UInt8], context: [UInt8], salt: [UInt8]? = nil) throws {
        let salt = try salt ?? ChunkedEncryption.random(ChunkedEncryption.saltSize)
        derived = try ChunkedEncryption.Derived(inputKey: inputKey, salt: salt, context: context)
        header = salt + derived.commitment
        cipher = try AESGCM(key: derived.key)
        pending.reserveCapacity(ChunkedEncryption.chunkSize)
    }

    /// Takes more of the message; returns the chunks it completed, sealed.
    package mutating func append(_ bytes: some Collection<UInt8>) throws -> [UInt8] {
        var out: [UInt8] = []
        try append(bytes, into: &out)
        return out
    }

    /// Takes more of the message; appends the chunks it completed, sealed, to `out` (a buffer
    /// the caller keeps: no allocation per call once it has grown).
    package mutating func append(_ bytes: some Collection<UInt8>, into out: inout [UInt8]) throws {
        precondition(!finished, "append after finish")
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(ChunkedEncryption.chunkSize - pending.count, rest.count)
            pending.append(contentsOf: rest.prefix(take))
            rest = rest.dropFirst(take)
            // A full chunk is never the last one (the last is always shorter): seal it now.
            if pending.count == ChunkedEncryption.chunkSize {
                try sealPending(into: &out)
            }
        }
    }

    /// Seals the final chunk (shorter than 16 KiB, possibly empty).
    package mutating func finish() throws -> [UInt8] {
        var out: [UInt8] = []
        try finish(into: &out)
        return out
    }

    /// Seals the final chunk into `out`.
    package mutating func finish(into out: inout [UInt8]) throws {
        precondition(!finished, "finish twice")
        finished = true
        try sealPending(into: &out)
    }

    /// Seals chunk `index` alone, appended to `out`: what streaming the message would give for it,
    /// for a writer whose chunks become final out of order. A chunk shorter than 16 KiB must
    /// be the message's last; the caller keeps each number to one chunk.
    package func seal(chunk index: UInt64, _ plaintext: [UInt8], into out: inout [UInt8]) throws {
        guard index < ChunkedEncryption.maximumChunks, plaintext.count <= ChunkedEncryption.chunkSize else {
            throw SignetError(.malformedInput, "a chunk-encrypted message may not exceed 2^38 chunks of 16 KiB")
        }
        try cipher.seal(plaintext, nonce: derived.nonce(index), appendingTo: &out)
    }

    private mutating func sealPending(into out: inout [UInt8]) throws {
        guard index < ChunkedEncryption.maximumChunks else {
            throw SignetError(.malformedInput, "a chunk-encrypted message may not exceed 2^38 chunks")
        }
        try cipher.seal(pending, nonce: derived.nonce(index), appendingTo: &out)
        index += 1
        pending.removeAll(keepingCapacity: true)
    }

    /// Seals a whole message at once.
    package static func seal(_ message: [UInt8], inputKey: [UInt8], context: [UInt8], salt: [UInt8]? = nil) throws -> [UInt8] {
        var sealer = try ChunkedSealer(inputKey: inputKey, context: context, salt: salt)
        return try sealer.header + sealer.append(message) + sealer.finish()
    }
}

/// Opens the chunks of one sealed message, in any order: the header's commitment is checked
/// when it is made, and each chunk is authenticated under its own number and place (a chunk
/// moved, repeated, cut or from another message, path or key does not open).
package struct ChunkedOpener {
    private let derived: ChunkedEncryption.Derived
    private let cipher: AESGCM
    /// The number of chunks of the message, from its sealed size.
    package let chunkCount: UInt64
    /// The plaintext size, from the sealed size.
    package let plaintextSize: UInt64

    /// Checks `header` (the first 56 bytes) against `inputKey` and `context`, for a message
    /// whose sealed size is `sealedSize`.
    package init(header: some Collection<UInt8>, sealedSize: UInt64, inputKey: [UInt8], context: [UInt8], name: String) throws {
        guard let plaintext = ChunkedEncryption.plaintextSize(sealed: sealedSize) else {
            throw SignetError(.packageInvalid, "'\(name)' is cut short or padded: \(sealedSize) bytes is not the size of a chunk-encrypted message")
        }
        let header = Array(header)
        guard header.count == ChunkedEncryption.headerSize else {
            throw SignetError(.packageInvalid, "'\(name)' has no chunked-encryption header")
        }
        let salt = Array(header[0..<ChunkedEncryption.saltSize])
        derived = try ChunkedEncryption.Derived(inputKey: inputKey, salt: salt, context: context)
        guard constantTimeEqual(derived.commitment, Array(header[ChunkedEncryption.saltSize...])) else {
            throw SignetError(
                .packageInvalid, "'\(name)' was not encrypted under this package's key for this path (its key commitment does not match)")
        }
        cipher = try AESGCM(key: derived.key)
        plaintextSize = plaintext
        chunkCount = plaintext / UInt64(ChunkedEncryption.chunkSize) + 1
    }

    /// The sealed size chunk `index` must have.
    package func sealedSize(ofChunk index: UInt64) -> Int {
        index + 1 < chunkCount
            ? ChunkedEncryption.sealedChunkSize
            : Int(plaintextSize % UInt64(ChunkedEncryption.chunkSize)) + ChunkedEncryption.tagSize
    }

    /// Opens chunk `index`: its plaintext, or a verification failure.
    package func open(_ sealed: some Collection<UInt8>, chunk index: UInt64, name: String) throws -> [UInt8] {
        guard index < chunkCount, sealed.count == sealedSize(ofChunk: index) else {
            throw SignetError(
                .packageInvalid, "'\(name)': chunk \(index) has \(sealed.count) bytes, not \(index < chunkCount ? sealedSize(ofChunk: index) : 0)")
        }
        guard let plain = try cipher.open(Array(sealed), nonce: derived.nonce(index)) else {
            throw SignetError(.packageInvalid, "'\(name)': chunk \(index) does not authenticate (altered, moved or from another file)")
        }
        return plain
    }

    /// Opens a whole sealed message held in memory.
    package static func open(_ sealed: [UInt8], inputKey: [UInt8], context: [UInt8], name: String) throws -> [UInt8] {
        let header = sealed.prefix(min(sealed.count, ChunkedEncryption.headerSize))
        let opener = try ChunkedOpener(header: header, sealedSize: UInt64(sealed.count), inputKey: inputKey, context: context, name: name)
        var out: [UInt8] = []
        out.reserveCapacity(Int(opener.plaintextSize))
        var offset = ChunkedEncryption.headerSize
        for index in 0..<opener.chunkCount {
            let size = opener.sealedSize(ofChunk: index)
            out += try opener.open(sealed[offset..<(offset + size)], chunk: index, name: name)
            offset += size
        }
        return out
    }
}

/// Compares two byte strings in time that depends on their length only.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
}
