import Foundation
public import SystemPackage
internal import COpenSSL
import SignetCore

/// A hash function Signet uses. An open set: new members can be added.
public struct DigestAlgorithm: Hashable, Sendable, CustomStringConvertible {
    /// OpenSSL's name for it ("SHA256").
    public let name: String
    /// Digest length in bytes.
    public let size: Int

    private init(name: String, size: Int) {
        self.name = name
        self.size = size
    }

    /// SHA-256.
    public static let sha256 = DigestAlgorithm(name: "SHA256", size: 32)
    /// SHA-384.
    public static let sha384 = DigestAlgorithm(name: "SHA384", size: 48)
    /// SHA-512.
    public static let sha512 = DigestAlgorithm(name: "SHA512", size: 64)

    public var description: String { name }

    /// The fetched implementation. Fetching once avoids an implicit fetch per operation.
    /// OpenSSL's digest, nil when the provider lacks it (a broken OpenSSL configuration): the
    /// operation that needs it then fails with a crypto error instead of stopping the process.
    package var md: OpaquePointer? { FetchedDigests.shared.md(for: self) }
}

/// Explicitly fetched `EVP_MD`s, kept for the life of the process (they are immutable and thread-safe).
final class FetchedDigests: @unchecked Sendable {
    static let shared = FetchedDigests()
    private let sha256: OpaquePointer?
    private let sha384: OpaquePointer?
    private let sha512: OpaquePointer?

    private init() {
        // The default provider always has SHA-2; a configuration without it makes every
        // operation that needs it fail (with OpenSSL's words), never a trap.
        func fetch(_ name: String) -> OpaquePointer? { EVP_MD_fetch(nil, name, nil) }
        sha256 = fetch("SHA256")
        sha384 = fetch("SHA384")
        sha512 = fetch("SHA512")
    }

    func md(for algorithm: DigestAlgorithm) -> OpaquePointer? {
        switch algorithm.name {
        case "SHA384": return sha384
        case "SHA512": return sha512
        default: return sha256
        }
    }
}

/// A computed message digest.
public struct Digest: Hashable, Sendable {
    /// The hash function.
    public let algorithm: DigestAlgorithm
    /// The digest bytes.
    public let bytes: [UInt8]
    /// Lowercase hex of ``bytes``.
    public var hex: String { bytes.hexString }

    /// Whether `hex` is exactly these bytes in lowercase hex (compared without building a string).
    package func matches(hex: String) -> Bool {
        let digits = Array("0123456789abcdef".utf8)
        var text = hex.utf8.makeIterator()
        for byte in bytes {
            guard text.next() == digits[Int(byte >> 4)], text.next() == digits[Int(byte & 0x0f)] else { return false }
        }
        return text.next() == nil
    }

    /// Creates a digest value from bytes computed elsewhere.
    public init?(algorithm: DigestAlgorithm, bytes: [UInt8]) {
        guard bytes.count == algorithm.size else { return nil }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// Hashes bytes in memory.
    public static func compute(_ bytes: [UInt8], algorithm: DigestAlgorithm) throws -> Digest {
        let hasher = try Hasher(algorithm)
        bytes.withUnsafeBytes { hasher.update($0) }
        return try hasher.finalize()
    }

    /// Hashes a regular file, streaming it in fixed-size chunks: memory use does not depend on its size.
    public static func compute(fileAt path: String, algorithm: DigestAlgorithm) throws -> Digest {
        let file = try InputFile.open(path, what: "file")
        let hasher = try Hasher(algorithm)
        try file.forEachChunk { hasher.update($0) }
        return try hasher.finalize()
    }

    /// Hashes an open file from its current position (the descriptor the caller already checked).
    package static func compute(descriptorOf file: InputFile, algorithm: DigestAlgorithm) throws -> Digest {
        let hasher = try Hasher(algorithm)
        try file.forEachChunk { hasher.update($0) }
        return try hasher.finalize()
    }

    /// Incremental hashing. Owns an `EVP_MD_CTX`.
    package final class Hasher {
        private let context: OpaquePointer
        let algorithm: DigestAlgorithm

        package init(_ algorithm: DigestAlgorithm) throws {
            OpenSSLErrorQueue.clear()
            guard let context = EVP_MD_CTX_new() else {
                throw OpenSSLErrorQueue.error(.crypto, "could not allocate a digest context")
            }
            self.context = context
            self.algorithm = algorithm
            try restart() // a throw here frees the context in deinit
        }

        deinit { EVP_MD_CTX_free(context) }

        /// Starts over, for the next message (the context is reused, not reallocated).
        package func restart() throws {
            guard let md = algorithm.md, EVP_DigestInit_ex2(context, md, nil) == 1 else {
                throw OpenSSLErrorQueue.error(.crypto, "could not start \(algorithm.name)")
            }
        }

        package func update(_ chunk: UnsafeRawBufferPointer) {
            guard chunk.count > 0 else { return }
            // EVP_DigestUpdate on an initialised SHA-2 context cannot fail.
            EVP_DigestUpdate(context, chunk.baseAddress, chunk.count)
        }

        package func finalize() throws -> Digest {
            var finished = true
            let out = [UInt8](unsafeUninitializedCapacity: Int(EVP_MAX_MD_SIZE)) { buffer, count in
                var length: UInt32 = 0
                finished = EVP_DigestFinal_ex(context, buffer.baseAddress, &length) == 1
                count = finished ? Int(length) : 0
            }
            guard finished, let digest = Digest(algorithm: algorithm, bytes: out) else {
                throw OpenSSLErrorQueue.error(.crypto, "could not finish \(algorithm.name)")
            }
            return digest
        }
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Digest {
    /// The digest of bytes in memory (`Data`, a slice, ...).
    public static func compute(_ data: some DataProtocol, algorithm: DigestAlgorithm) throws -> Digest {
        try compute([UInt8](data), algorithm: algorithm)
    }

    /// The digest of a file, streamed.
    public static func compute(fileAt path: FilePath, algorithm: DigestAlgorithm) throws -> Digest {
        try compute(fileAt: path.string, algorithm: algorithm)
    }
}
