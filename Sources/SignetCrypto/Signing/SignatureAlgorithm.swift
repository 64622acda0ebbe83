internal import COpenSSL
import SignetCore

/// A signature scheme, named by the string ids of FORMAT.md §1. An open set.
public struct SignatureAlgorithm: Hashable, Sendable, CustomStringConvertible {
    /// The id used in manifests and on the command line (`rsa-pkcs1v15-sha256`).
    public let id: String
    /// The hash function signed over.
    public let digest: DigestAlgorithm
    /// True for RSASSA-PSS (salt length = digest length, MGF1 with the same hash).
    public let isPSS: Bool

    private init(id: String, digest: DigestAlgorithm, isPSS: Bool) {
        self.id = id
        self.digest = digest
        self.isPSS = isPSS
    }

    /// RSASSA-PKCS1-v1_5 over SHA-256: the default, byte-identical to `openssl dgst -sha256 -sign`.
    public static let rsaPKCS1v15SHA256 = SignatureAlgorithm(id: "rsa-pkcs1v15-sha256", digest: .sha256, isPSS: false)
    /// RSASSA-PKCS1-v1_5 over SHA-384.
    public static let rsaPKCS1v15SHA384 = SignatureAlgorithm(id: "rsa-pkcs1v15-sha384", digest: .sha384, isPSS: false)
    /// RSASSA-PKCS1-v1_5 over SHA-512.
    public static let rsaPKCS1v15SHA512 = SignatureAlgorithm(id: "rsa-pkcs1v15-sha512", digest: .sha512, isPSS: false)
    /// RSASSA-PSS over SHA-256, MGF1-SHA-256, 32-byte salt.
    public static let rsaPSSSHA256 = SignatureAlgorithm(id: "rsa-pss-sha256", digest: .sha256, isPSS: true)

    /// The default algorithm.
    public static let `default` = rsaPKCS1v15SHA256
    /// Every supported algorithm.
    public static let all: [SignatureAlgorithm] = [.rsaPKCS1v15SHA256, .rsaPKCS1v15SHA384, .rsaPKCS1v15SHA512, .rsaPSSSHA256]

    /// Looks an algorithm up by its id; nil if Signet does not support it.
    public init?(id: String) {
        guard let found = Self.all.first(where: { $0.id == id }) else { return nil }
        self = found
    }

    public var description: String { id }

    /// Sets padding, digest and (for PSS) salt length and MGF1 hash on a sign or verify context.
    func configure(_ context: OpaquePointer) -> Bool {
        // Never a null digest: OpenSSL would take it as "sign the raw input".
        guard let md = digest.md, EVP_PKEY_CTX_set_signature_md(context, md) == 1 else { return false }
        if isPSS {
            return EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PSS_PADDING) == 1
                // Exactly the digest length, when signing and when verifying (FORMAT.md §4).
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(context, RSA_PSS_SALTLEN_DIGEST) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(context, md) == 1
        }
        return EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1
    }
}
