internal import COpenSSL
import SignetCore

/// Owns one reference to an `EVP_PKEY`. Created only once the C call that made the key succeeded.
/// An `EVP_PKEY` may be used for signing or verifying from several threads at once.
package final class EVPKey: @unchecked Sendable {
    package let pointer: OpaquePointer

    /// Takes ownership of `pointer` (one reference).
    package init(owning pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit { EVP_PKEY_free(pointer) }

    /// Modulus size in bits.
    package var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }
    /// Signature size in bytes (the modulus length for RSA).
    package var signatureSize: Int { Int(EVP_PKEY_get_size(pointer)) }

    /// True for a plain rsaEncryption key.
    var isRSA: Bool { EVP_PKEY_get_base_id(pointer) == EVP_PKEY_RSA }

    /// A name for the key type, as people know it.
    var typeName: String {
        switch EVP_PKEY_get_base_id(pointer) {
        case EVP_PKEY_EC: return "EC"
        case EVP_PKEY_ED25519: return "Ed25519"
        case EVP_PKEY_ED448: return "Ed448"
        case EVP_PKEY_DSA: return "DSA"
        case EVP_PKEY_DH, EVP_PKEY_DHX: return "DH"
        case EVP_PKEY_X25519: return "X25519"
        case EVP_PKEY_RSA_PSS: return "RSA-PSS (restricted to PSS by its OID)"
        case EVP_PKEY_RSA: return "RSA"
        default:
            if let name = EVP_PKEY_get0_type_name(pointer) { return String(cString: name) }
            return "unknown"
        }
    }

    /// DER SubjectPublicKeyInfo of the public half.
    func subjectPublicKeyInfo() throws -> [UInt8] {
        try derEncode("public key") { i2d_PUBKEY(pointer, $0) }
    }
}

/// How a key file was encoded, as detected from its content. An open set.
public struct KeyFormat: Hashable, Sendable, CustomStringConvertible {
    /// A short human name ("PEM PKCS#8 (encrypted)").
    public let name: String
    /// Creates a format name. Prefer the static members.
    public init(_ name: String) { self.name = name }
    public var description: String { name }

    /// `-----BEGIN RSA PRIVATE KEY-----`.
    public static let pemPKCS1 = KeyFormat("PEM PKCS#1")
    /// A key on a PKCS#11 token (only its public half is ever in memory).
    public static let pkcs11 = KeyFormat("PKCS#11 token")
    /// `-----BEGIN RSA PRIVATE KEY-----` with `Proc-Type: 4,ENCRYPTED`.
    public static let pemPKCS1Encrypted = KeyFormat("PEM PKCS#1 (traditional encryption)")
    /// `-----BEGIN PRIVATE KEY-----`.
    public static let pemPKCS8 = KeyFormat("PEM PKCS#8")
    /// `-----BEGIN ENCRYPTED PRIVATE KEY-----`.
    public static let pemPKCS8Encrypted = KeyFormat("PEM PKCS#8 (encrypted)")
    /// DER PrivateKeyInfo.
    public static let derPKCS8 = KeyFormat("DER PKCS#8")
    /// DER EncryptedPrivateKeyInfo.
    public static let derPKCS8Encrypted = KeyFormat("DER PKCS#8 (encrypted)")
    /// DER RSAPrivateKey.
    public static let derPKCS1 = KeyFormat("DER PKCS#1")
    /// PKCS#12 with algorithms OpenSSL 3's default provider has (AES-256/PBKDF2, 3DES).
    public static let pkcs12 = KeyFormat("PKCS#12")
    /// PKCS#12 that needed OpenSSL's legacy provider (RC2-40 and similar).
    public static let pkcs12Legacy = KeyFormat("PKCS#12 (legacy encryption)")

    /// DER SubjectPublicKeyInfo.
    public static let derSPKI = KeyFormat("DER SubjectPublicKeyInfo")
    /// `-----BEGIN PUBLIC KEY-----`.
    public static let pemSPKI = KeyFormat("PEM SubjectPublicKeyInfo")
    /// DER RSAPublicKey.
    public static let derRSAPublicKey = KeyFormat("DER PKCS#1 RSAPublicKey")
    /// `-----BEGIN RSA PUBLIC KEY-----`.
    public static let pemRSAPublicKey = KeyFormat("PEM PKCS#1 RSAPublicKey")
    /// DER X.509 certificate.
    public static let derCertificate = KeyFormat("DER X.509 certificate")
    /// `-----BEGIN CERTIFICATE-----`.
    public static let pemCertificate = KeyFormat("PEM X.509 certificate")
}

/// Limits shared by the loaders.
enum KeyLimits {
    /// Below this, keys are refused unless the caller opts in (FORMAT.md §1).
    static let minimumBits = 2048
    /// Above this, a key is not a plausible signing key and verifying with it is a denial of service.
    static let maximumBits = 16384
    /// Key files are small; anything larger is the wrong file.
    static let maximumFileSize = 1 << 20
}

extension EVPKey {
    /// Checks the key is RSA of an acceptable size. `role` is "private key" or "public key".
    func requireAcceptableRSA(path: String, role: String, allowWeakKey: Bool, optInFlag: String) throws {
        guard isRSA else {
            throw SignetError(
                .unsupportedKeyType, "unsupported key type: \(typeName) in \(role) '\(path)' (Signet signs with RSA); use an RSA key of 2048 bits or more",
                path: path)
        }
        guard bits <= KeyLimits.maximumBits else {
            throw SignetError(.malformedKey, "\(role) '\(path)' is \(bits)-bit RSA, larger than the \(KeyLimits.maximumBits) bits Signet accepts", path: path)
        }
        guard bits >= KeyLimits.minimumBits || allowWeakKey else {
            throw SignetError(
                .weakKey,
                "\(role) '\(path)' is \(bits)-bit RSA; Signet refuses RSA keys below \(KeyLimits.minimumBits) bits. Use a stronger key, or pass \(optInFlag) if you must",
                path: path)
        }
    }
}

/// Parses the whole of `der` with a `d2i_*` function; nil unless it consumed every byte.
package func parseDER(_ der: [UInt8], _ d2i: (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> OpaquePointer?) -> (OpaquePointer, consumedAll: Bool)? {
    der.withUnsafeBufferPointer { buffer -> (OpaquePointer, Bool)? in
        guard let base = buffer.baseAddress else { return nil }
        var cursor: UnsafePointer<UInt8>? = base
        guard let object = d2i(&cursor, buffer.count) else { return nil }
        return (object, cursor == base + buffer.count)
    }
}

/// Finds the PEM labels in `bytes`, in order ("PRIVATE KEY", "CERTIFICATE", ...).
func pemLabels(in bytes: [UInt8]) -> [String] {
    let text = String(decoding: bytes, as: UTF8.self)
    var labels: [String] = []
    var rest = text[...]
    while let begin = rest.range(of: "-----BEGIN ") {
        let after = rest[begin.upperBound...]
        guard let end = after.range(of: "-----") else { break }
        labels.append(String(after[..<end.lowerBound]))
        rest = after[end.upperBound...]
    }
    return labels
}

/// True when the bytes look like PEM (text with a BEGIN line) rather than binary DER.
package func looksLikePEM(_ bytes: [UInt8]) -> Bool {
    // DER starts with a SEQUENCE tag (0x30); PEM is text with a BEGIN line, possibly after comments.
    bytes.first != 0x30 && !pemLabels(in: bytes).isEmpty
}
