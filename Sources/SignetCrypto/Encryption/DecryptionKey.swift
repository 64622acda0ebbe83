internal import COpenSSL
import Foundation
import SignetCore

/// A device's key for opening packages sealed to it (FORMAT.md §8): an RSA (2048 bits or
/// more) or EC P-256 private key, from PEM, DER PKCS#8 or PKCS#12 (plain or encrypted), with the
/// certificate it was sealed to when the file holds one (PKCS#12, or a PEM file with the key and
/// its certificate): the envelope's part for that certificate is then found by its identifier.
public struct DecryptionKey: Sendable, CustomStringConvertible {
    package let key: EVPKey
    /// The certificate the key belongs to, if the file holds it.
    public let certificate: RecipientCertificate?
    /// How the key file was encoded.
    public let format: KeyFormat
    /// Where it came from.
    public let source: String

    /// Loads a key file; `passphrase` is asked for only if it is encrypted.
    public init(contentsOf path: String, passphrase: PassphraseSource? = nil) throws {
        let file = try InputFile.open(path, what: "decryption key")
        let bytes = try file.readAll(limit: KeyLimits.maximumFileSize, what: "decryption key")
        try self.init(bytes: bytes, name: path, passphrase: passphrase)
    }

    /// Loads a key from bytes in memory; `name` is used in messages.
    public init(bytes: [UInt8], name: String = "<memory>", passphrase: PassphraseSource? = nil) throws {
        guard !bytes.isEmpty else { throw SignetError(.malformedKey, "decryption key '\(name)' is empty", path: name) }
        let request = PassphraseRequest(source: passphrase, keyName: name)
        let loaded =
            try looksLikePEM(bytes)
            ? PrivateKeyLoader.pem(bytes, name: name, request: request)
            : PrivateKeyLoader.der(bytes, name: name, request: request)
        let pointer = loaded.key.pointer
        switch EVP_PKEY_get_base_id(pointer) {
        case EVP_PKEY_RSA:
            guard loaded.key.bits >= 2048 else {
                throw SignetError(.weakKey, "decryption key '\(name)' is a \(loaded.key.bits)-bit RSA key; 2048 bits or more are needed", path: name)
            }
        case EVP_PKEY_EC:
            var group = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(pointer, &group, group.count, &length) == 1, String(cString: group) == "prime256v1" else {
                throw SignetError(.unsupportedKeyType, "decryption key '\(name)' is an EC key on a curve other than P-256", path: name)
            }
        default:
            throw SignetError(
                .unsupportedKeyType, "decryption key '\(name)' is a \(loaded.key.typeName) key; packages are sealed to RSA or EC P-256 keys", path: name)
        }
        key = loaded.key
        format = loaded.format
        source = name
        var certificate: RecipientCertificate? = nil
        if let der = loaded.certificateDER {
            certificate = try RecipientCertificate.all(bytes: der, name: name).first
        } else if looksLikePEM(bytes), pemLabels(in: bytes).contains("CERTIFICATE") {
            certificate = try RecipientCertificate.all(bytes: bytes, name: name).first
        }
        if let certificate {
            guard let certified = X509_get0_pubkey(certificate.owner.pointer), EVP_PKEY_eq(certified, pointer) == 1 else {
                throw SignetError(.malformedKey, "the certificate in '\(name)' is not the key's own", path: name)
            }
        }
        self.certificate = certificate
    }

    /// An RSA key of 2,048 bits or more on a PKCS#11 token (an HSM, a smart card, SoftHSM), named
    /// by an RFC 7512 URI such as `pkcs11:token=device;object=fleet-key`: the envelope's part is
    /// opened by the token's `C_Decrypt` and the key never leaves it. An RSA-OAEP part needs a
    /// token that offers raw RSA (`CKM_RSA_X_509`; OpenSSL checks the OAEP encoding); a part
    /// sealed with `--rsa-pkcs1` needs `CKM_RSA_PKCS`. Without the key's certificate, each RSA
    /// part is tried.
    ///
    /// - Parameters: as ``/SignetCrypto/PrivateKey/init(pkcs11:module:pin:allowWeakKey:environment:)``.
    public init(
        pkcs11 uri: String, module: String? = nil, pin: PassphraseSource? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws {
        let parsed = try PKCS11URI(uri)
        let modulePath = try PKCS11Module.path(for: parsed, module: module, environment: environment)
        let token = try TokenKey(uri: parsed, modulePath: modulePath, pin: pin, allowWeakKey: false)
        key = try token.decryptingKey()
        certificate = nil
        format = .pkcs11
        source = "\(parsed) on \(token.tokenDescription)"
    }

    /// An RSA key (else EC P-256).
    var isRSA: Bool { key.isRSA }

    public var description: String {
        certificate.map { "the key of '\($0.subject)' (\(source))" } ?? "the key '\(source)'"
    }
}
