internal import COpenSSL
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

    /// An RSA key (else EC P-256).
    var isRSA: Bool { key.isRSA }

    public var description: String {
        certificate.map { "the key of '\($0.subject)' (\(source))" } ?? "the key '\(source)'"
    }
}
