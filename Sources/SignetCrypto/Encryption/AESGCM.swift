internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore

/// AES-256-GCM through OpenSSL's EVP interface, with a 12-byte nonce, a 16-byte tag appended to
/// the ciphertext and no associated data: the owner of one `EVP_CIPHER_CTX`, keyed once, its
/// nonce set per message. Not for use from two threads at once.
final class AESGCM {
    private let context: OpaquePointer
    static let tagSize = 16

    init(key: [UInt8]) throws {
        guard key.count == 32 else { throw SignetError(.crypto, "AES-256-GCM takes a 32-byte key") }
        guard let cipher = FetchedCiphers.shared.aes256GCM else {
            throw OpenSSLErrorQueue.error(.crypto, "OpenSSL offers no AES-256-GCM (its default provider is not loaded)")
        }
        guard let context = EVP_CIPHER_CTX_new() else { throw OpenSSLErrorQueue.error(.crypto, "out of memory") }
        self.context = context
        // The key is set once; each message sets its nonce (EVP_*Init_ex2 with a nil cipher and key).
        guard EVP_CipherInit_ex2(context, cipher, key, nil, -1, nil) == 1 else {
            throw OpenSSLErrorQueue.error(.crypto, "AES-256-GCM refused its key")
        }
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    /// `plaintext` sealed: ciphertext ‖ tag.
    func seal(_ plaintext: [UInt8], nonce: [UInt8]) throws -> [UInt8] {
        var out: [UInt8] = []
        try seal(plaintext, nonce: nonce, appendingTo: &out)
        return out
    }

    /// `plaintext` sealed (ciphertext ‖ tag), appended to `out`.
    func seal(_ plaintext: [UInt8], nonce: [UInt8], appendingTo out: inout [UInt8]) throws {
        guard EVP_CipherInit_ex2(context, nil, nil, nonce, 1, nil) == 1 else { throw OpenSSLErrorQueue.error(.crypto, "AES-256-GCM refused a nonce") }
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: plaintext.count + Self.tagSize))
        var written: Int32 = 0, final: Int32 = 0
        let ok = out.withUnsafeMutableBufferPointer { whole -> Bool in
            let buffer = whole.baseAddress! + start
            guard EVP_CipherUpdate(context, buffer, &written, plaintext, Int32(plaintext.count)) == 1,
                EVP_CipherFinal_ex(context, buffer + Int(written), &final) == 1
            else { return false }
            return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_GET_TAG, Int32(Self.tagSize), buffer + plaintext.count) == 1
        }
        guard ok, Int(written + final) == plaintext.count else { throw OpenSSLErrorQueue.error(.crypto, "AES-256-GCM failed to seal") }
    }

    /// `sealed` (ciphertext ‖ tag) opened, or nil when it does not authenticate.
    func open(_ sealed: [UInt8], nonce: [UInt8]) throws -> [UInt8]? {
        guard sealed.count >= Self.tagSize else { return nil }
        let length = sealed.count - Self.tagSize
        guard EVP_CipherInit_ex2(context, nil, nil, nonce, 0, nil) == 1 else { throw OpenSSLErrorQueue.error(.crypto, "AES-256-GCM refused a nonce") }
        var tag = Array(sealed[length...])
        guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_AEAD_SET_TAG, Int32(Self.tagSize), &tag) == 1 else {
            throw OpenSSLErrorQueue.error(.crypto, "AES-256-GCM refused a tag")
        }
        // One extra byte: an empty message still gets a valid pointer to write to.
        var out = [UInt8](repeating: 0, count: length + 1)
        var written: Int32 = 0, final: Int32 = 0
        let authentic = out.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard EVP_CipherUpdate(context, buffer.baseAddress, &written, sealed, Int32(length)) == 1 else { return false }
            return EVP_CipherFinal_ex(context, buffer.baseAddress! + Int(written), &final) == 1
        }
        // A tag that does not match leaves an entry on OpenSSL's queue: it is the answer, not a fault.
        OpenSSLErrorQueue.clear()
        guard authentic, Int(written + final) == length else { return nil }
        out.removeLast()
        return out
    }
}

/// Explicitly fetched ciphers, kept for the life of the process.
final class FetchedCiphers: @unchecked Sendable {
    static let shared = FetchedCiphers()
    let aes256GCM: OpaquePointer?
    private init() { aes256GCM = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) }
}

/// HKDF-Expand (RFC 5869 §2.3) with SHA-256, through OpenSSL's KDF interface.
enum HKDF {
    static func expand(key: [UInt8], info: [UInt8], count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        guard signet_hkdf_sha256_expand(key, key.count, info, info.count, &out, count) == 1 else {
            throw OpenSSLErrorQueue.error(.crypto, "HKDF-Expand failed")
        }
        return out
    }
}
