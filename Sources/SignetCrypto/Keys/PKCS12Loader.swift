public import SystemPackage
import Foundation
internal import COpenSSL
internal import CSignetOpenSSL
import Synchronization
import SignetCore

enum PKCS12Loader {
    static func load(_ p12: OpaquePointer, name: String, request: PassphraseRequest) throws -> PrivateKeyLoader.Loaded {
        // Files written without a passphrase use an empty one (NULL or "", both occur).
        var passphrase: Passphrase? = nil
        if PKCS12_mac_present(p12) == 1 {
            if PKCS12_verify_mac(p12, nil, 0) == 1 {
                passphrase = nil
            } else if PKCS12_verify_mac(p12, "", 0) == 1 {
                passphrase = Passphrase(bytes: [])
            } else {
                let given = try request.passphrase()
                let ok = given.withCString { pass, length in PKCS12_verify_mac(p12, pass, length) }
                guard ok == 1 else { throw request.wrongPassphrase }
                passphrase = given
            }
        } else {
            passphrase = try request.passphrase()
        }
        OpenSSLErrorQueue.clear()
        if let parsed = parse(p12, passphrase) {
            return try loaded(parsed, format: .pkcs12, name: name)
        }
        // Most likely RC2-40 or another cipher only OpenSSL's legacy provider has. Retry in a
        // separate library context that has it, so the process-wide context never does.
        let firstErrors = OpenSSLErrorQueue.drain().map(\.text)
        let legacyParsed = try LegacyProvider.withContext(for: name, after: firstErrors) { parse(p12, passphrase) }
        if let legacyParsed {
            let key = try legacyParsed.key.map { legacyKey -> OpaquePointer in
                defer { EVP_PKEY_free(legacyKey) }
                return try importIntoDefaultContext(legacyKey, name: name)
            }
            return try loaded(Parsed(key: key, certificate: legacyParsed.certificate), format: .pkcs12Legacy, name: name)
        }
        throw OpenSSLErrorQueue.error(
            .malformedKey, "PKCS#12 file '\(name)' could not be decrypted with the right passphrase; it is damaged or uses an algorithm OpenSSL does not have",
            path: name)
    }

    /// Moves a key decoded in the legacy context into the default one (through PKCS#8 in
    /// memory, which OpenSSL clears when freeing), so later operations never need the legacy provider.
    private static func importIntoDefaultContext(_ key: OpaquePointer, name: String) throws -> OpaquePointer {
        guard let info = EVP_PKEY2PKCS8(key) else {
            throw OpenSSLErrorQueue.error(.malformedKey, "the key in PKCS#12 file '\(name)' cannot be exported", path: name)
        }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        guard let imported = EVP_PKCS82PKEY_ex(info, nil, nil) else {
            throw OpenSSLErrorQueue.error(.malformedKey, "the key in PKCS#12 file '\(name)' cannot be used", path: name)
        }
        return imported
    }

    private struct Parsed {
        let key: OpaquePointer?
        let certificate: OpaquePointer?
    }

    private static func parse(_ p12: OpaquePointer, _ passphrase: Passphrase?) -> Parsed? {
        var key: OpaquePointer? = nil
        var certificate: OpaquePointer? = nil
        var chain: OpaquePointer? = nil
        let ok: Int32
        if let passphrase {
            ok = passphrase.withCString { pass, _ in PKCS12_parse(p12, pass, &key, &certificate, &chain) }
        } else {
            ok = PKCS12_parse(p12, nil, &key, &certificate, &chain)
        }
        if let chain { signet_sk_X509_pop_free(chain) }
        guard ok == 1 else { return nil }
        return Parsed(key: key, certificate: certificate)
    }

    private static func loaded(_ parsed: Parsed, format: KeyFormat, name: String) throws -> PrivateKeyLoader.Loaded {
        var certificateDER: [UInt8]? = nil
        if let certificate = parsed.certificate {
            defer { X509_free(certificate) }
            certificateDER = try derEncode("certificate") { i2d_X509(certificate, $0) }
        }
        guard let key = parsed.key else {
            throw SignetError(.malformedKey, "PKCS#12 file '\(name)' holds no private key; export it again with the key included", path: name)
        }
        return PrivateKeyLoader.Loaded(key: EVPKey(owning: key), format: format, certificateDER: certificateDER)
    }
}
