internal import COpenSSL
import Foundation
import SignetCore

/// What a note signature is: a plain Ed25519 signature over the note's text (type 0x01,
/// c2sp.org/signed-note: a log's), or a timestamped Ed25519 cosignature over
/// `cosignature/v1`, the time and the text (type 0x04, c2sp.org/tlog-cosignature: a witness's).
public enum NoteSignatureType: UInt8, Sendable, Hashable {
    case ed25519 = 0x01
    case cosignatureV1 = 0x04
}

/// A signed note's verifier key, `NAME+KEYHASH+BASE64(TYPE || ED25519 PUBLIC KEY)`
/// (c2sp.org/signed-note): a log's key (type 0x01), or a witness's (0x04).
public struct NoteVerifierKey: Sendable, Hashable, CustomStringConvertible {
    public let name: String
    public let type: NoteSignatureType
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
        guard raw.count == 33, let type = NoteSignatureType(rawValue: raw[0]) else {
            throw SignetError(
                .unsupportedKeyType, "the note verifier key '\(parts[0])' is not an Ed25519 key (type 0x01) or cosigner key (0x04) of 32 bytes")
        }
        try self.init(name: String(parts[0]), publicKey: Array(raw[1...]), type: type)
        guard keyHash == hash else {
            throw SignetError(.malformedKey, "the note verifier key '\(parts[0])' names key hash \(parts[1]), not its own \(hashText)")
        }
    }

    /// The verifier key of `publicKey` (32 bytes of Ed25519) under `name`.
    public init(name: String, publicKey: [UInt8], type: NoteSignatureType = .ed25519) throws {
        guard Self.isValidName(name) else { throw SignetError(.malformedKey, "'\(name)' is not a note key name (no spaces, no '+')") }
        guard publicKey.count == 32 else { throw SignetError(.malformedKey, "an Ed25519 public key is 32 bytes, not \(publicKey.count)") }
        self.name = name
        self.publicKey = publicKey
        self.type = type
        let digest = Self.sha256(Array(name.utf8) + [0x0a, type.rawValue] + publicKey)
        keyHash = digest[0..<4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// NAME+KEYHASH+BASE64.
    public var description: String { "\(name)+\(hashText)+\(([type.rawValue] + publicKey).base64EncodedString())" }

    var hashText: String { String(format: "%08x", keyHash) }

    /// A name is non-empty UTF-8 with no white space and no '+'.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.contains("+") && !name.unicodeScalars.contains { $0.properties.isWhitespace }
    }

    /// Whether `signature` (the bytes after the key hash) is this key's over the note text
    /// `text`; for a cosignature, also its time.
    func verifies(noteSignature signature: [UInt8], text: [UInt8]) -> (valid: Bool, time: UInt64?) {
        switch type {
        case .ed25519: return (verifies(signature, over: text), nil)
        case .cosignatureV1:
            guard signature.count == 72 else { return (false, nil) }
            let time = signature[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            guard time <= UInt64(Int64.max) else { return (false, nil) }
            return (verifies(Array(signature[8...]), over: Self.cosigned(text, time: time)), time)
        }
    }

    /// What a cosigner signs: `cosignature/v1`, `time T`, then the note's text.
    static func cosigned(_ text: [UInt8], time: UInt64) -> [UInt8] { Array("cosignature/v1\ntime \(time)\n".utf8) + text }

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

    /// From the signer-key text form (type 0x01, or 0x04 for a cosigner).
    public init(_ text: String) throws {
        let parts = text.split(separator: "+", maxSplits: 4, omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0] == "PRIVATE", parts[1] == "KEY", let raw = [UInt8](base64: String(parts[4])), raw.count == 33,
            let type = NoteSignatureType(rawValue: raw[0])
        else { throw SignetError(.malformedKey, "not a note signer key (PRIVATE+KEY+NAME+KEYHASH+BASE64 of an Ed25519 seed)") }
        guard let pointer = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, Array(raw[1...]), 32) else {
            throw SignetError(.malformedKey, "the note signer key's seed is not an Ed25519 key")
        }
        try self.init(name: String(parts[2]), key: EVPKey(owning: pointer), type: type)
        guard verifier.hashText == parts[3] else { throw SignetError(.malformedKey, "the note signer key names key hash \(parts[3]), not its own") }
    }

    /// From a PEM (PKCS#8) Ed25519 private key, under `name`: a log's key, or (`type`
    /// `.cosignatureV1`) a witness's.
    public init(name: String, pem: [UInt8], type: NoteSignatureType = .ed25519) throws {
        // The memory BIO reads `pem` in place: only while the buffer is pinned.
        guard let pointer = try withMemoryBIO(pem, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw SignetError(.malformedKey, "not a PEM private key")
        }
        let key = EVPKey(owning: pointer)
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_ED25519 else {
            throw SignetError(.unsupportedKeyType, "a log's key is Ed25519 (c2sp.org/tlog-checkpoint), not \(key.typeName)")
        }
        try self.init(name: name, key: key, type: type)
    }

    private init(name: String, key: EVPKey, type: NoteSignatureType) throws {
        var length = 32
        var raw = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_get_raw_public_key(key.pointer, &raw, &length) == 1, length == 32 else {
            throw SignetError(.malformedKey, "cannot read the Ed25519 key's public half")
        }
        verifier = try NoteVerifierKey(name: name, publicKey: raw, type: type)
        self.key = key
    }

    /// The note signature of `text` (after the key hash): the Ed25519 signature, or for a
    /// cosigner the time (big-endian, 8 bytes) and the signature over the cosigned message.
    func noteSignature(_ text: [UInt8], time: UInt64) throws -> [UInt8] {
        switch verifier.type {
        case .ed25519: return try sign(text)
        case .cosignatureV1:
            guard time <= UInt64(Int64.max) else { throw SignetError(.usage, "a cosignature's time is at most 2^63 - 1") }
            return withUnsafeBytes(of: time.bigEndian) { Array($0) } + (try sign(NoteVerifierKey.cosigned(text, time: time)))
        }
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
