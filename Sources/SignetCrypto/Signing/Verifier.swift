import Foundation
public import SystemPackage
internal import COpenSSL
import SignetCore

/// The outcome of checking one signature. A verdict, not an error: "this signature is wrong"
/// is a value the caller branches on; an unreadable file is a thrown ``/SignetCore/SignetError``.
public struct VerificationResult: Sendable, Hashable {
    /// Why a signature was rejected. An open set.
    public struct Failure: Hashable, Sendable, CustomStringConvertible {
        /// Stable identifier, as in `--json` output.
        public let name: String
        /// Creates a failure kind. Prefer the static members.
        public init(_ name: String) { self.name = name }
        public var description: String { name }

        /// No trusted key of the right size verifies the signature.
        public static let badSignature = Failure("bad-signature")
        /// The signature's length is not the modulus length of any trusted key.
        public static let wrongLength = Failure("wrong-signature-length")
        /// Only a key the policy refuses (revoked, not pinned, other channel) verifies it.
        public static let untrusted = Failure("untrusted-signer")
        /// The caller passed a digest of another algorithm than the scheme signs: nothing can
        /// verify (a caller's mistake, reported rather than trapped on).
        public static let digestMismatch = Failure("digest-mismatch")
    }

    /// The scheme that was checked.
    public let algorithm: SignatureAlgorithm
    /// The trusted key that verified the signature; nil when it did not verify.
    public let signer: PublicKey?
    /// Why it did not verify; nil when it did.
    public let failure: Failure?
    /// A sentence for a person.
    public let message: String

    /// True when the signature verified with a trusted key.
    public var isValid: Bool { signer != nil }

    /// The ``/SignetCore/SignetError`` a caller that treats an invalid signature as a failure would throw.
    public func error(path: String?) -> SignetError? {
        guard let failure else { return nil }
        let code: SignetError.Code = failure == .wrongLength ? .wrongSignatureLength : failure == .untrusted ? .untrustedSigner : .badSignature
        return SignetError(code, message, path: path)
    }
}

/// Checks signatures against a ``TrustPolicy``.
public struct Verifier: Sendable {
    /// The keys and rules that decide who is trusted.
    public let policy: TrustPolicy

    /// Creates a verifier.
    public init(policy: TrustPolicy) {
        self.policy = policy
    }

    /// Verifies a signature over a digest. Any trusted key may have signed; the first that
    /// verifies is reported. A signature whose length is not exactly a key's modulus length
    /// is never accepted by that key (no trailing bytes, no short signatures).
    public func verify(signature: [UInt8], digest: Digest, algorithm: SignatureAlgorithm = .default) -> VerificationResult {
        guard digest.algorithm == algorithm.digest else {
            return VerificationResult(
                algorithm: algorithm, signer: nil, failure: .digestMismatch,
                message:
                    "a \(digest.algorithm) digest cannot be checked against \(algorithm.id), which signs \(algorithm.digest); compute the digest with \(algorithm.digest)"
            )
        }
        let result = verify(signature: signature, digest: digest, algorithm: algorithm, keys: policy.acceptedKeys)
        guard !result.isValid else { return result }
        // A key the policy knows but refuses (revoked, unpinned, other channel) is "untrusted", not "bad".
        let refused = policy.keys.filter { policy.refusal(for: $0.keyID) != nil }
        for key in refused where key.signatureLength == signature.count && Self.check(signature, digest: digest, key: key, algorithm: algorithm) {
            return VerificationResult(
                algorithm: algorithm, signer: nil, failure: .untrusted,
                message: "the signature is by key \(key.keyID.short), which the trust policy refuses: \(policy.refusal(for: key.keyID) ?? "")")
        }
        return result
    }

    private func verify(signature: [UInt8], digest: Digest, algorithm: SignatureAlgorithm, keys: [PublicKey]) -> VerificationResult {
        let policy = TrustPolicy(keys: keys)
        let sized = policy.keys.filter { $0.signatureLength == signature.count }
        guard !sized.isEmpty else {
            let expected = Set(policy.keys.map(\.signatureLength)).sorted().map(String.init).joined(separator: " or ")
            // A length some RSA key signs with (2048 bits and up, a whole number of 64-bit
            // words) points at another key; any other length at a damaged file.
            let otherKey = signature.count >= 256 && signature.count <= 2048 && signature.count % 8 == 0
            let why =
                otherKey
                ? "\(signature.count) bytes is what a \(signature.count * 8)-bit key signs, so another key than the trusted one\(policy.keys.count == 1 ? "" : "s") made it"
                : "the signature file may be truncated, have trailing bytes, or not be a raw signature (base64 or PEM text is not)"
            let message =
                policy.keys.isEmpty
                ? "no trusted key was given"
                : "the signature is \(signature.count) bytes; a signature by the trusted key\(policy.keys.count == 1 ? "" : "s") is exactly \(expected) bytes; \(why)"
            return VerificationResult(algorithm: algorithm, signer: nil, failure: .wrongLength, message: message)
        }
        for key in sized where Self.check(signature, digest: digest, key: key, algorithm: algorithm) {
            return VerificationResult(
                algorithm: algorithm, signer: key, failure: nil,
                message: "signature verified with key \(key.keyID.short) (\(algorithm.id))")
        }
        let tried = sized.map { $0.keyID.short }.joined(separator: ", ")
        return VerificationResult(
            algorithm: algorithm, signer: nil, failure: .badSignature,
            message:
                "the \(algorithm.id) signature does not verify with the trusted key\(sized.count == 1 ? "" : "s") \(tried): the content was modified, the signature belongs to other content, or another key or algorithm signed it"
        )
    }

    /// Verifies a signature over bytes in memory.
    public func verify(signature: [UInt8], bytes: [UInt8], algorithm: SignatureAlgorithm = .default) throws -> VerificationResult {
        verify(signature: signature, digest: try Digest.compute(bytes, algorithm: algorithm.digest), algorithm: algorithm)
    }

    /// Verifies a signature over a regular file, streaming it. Throws only for I/O problems.
    public func verify(signature: [UInt8], fileAt path: String, algorithm: SignatureAlgorithm = .default) throws -> VerificationResult {
        verify(signature: signature, digest: try Digest.compute(fileAt: path, algorithm: algorithm.digest), algorithm: algorithm)
    }

    /// One key, one signature. Leaves OpenSSL's error queue empty whatever the outcome.
    package static func check(_ signature: [UInt8], digest: Digest, key: PublicKey, algorithm: SignatureAlgorithm) -> Bool {
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.key.pointer, nil) else { return false }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_verify_init(context) == 1, algorithm.configure(context) else { return false }
        return EVP_PKEY_verify(context, signature, signature.count, digest.bytes, digest.bytes.count) == 1
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Verifier {
    /// Verifies a signature over bytes in memory (`Data`, a slice, ...).
    public func verify(signature: some DataProtocol, bytes: some DataProtocol, algorithm: SignatureAlgorithm = .default) throws -> VerificationResult {
        try verify(signature: [UInt8](signature), bytes: [UInt8](bytes), algorithm: algorithm)
    }

    /// Verifies a signature over a regular file, streaming it. Throws only for I/O problems.
    public func verify(signature: some DataProtocol, fileAt path: FilePath, algorithm: SignatureAlgorithm = .default) throws -> VerificationResult {
        try verify(signature: [UInt8](signature), fileAt: path.string, algorithm: algorithm)
    }
}
