internal import COpenSSL
internal import CPKCS11
internal import CSignetOpenSSL
import SignetCore

/// A token key as a device's decryption key (FORMAT.md §8): OpenSSL's CMS code opens the
/// envelope with an `EVP_PKEY` whose private operation is the token's `C_Decrypt`, so the key
/// never leaves the token and OpenSSL still does the padding checks.
extension TokenKey {
    /// An `EVP_PKEY` with this key's public numbers whose private operation runs on the token.
    /// It holds this token key (and its session) until OpenSSL frees it.
    func decryptingKey() throws -> EVPKey {
        let context = Unmanaged.passRetained(self).toOpaque()
        guard let pointer = signet_token_rsa_key(publicKey.pointer, context, tokenDecrypt, tokenRelease) else {
            Unmanaged<TokenKey>.fromOpaque(context).release()
            throw OpenSSLErrorQueue.error(.crypto, "OpenSSL cannot use the key on \(tokenDescription) for decryption")
        }
        return EVPKey(owning: pointer)
    }

    /// Decrypts `input` on the token into `output`: raw RSA (`CKM_RSA_X_509`, OpenSSL then checks
    /// the OAEP encoding) or PKCS#1 v1.5 (`CKM_RSA_PKCS`). The count written, or nil when the
    /// token refuses (not this key's ciphertext, or a mechanism it does not offer).
    func decrypt(_ input: UnsafeRawBufferPointer, raw: Bool, into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard let session = try? takeSession() else { return nil }
        var healthy = true
        defer { if healthy { idle.withLock { $0.append(session) } } else { _ = functions.C_CloseSession(session) } }
        var mechanism = CK_MECHANISM()
        mechanism.mechanism = CK_MECHANISM_TYPE(raw ? CKM_RSA_X_509 : CKM_RSA_PKCS)
        guard functions.C_DecryptInit(session, &mechanism, handle) == CKR_OK else { return nil }
        var data = [UInt8](input)
        var produced = CK_ULONG(output.count)
        let rv = functions.C_Decrypt(session, &data, CK_ULONG(data.count), output.baseAddress?.assumingMemoryBound(to: CK_BYTE.self), &produced)
        if rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED || rv == CKR_DEVICE_REMOVED || rv == CKR_TOKEN_NOT_PRESENT { healthy = false }
        guard rv == CKR_OK, Int(produced) <= output.count else { return nil }
        let count = Int(produced)
        // Raw RSA is the modulus length, leading zeros included (some tokens drop them).
        if raw, count < output.count {
            let base = output.baseAddress!
            memmove(base + (output.count - count), base, count)
            memset(base, 0, output.count - count)
            return output.count
        }
        return count
    }
}

/// The token key's private operation, for OpenSSL (`signet_token_rsa_key`).
private let tokenDecrypt: signet_token_decrypt_fn = { context, from, length, to, capacity, padding in
    guard let context, let from, let to, length >= 0, capacity >= 0 else { return -1 }
    let key = Unmanaged<TokenKey>.fromOpaque(context).takeUnretainedValue()
    let raw: Bool
    switch padding {
    case signet_RSA_NO_PADDING(): raw = true
    case signet_RSA_PKCS1_PADDING(): raw = false
    default: return -1
    }
    let done = key.decrypt(
        UnsafeRawBufferPointer(start: from, count: Int(length)), raw: raw, into: UnsafeMutableRawBufferPointer(start: to, count: Int(capacity)))
    return done.map(Int32.init) ?? -1
}

private let tokenRelease: signet_token_release_fn = { context in
    guard let context else { return }
    Unmanaged<TokenKey>.fromOpaque(context).release()
}
