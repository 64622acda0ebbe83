internal import COpenSSL
import Foundation
import SignetCore

/// A signed note's verifier key, `NAME+KEYHASH+BASE64(0x01 || ED25519 PUBLIC KEY)`
/// (c2sp.org/signed-note): a log's key, or a witness's.
public struct NoteVerifierKey: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    /// The first four bytes of SHA-256(NAME || "\n" || 0x01 || KEY), big-endian.
    public let keyHash: UInt32
    /// The 32 bytes of the Ed25519 public key.
    public let publicKey: [UInt8]

    /// Reads a verifier key's text; refuses a name with a space or '+', a hash that does not
    /// match, a type other than Ed25519 (0x01) or a key that is not 32 bytes.
    public init(_ text: String) throws {
        // The base64 may hold '+' too: NAME and KEYHASH are the first two fields.
        let parts = text.split(separator: "+", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, Self.isValidName(String(parts[0])), parts[1].count == 8, let hash = UInt32(parts[1], radix: 16),
            parts[1].allSatisfy({ $0.isHexDigit && !$0.isUppercase }), let raw = [UInt8](base64: String(parts[2]))
        else { throw SignetError(.malformedKey, "'\(text)' is not a note verifier key (NAME+KEYHASH+BASE64, c2sp.org/signed-note)") }
        guard raw.count == 33, raw[0] == 0x01 else {
            throw SignetError(.unsupportedKeyType, "the note verifier key '\(parts[0])' is not an Ed25519 key (type 0x01, 32 bytes)")
        }
        try self.init(name: String(parts[0]), publicKey: Array(raw[1...]))
        guard keyHash == hash else {
            throw SignetError(.malformedKey, "the note verifier key '\(parts[0])' names key hash \(parts[1]), not its own \(hashText)")
        }
    }

    /// The verifier key of `publicKey` (32 bytes of Ed25519) under `name`.
    public init(name: String, publicKey: [UInt8]) throws {
        guard Self.isValidName(name) else { throw SignetError(.malformedKey, "'\(name)' is not a note key name (no spaces, no '+')") }
        guard publicKey.count == 32 else { throw SignetError(.malformedKey, "an Ed25519 public key is 32 bytes, not \(publicKey.count)") }
        self.name = name
        self.publicKey = publicKey
        let digest = Self.sha256(Array(name.utf8) + [0x0a, 0x01] + publicKey)
        keyHash = digest[0..<4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// NAME+KEYHASH+BASE64.
    public var description: String { "\(name)+\(hashText)+\(([0x01] + publicKey).base64EncodedString())" }

    var hashText: String { String(format: "%08x", keyHash) }

    /// A name is non-empty UTF-8 with no white space and no '+'.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.contains("+") && !name.unicodeScalars.contains { $0.properties.isWhitespace }
    }

    func verifies(_ signature: [UInt8], over message: [UInt8]) -> Bool {
        guard signature.count == 64, let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, publicKey.count) else { return false }
        defer { EVP_PKEY_free(key) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = SHA256(bytes, bytes.count, &digest)
        return digest
    }
}

/// A signed note's signer: an Ed25519 private key under a name. Read from the note's own
/// text form (`PRIVATE+KEY+NAME+KEYHASH+BASE64(0x01 || SEED)`) or from a PEM PKCS#8 Ed25519
/// key; never printed.
public struct NoteSignerKey: Sendable {
    public let verifier: NoteVerifierKey
    private let key: EVPKey

    /// From the signer-key text form.
    public init(_ text: String) throws {
        let parts = text.split(separator: "+", maxSplits: 4, omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0] == "PRIVATE", parts[1] == "KEY", let raw = [UInt8](base64: String(parts[4])), raw.count == 33, raw[0] == 0x01
        else { throw SignetError(.malformedKey, "not a note signer key (PRIVATE+KEY+NAME+KEYHASH+BASE64 of an Ed25519 seed)") }
        guard let pointer = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, Array(raw[1...]), 32) else {
            throw SignetError(.malformedKey, "the note signer key's seed is not an Ed25519 key")
        }
        try self.init(name: String(parts[2]), key: EVPKey(owning: pointer))
        guard verifier.hashText == parts[3] else { throw SignetError(.malformedKey, "the note signer key names key hash \(parts[3]), not its own") }
    }

    /// From a PEM (PKCS#8) Ed25519 private key, under `name`.
    public init(name: String, pem: [UInt8]) throws {
        let bio = pem.withUnsafeBytes { BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }
        defer { BIO_free(bio) }
        guard let pointer = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else { throw SignetError(.malformedKey, "not a PEM private key") }
        let key = EVPKey(owning: pointer)
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_ED25519 else {
            throw SignetError(.unsupportedKeyType, "a log's key is Ed25519 (c2sp.org/tlog-checkpoint), not \(key.typeName)")
        }
        try self.init(name: name, key: key)
    }

    private init(name: String, key: EVPKey) throws {
        var length = 32
        var raw = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_get_raw_public_key(key.pointer, &raw, &length) == 1, length == 32 else {
            throw SignetError(.malformedKey, "cannot read the Ed25519 key's public half")
        }
        verifier = try NoteVerifierKey(name: name, publicKey: raw)
        self.key = key
    }

    func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw SignetError(.crypto, "cannot sign the note: no memory") }
        defer { EVP_MD_CTX_free(context) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSignInit(context, nil, nil, nil, key.pointer) == 1,
            EVP_DigestSign(context, &signature, &length, message, message.count) == 1, length == 64
        else { throw SignetError(.crypto, "cannot sign the note with \(verifier.name)'s Ed25519 key") }
        return signature
    }
}
