internal import COpenSSL
import SignetCore
import SignetCrypto

/// A public key as TUF metadata states it (`keytype`, `scheme`, `keyval`), checked through
/// OpenSSL: `rsa` with `rsassa-pss-sha256|384|512` or `rsa-pkcs1v15-sha256|384|512` (PEM
/// SubjectPublicKeyInfo), `ecdsa` with `ecdsa-sha2-nistp256|384` (PEM; DER signatures), and
/// `ed25519` (64 hex digits; raw signatures). A key of another type or scheme is kept (the
/// metadata stays valid) but verifies nothing, so it never counts towards a threshold.
package struct TUFKey: Sendable {
    let keyType: String
    let scheme: String
    /// The key as OpenSSL holds it; nil for a key Signet cannot use.
    private let key: EVPKey?
    var evpKey: EVPKey? { key }
    /// Why the key cannot be used, for messages.
    let unusable: String?

    package init(json: TUFJSON) throws {
        guard let keyType = json["keytype"]?.stringValue, let scheme = json["scheme"]?.stringValue,
            let publicText = json["keyval"]?["public"]?.stringValue
        else {
            throw TUFMetadata.malformed("a key has no string keytype, scheme or keyval.public")
        }
        self.keyType = keyType
        self.scheme = scheme
        var loaded: EVPKey? = nil
        var why: String? = nil
        switch (keyType, scheme) {
        case ("rsa", "rsassa-pss-sha256"), ("rsa", "rsassa-pss-sha384"), ("rsa", "rsassa-pss-sha512"),
            ("rsa", "rsa-pkcs1v15-sha256"), ("rsa", "rsa-pkcs1v15-sha384"), ("rsa", "rsa-pkcs1v15-sha512"):
            loaded = Self.pem(publicText, baseID: EVP_PKEY_RSA)
            if let key = loaded, key.bits < 2048 { loaded = nil; why = "an RSA key below 2048 bits" }
        case ("ecdsa", "ecdsa-sha2-nistp256"), ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"):
            loaded = Self.pem(publicText, baseID: EVP_PKEY_EC, bits: 256)
        case ("ecdsa", "ecdsa-sha2-nistp384"), ("ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384"):
            loaded = Self.pem(publicText, baseID: EVP_PKEY_EC, bits: 384)
        case ("ed25519", "ed25519"):
            if let raw = [UInt8](hex: publicText), raw.count == 32 {
                OpenSSLErrorQueue.clear()
                loaded = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, raw.count).map(EVPKey.init(owning:))
                OpenSSLErrorQueue.clear()
            }
        default:
            why = "key type '\(keyType)' with scheme '\(scheme)' is not one Signet supports"
        }
        key = loaded
        unusable = loaded == nil ? (why ?? "its keyval.public is not a \(keyType) public key") : nil
    }

    /// A PEM public key of the given type (and curve size), or nil.
    private static func pem(_ text: String, baseID: Int32, bits: Int32? = nil) -> EVPKey? {
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        let pointer: OpaquePointer? = try? withMemoryBIO(Array(text.utf8)) { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        guard let pointer else { return nil }
        let key = EVPKey(owning: pointer)
        guard EVP_PKEY_get_base_id(pointer) == baseID else { return nil }
        if let bits, EVP_PKEY_get_bits(pointer) != bits { return nil }
        return key
    }

    /// True when `signature` is this key's valid signature over `message` (the canonical bytes
    /// of `signed`). Leaves OpenSSL's error queue empty.
    package func verifies(_ signature: [UInt8], over message: [UInt8]) -> Bool {
        guard let key, !signature.isEmpty else { return false }
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        if keyType == "ed25519" {
            guard let context = EVP_MD_CTX_new() else { return false }
            defer { EVP_MD_CTX_free(context) }
            guard EVP_DigestVerifyInit_ex(context, nil, nil, nil, nil, key.pointer, nil) == 1 else { return false }
            return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
        }
        let algorithm: DigestAlgorithm = scheme.hasSuffix("384") ? .sha384 : scheme.hasSuffix("512") ? .sha512 : .sha256
        guard let digest = try? Digest.compute(message, algorithm: algorithm), let md = algorithm.md,
            let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil)
        else { return false }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_verify_init(context) == 1, EVP_PKEY_CTX_set_signature_md(context, md) == 1 else { return false }
        if keyType == "rsa" {
            if scheme.hasPrefix("rsassa-pss") {
                // securesystemslib verifies PSS with any salt length (PSS.AUTO); the hash and
                // MGF1 hash are the scheme's.
                guard EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PSS_PADDING) == 1,
                    EVP_PKEY_CTX_set_rsa_pss_saltlen(context, RSA_PSS_SALTLEN_AUTO) == 1,
                    EVP_PKEY_CTX_set_rsa_mgf1_md(context, md) == 1
                else { return false }
            } else {
                guard EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1 else { return false }
            }
        }
        return EVP_PKEY_verify(context, signature, signature.count, digest.bytes, digest.bytes.count) == 1
    }
}
