internal import COpenSSL
import SignetCore
import SignetCrypto

/// An IMA digital signature, version 2, as the kernel and `evmctl` read it from `security.ima`
/// (or `user.ima`): `03 02 <hash algo> <4-byte key id> <2-byte big-endian length> <signature>`.
///
/// The signature itself is RSASSA-PKCS1-v1_5 over the file's digest: the same bytes as Signet's
/// `rsa-pkcs1v15-sha*` signatures, so one signature serves both.
public struct IMASignature: Sendable, Equatable {
    /// The attribute names.
    public static let userAttribute = "user.ima"
    /// Needs CAP_SYS_ADMIN to write; the kernel's IMA appraisal reads it.
    public static let securityAttribute = "security.ima"

    /// The kernel's hash algorithm number (`enum hash_algo`).
    public let hashAlgorithm: UInt8
    /// The last four bytes of the SHA-1 of the key's `RSAPublicKey` (its X.509 subject key id).
    public let keyID: [UInt8]
    /// The RSA signature.
    public let signature: [UInt8]

    /// The hash algorithm numbers of `include/uapi/linux/hash_info.h` for Signet's digests.
    static func kernelHash(_ digest: DigestAlgorithm) -> UInt8? {
        switch digest {
        case .sha256: 4
        case .sha384: 5
        case .sha512: 6
        default: nil
        }
    }

    /// The algorithm for a kernel hash number, if it is one Signet verifies with.
    package var signatureAlgorithm: SignatureAlgorithm? {
        switch hashAlgorithm {
        case 4: .rsaPKCS1v15SHA256
        case 5: .rsaPKCS1v15SHA384
        case 6: .rsaPKCS1v15SHA512
        default: nil
        }
    }

    /// Wraps a PKCS#1 v1.5 signature made by `key`; nil for PSS, which IMA v2 does not carry.
    package init?(signatureBytes: [UInt8], algorithm: SignatureAlgorithm, key: PublicKey) {
        guard !algorithm.isPSS, let hash = Self.kernelHash(algorithm.digest),
            let keyID = try? Self.keyID(of: key)
        else { return nil }
        self.hashAlgorithm = hash
        self.keyID = keyID
        self.signature = signatureBytes
    }

    /// Parses an attribute value; nil unless it is a well-formed v2 digital signature.
    package init?(bytes: [UInt8]) {
        guard bytes.count > 9, bytes[0] == 0x03, bytes[1] == 0x02 else { return nil }
        let length = Int(bytes[7]) << 8 | Int(bytes[8])
        guard bytes.count == 9 + length else { return nil }
        hashAlgorithm = bytes[2]
        keyID = Array(bytes[3..<7])
        signature = Array(bytes[9...])
    }

    /// The attribute value.
    package var bytes: [UInt8] {
        [0x03, 0x02, hashAlgorithm] + keyID + [UInt8(signature.count >> 8), UInt8(signature.count & 0xff)] + signature
    }

    /// `evmctl`'s v2 key id: the last 4 bytes of SHA-1 over the DER `RSAPublicKey`, which is also
    /// the tail of the subject key identifier RFC 5280 method 1 puts in certificates.
    ///
    /// - Parameter key: the signer's public key (RSA).
    /// - Returns: the 4-byte key id the kernel looks the key up by.
    public static func keyID(of key: PublicKey) throws -> [UInt8] {
        let der = try derEncode("RSA public key") { i2d_PublicKey(key.key.pointer, $0) }
        guard let sha1 = EVP_MD_fetch(nil, "SHA1", nil) else { throw OpenSSLErrorQueue.error(.crypto, "SHA-1 is unavailable") }
        defer { EVP_MD_free(sha1) }
        var digest = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 0
        guard EVP_Digest(der, der.count, &digest, &length, sha1, nil) == 1 else {
            throw OpenSSLErrorQueue.error(.crypto, "SHA-1 failed")
        }
        return Array(digest.suffix(4))
    }
}
