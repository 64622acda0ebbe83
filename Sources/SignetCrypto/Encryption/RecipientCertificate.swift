internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore

/// An X.509 certificate a package is sealed to (FORMAT.md §8): an RSA key (2048 bits or more)
/// or an EC P-256 key. A value over a private owner of the `X509`.
public struct RecipientCertificate: Sendable {
    package let owner: X509Owner
    /// Where it came from, for messages.
    public let source: String
    /// "RSA" or "EC P-256".
    public let keyType: String
    /// The subject, as RFC 2253 prints it.
    public let subject: String
    /// Its identifier in an envelope: its subject key identifier ("key id 94ded2…"), or issuer
    /// and serial number where it has none ("CN=Devices, serial 0x1f").
    public let identifier: String
    /// Whether it has a subject key identifier (the envelope then names it by that).
    package let hasKeyIdentifier: Bool

    /// Loads one certificate, DER or PEM.
    public init(contentsOf path: String) throws {
        try self.init(bytes: try readSmallFile(path, what: "recipient certificate", limit: CMSEnvelope.maximumSize), name: path)
    }

    /// Every certificate in `bytes` (PEM with several blocks, or one DER certificate).
    public static func all(bytes: [UInt8], name: String) throws -> [RecipientCertificate] {
        if let (der, complete) = parseDER(bytes, { d2i_X509(nil, $0, $1) }) {
            guard complete else {
                X509_free(der)
                throw SignetError(.malformedInput, "'\(name)' holds bytes after its certificate", path: name)
            }
            return [try RecipientCertificate(owning: der, name: name)]
        }
        var found: [RecipientCertificate] = []
        try withMemoryBIO(bytes) { bio in
            while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
                found.append(try RecipientCertificate(owning: certificate, name: name))
                guard found.count <= CMSEnvelope.maximumRecipients else {
                    throw SignetError(.malformedInput, "'\(name)' holds more than \(CMSEnvelope.maximumRecipients) certificates", path: name)
                }
            }
        }
        OpenSSLErrorQueue.clear() // the end of the PEM blocks reads as an error
        guard !found.isEmpty else {
            throw SignetError(.malformedInput, "'\(name)' holds no X.509 certificate (DER or PEM)", path: name)
        }
        return found
    }

    init(bytes: [UInt8], name: String) throws {
        let all = try Self.all(bytes: bytes, name: name)
        guard all.count == 1 else {
            throw SignetError(.malformedInput, "'\(name)' holds \(all.count) certificates; give a file with one, or a list with --encrypt-to-list", path: name)
        }
        self = all[0]
    }

    private init(owning certificate: OpaquePointer, name: String) throws {
        owner = X509Owner(certificate)
        source = name
        guard let key = X509_get0_pubkey(certificate) else {
            throw OpenSSLErrorQueue.error(.malformedInput, "the certificate in '\(name)' has no readable public key", path: name)
        }
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA:
            guard EVP_PKEY_get_bits(key) >= 2048 else {
                throw SignetError(
                    .weakKey, "the certificate in '\(name)' holds a \(EVP_PKEY_get_bits(key))-bit RSA key; recipients need 2048 bits or more", path: name)
            }
            keyType = "RSA"
        case EVP_PKEY_EC:
            var group = [CChar](repeating: 0, count: 64)
            var length = 0
            guard EVP_PKEY_get_group_name(key, &group, group.count, &length) == 1, String(cString: group) == "prime256v1" else {
                throw SignetError(.unsupportedKeyType, "the certificate in '\(name)' holds an EC key on a curve other than P-256", path: name)
            }
            keyType = "EC P-256"
        default:
            throw SignetError(
                .unsupportedKeyType, "the certificate in '\(name)' holds a key that cannot receive a package (RSA or EC P-256 only)", path: name)
        }
        subject = Self.name(X509_get_subject_name(certificate))
        let serial = X509_get0_serialNumber(certificate).flatMap { ASN1_INTEGER_to_BN($0, nil) }
        defer { BN_free(serial) }
        let hex = serial.flatMap { BN_bn2hex($0) }
        defer { signet_OPENSSL_free(hex) }
        if let keyID = X509_get0_subject_key_id(certificate), let bytes = ASN1_STRING_get0_data(keyID) {
            hasKeyIdentifier = true
            identifier = "key id " + [UInt8](UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(keyID)))).hexString
        } else {
            hasKeyIdentifier = false
            identifier = "\(Self.name(X509_get_issuer_name(certificate))), serial 0x\(hex.map { String(cString: $0).lowercased() } ?? "?")"
        }
    }

    static func name(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "?" }
        defer { BIO_free(bio) }
        guard X509_NAME_print_ex(bio, name, 0, signet_XN_FLAG_RFC2253()) >= 0 else { return "?" }
        var data: UnsafeMutablePointer<CChar>? = nil
        let length = signet_BIO_get_mem_data(bio, &data)
        guard let data, length > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }
}

/// Owns one reference to an `X509`.
package final class X509Owner: @unchecked Sendable {
    package let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { X509_free(pointer) }
}
