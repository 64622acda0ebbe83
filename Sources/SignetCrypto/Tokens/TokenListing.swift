import Foundation
internal import CPKCS11
import SignetCore

/// A private key a token holds, as `signet key show 'pkcs11:token=…'` lists it.
public struct TokenKeyInfo: Sendable {
    /// Its label (`CKA_LABEL`), "" when it has none.
    public let label: String
    /// Its `CKA_ID` bytes.
    public let id: [UInt8]
    /// "RSA", or the PKCS#11 key type number of another kind (which Signet cannot sign with).
    public let type: String
    /// The modulus size of an RSA key.
    public let bits: Int?
    /// The key id of an RSA key's public half (FORMAT.md §1), what `--pubkey` and `--pin` match.
    public let keyID: KeyID?
    /// A URI naming exactly this key on its token, for `--key`.
    public let uri: String
}

extension PrivateKey {
    /// The private keys on the token `uri` names (a URI that names no key is fine:
    /// `pkcs11:token=release`), logging in with the PIN as ``init(pkcs11:module:pin:allowWeakKey:environment:)``
    /// does when the token requires it.
    ///
    /// - Returns: the token's description ("token 'release' (serial …)") and its keys.
    public static func tokenKeys(
        pkcs11 uri: String, module: String? = nil, pin: PassphraseSource? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws -> (token: String, keys: [TokenKeyInfo]) {
        let parsed = try PKCS11URI(uri, requiringKey: false)
        guard let modulePath = module ?? parsed.modulePath ?? PKCS11Module.defaultPath(environment: environment) else {
            throw SignetError(
                .usage,
                "no PKCS#11 module to reach \(parsed): give --pkcs11-module PATH (for SoftHSM2: /usr/lib/softhsm/libsofthsm2.so) or set SIGNET_PKCS11_MODULE")
        }
        let loaded = try PKCS11Module.load(modulePath)
        let functions = loaded.functions.pointee
        let opened = try TokenKey.openToken(parsed, module: loaded, pin: pin)
        defer { _ = functions.C_CloseSession(opened.session) }
        let session = opened.session
        let tokenPart = parsed.token.map { "token=\(PKCS11URI.percentEncoded($0))" } ?? parsed.serial.map { "serial=\(PKCS11URI.percentEncoded($0))" } ?? ""
        var keys: [TokenKeyInfo] = []
        for object in try TokenKey.find(functions, session, class: CKO_PRIVATE_KEY, label: parsed.object, id: parsed.id) {
            let label = (try TokenKey.attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_LABEL))).map { String(decoding: $0, as: UTF8.self) } ?? ""
            let id = try TokenKey.attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_ID)) ?? []
            let keyType = try TokenKey.attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)).map(TokenKey.number) ?? nil
            var bits: Int? = nil
            var keyID: KeyID? = nil
            if keyType == CK_KEY_TYPE(CKK_RSA), case let (modulus?, exponent?) = try TokenKey.rsaNumbers(functions, session, object) {
                if let key = try? TokenKey.rsaPublicKey(modulus: modulus, exponent: exponent),
                    let publicKey = try? PublicKey(key: key, format: .pkcs11, certificateDER: nil, source: uri)
                {
                    bits = publicKey.bits
                    keyID = publicKey.keyID
                }
            }
            let parts = [tokenPart, "object=\(PKCS11URI.percentEncoded(label))", id.isEmpty ? "" : "id=" + id.map { String(format: "%%%02x", $0) }.joined()]
            keys.append(
                TokenKeyInfo(
                    label: label, id: id, type: keyType == CK_KEY_TYPE(CKK_RSA) ? "RSA" : keyType.map { "CKK \($0)" } ?? "unknown",
                    bits: bits, keyID: keyID, uri: "pkcs11:" + parts.filter { !$0.isEmpty }.joined(separator: ";")))
        }
        return (opened.description, keys.sorted { $0.label == $1.label ? $0.id.lexicographicallyPrecedes($1.id) : $0.label < $1.label })
    }
}
