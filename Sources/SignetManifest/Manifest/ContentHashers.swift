import SignetCore
import SignetCrypto

/// Everything a resource's bytes are checked against, computed in the one read that streams
/// them (FORMAT.md §2): the SHA-256 the manifest records, the digest its signatures are over
/// where the algorithm hashes otherwise, and the fs-verity digest where the manifest records one
/// (`pack --verity`; FORMAT.md §2, `verity`: checked by every install, with fs-verity or
/// without, never by a read of its own).
package final class ContentHashers {
    /// Why the bytes are not the signed content, or the digest the signatures are over.
    package enum Outcome: Equatable {
        /// They are: the digest the resource's signatures are over.
        case signed(Digest)
        /// They do not hash to the manifest's SHA-256 (or are not its size).
        case contentMismatch
        /// They hash to the manifest's SHA-256, but not to its fs-verity digest: the package
        /// was made with a wrong one.
        case verityMismatch
    }

    private let file: Manifest.File
    private let hashers: [Digest.Hasher]
    private let verity: VerityDigest?
    private var total: UInt64 = 0

    /// Hashers for `file`'s bytes, whose signatures use `algorithm`.
    package init(for file: Manifest.File, algorithm: SignatureAlgorithm) throws {
        self.file = file
        hashers = try (algorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, algorithm.digest]).map { try Digest.Hasher($0) }
        verity = file.verity == nil ? nil : try VerityDigest()
    }

    /// The next bytes of the file.
    package func update(_ bytes: UnsafeRawBufferPointer) throws {
        total &+= UInt64(bytes.count)
        hashers.forEach { $0.update(bytes) }
        try verity?.update(bytes)
    }

    /// Whether what was hashed is the signed content.
    package func finish() throws -> Outcome {
        let digests = try hashers.map { try $0.finalize() }
        guard total == file.size, file.content.matches(digests[0]) else { return .contentMismatch }
        if let verity, let expected = file.verity, !expected.matches(bytes: try verity.finalize()) { return .verityMismatch }
        return .signed(digests[digests.count - 1])
    }

    /// The message for a resource whose content is the signed SHA-256's but whose fs-verity
    /// digest is not the manifest's.
    package static func verityMessage(_ path: String) -> String {
        "'\(path)' does not match the fs-verity digest in the manifest (its content is the signed SHA-256's, so the package was made with a wrong digest): every device installing it with --verity would refuse it"
    }
}
