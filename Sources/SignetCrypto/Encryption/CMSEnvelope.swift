internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore

/// A CMS envelope (RFC 5652 §6 EnvelopedData; RFC 5083 AuthEnvelopedData) of a small content
/// (a package's sealed manifest, FORMAT.md §8), made and opened by OpenSSL's CMS code: the
/// content encrypted once under a random key, that key given to each recipient — RSA-OAEP
/// or RSA PKCS#1 v1.5 for an RSA certificate, ephemeral-static ECDH for a P-256 one.
public enum CMSEnvelope {
    /// The content cipher.
    public enum Cipher: String, Sendable {
        /// AuthEnvelopedData with AES-256-GCM (the default).
        case aes256GCM = "aes-256-gcm"
        /// EnvelopedData with AES-256-CBC, for peers without GCM.
        case aes256CBC = "aes-256-cbc"
    }

    /// How an RSA recipient receives the content key.
    public enum RSAPadding: String, Sendable {
        /// RSAES-OAEP with RFC 8017's default parameters, SHA-1 and MGF1-SHA-1 (§7.1; the default).
        case oaep
        /// RSAES-PKCS1-v1_5, for tokens that offer nothing else.
        case pkcs1
    }

    /// The largest envelope read (a 1,000-recipient RSA-3072 envelope is about 460 KB).
    public static let maximumSize = 16 << 20
    /// The most recipients an envelope may name.
    public static let maximumRecipients = 20_000

    /// `content` sealed to `recipients`, DER.
    package static func seal(
        _ content: [UInt8], to recipients: [RecipientCertificate], cipher: Cipher = .aes256GCM, rsaPadding: RSAPadding = .oaep,
        recipientLimit: Int = maximumRecipients
    ) throws -> [UInt8] {
        guard !recipients.isEmpty else { throw SignetError(.usage, "an envelope needs at least one recipient certificate") }
        // (A test raises `recipientLimit` to make the envelope a reader must refuse.)
        guard recipients.count <= recipientLimit else {
            throw SignetError(.usage, "\(recipients.count) recipients; an envelope names at most \(maximumRecipients)")
        }
        OpenSSLErrorQueue.clear()
        guard let evpCipher = EVP_CIPHER_fetch(nil, cipher.rawValue, nil) else {
            throw OpenSSLErrorQueue.error(.crypto, "OpenSSL offers no \(cipher.rawValue)")
        }
        defer { EVP_CIPHER_free(evpCipher) }
        let flags = UInt32(CMS_BINARY | CMS_PARTIAL)
        guard let cms = CMS_encrypt_ex(nil, nil, evpCipher, flags, nil, nil) else {
            throw OpenSSLErrorQueue.error(.crypto, "OpenSSL could not start an envelope")
        }
        defer { CMS_ContentInfo_free(cms) }
        for recipient in recipients {
            let isRSA = recipient.keyType == "RSA"
            // Named by subject key identifier where the certificate has one (20 bytes, whatever
            // the issuer's name), else by issuer and serial number.
            let flags = (isRSA ? CMS_KEY_PARAM : 0) | (recipient.hasKeyIdentifier ? CMS_USE_KEYID : 0)
            guard let info = CMS_add1_recipient_cert(cms, recipient.owner.pointer, UInt32(flags)) else {
                throw OpenSSLErrorQueue.error(.crypto, "OpenSSL could not add the recipient '\(recipient.source)'", path: recipient.source)
            }
            // RSAES-OAEP with RFC 8017's default parameters (SHA-1, MGF1-SHA-1): OAEP's security
            // does not rest on the hash's collision resistance, and the default parameters are
            // absent from the encoding, where SHA-256's cost 43 bytes per recipient.
            if isRSA, rsaPadding == .oaep {
                guard let context = CMS_RecipientInfo_get0_pkey_ctx(info), EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_OAEP_PADDING) > 0
                else { throw OpenSSLErrorQueue.error(.crypto, "OpenSSL could not set RSA-OAEP for '\(recipient.source)'") }
            }
        }
        try withMemoryBIO(content) { input in
            guard CMS_final(cms, input, nil, flags) == 1 else { throw OpenSSLErrorQueue.error(.crypto, "OpenSSL could not seal the envelope") }
        }
        return try derEncode("envelope") { i2d_CMS_ContentInfo(cms, $0) }
    }

    /// What an envelope says of itself, without a key.
    package struct Summary: Sendable {
        /// "AuthEnvelopedData (AES-256-GCM)" or "EnvelopedData (AES-256-CBC)".
        package let kind: String
        /// One identifier per recipient (issuer and serial, or a key identifier).
        package let recipients: [String]
    }

    /// Reads the envelope's structure (bounded) and lists its recipients.
    package static func summary(of envelope: [UInt8], name: String) throws -> Summary {
        try withParsed(envelope, name: name) { cms in
            let type = OBJ_obj2nid(CMS_get0_type(cms))
            let kind =
                type == NID_id_smime_ct_authEnvelopedData
                ? "AuthEnvelopedData" : type == NID_pkcs7_enveloped ? "EnvelopedData" : "not an envelope"
            return Summary(kind: kind, recipients: try identifiers(cms, name: name))
        }
    }

    /// Opens `envelope` with `key`: the content, or `not-a-recipient` (exit 3) when the key's
    /// certificate is not among the recipients (or, for a key without a certificate, when no
    /// recipient's part opens with it).
    package static func open(_ envelope: [UInt8], with key: DecryptionKey, name: String) throws -> [UInt8] {
        try withParsed(envelope, name: name) { cms in
            let type = OBJ_obj2nid(CMS_get0_type(cms))
            guard type == NID_id_smime_ct_authEnvelopedData || type == NID_pkcs7_enveloped else {
                throw SignetError(.malformedArchive, "'\(name)' is a CMS object but not an envelope", path: name)
            }
            let recipients = try identifiers(cms, name: name)
            let refused = SignetError(
                .notARecipient,
                "'\(name)' is sealed to \(recipients.count) recipient\(recipients.count == 1 ? "" : "s") and \(key.description) is not one of them",
                path: name)
            OpenSSLErrorQueue.clear()
            guard CMS_decrypt_set1_pkey_and_peer(cms, key.key.pointer, key.certificate?.owner.pointer, nil) == 1 else {
                _ = OpenSSLErrorQueue.drain()
                throw refused
            }
            guard let output = BIO_new(BIO_s_mem()) else { throw OpenSSLErrorQueue.error(.crypto, "out of memory") }
            defer { BIO_free(output) }
            guard CMS_decrypt(cms, nil, nil, nil, output, UInt32(CMS_BINARY)) == 1 else {
                // With a certificate, or an EC key (key agreement finds its part or fails), the
                // recipient part was found: what fails is the content. An RSA key without its
                // certificate is tried against every part, and a part that does not open yields
                // a random key (OpenSSL's defence against padding oracles): it cannot tell.
                if key.certificate == nil && key.isRSA { throw refused }
                throw OpenSSLErrorQueue.error(.packageInvalid, "'\(name)': the envelope's content does not decrypt (it was altered)", path: name)
            }
            var data: UnsafeMutablePointer<CChar>? = nil
            let length = signet_BIO_get_mem_data(output, &data)
            guard let data, length >= 0 else { return [] }
            return [UInt8](UnsafeRawBufferPointer(start: data, count: length))
        }
    }

    private static func withParsed<R>(_ envelope: [UInt8], name: String, _ body: (OpaquePointer) throws -> R) throws -> R {
        guard envelope.count <= maximumSize else {
            throw SignetError(.malformedArchive, "'\(name)' is an envelope of \(envelope.count) bytes; at most \(maximumSize) are read", path: name)
        }
        OpenSSLErrorQueue.clear()
        guard let (cms, complete) = parseDER(envelope, { d2i_CMS_ContentInfo(nil, $0, $1) }) else {
            throw OpenSSLErrorQueue.error(.malformedArchive, "'\(name)' is not a DER CMS envelope", path: name)
        }
        defer { CMS_ContentInfo_free(cms) }
        guard complete else { throw SignetError(.malformedArchive, "'\(name)' holds bytes after its envelope", path: name) }
        return try body(cms)
    }

    /// The recipients' identifiers, bounded in number.
    private static func identifiers(_ cms: OpaquePointer, name: String) throws -> [String] {
        guard let infos = CMS_get0_RecipientInfos(cms) else { return [] }
        let count = Int(OPENSSL_sk_num(infos))
        guard count <= maximumRecipients else {
            throw SignetError(.malformedArchive, "'\(name)' names \(count) recipients; at most \(maximumRecipients) are read", path: name)
        }
        var found: [String] = []
        for index in 0..<count {
            guard let info = OPENSSL_sk_value(infos, Int32(index)) else { continue }
            found += identifiers(of: OpaquePointer(info))
            guard found.count <= maximumRecipients else {
                throw SignetError(.malformedArchive, "'\(name)' names more than \(maximumRecipients) recipients", path: name)
            }
        }
        return found
    }

    private static func identifiers(of info: OpaquePointer) -> [String] {
        switch CMS_RecipientInfo_type(info) {
        case CMS_RECIPINFO_TRANS:
            var keyID: UnsafeMutablePointer<ASN1_OCTET_STRING>? = nil, issuer: OpaquePointer? = nil
            var serial: UnsafeMutablePointer<ASN1_INTEGER>? = nil
            guard CMS_RecipientInfo_ktri_get0_signer_id(info, &keyID, &issuer, &serial) == 1 else { return ["?"] }
            return [describe(keyID: keyID, issuer: issuer, serial: serial)]
        case CMS_RECIPINFO_AGREE:
            guard let keys = CMS_RecipientInfo_kari_get0_reks(info) else { return [] }
            return (0..<Int(OPENSSL_sk_num(keys))).map { index in
                guard let rek = OPENSSL_sk_value(keys, Int32(index)) else { return "?" }
                var keyID: UnsafeMutablePointer<ASN1_OCTET_STRING>? = nil, issuer: OpaquePointer? = nil
                var serial: UnsafeMutablePointer<ASN1_INTEGER>? = nil, date: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>? = nil
                var other: OpaquePointer? = nil
                guard CMS_RecipientEncryptedKey_get0_id(OpaquePointer(rek), &keyID, &date, &other, &issuer, &serial) == 1 else { return "?" }
                return describe(keyID: keyID, issuer: issuer, serial: serial)
            }
        default:
            return ["a recipient of another kind"]
        }
    }

    private static func describe(keyID: UnsafeMutablePointer<ASN1_OCTET_STRING>?, issuer: OpaquePointer?, serial: UnsafeMutablePointer<ASN1_INTEGER>?) -> String
    {
        if let issuer {
            let number = serial.flatMap { ASN1_INTEGER_to_BN($0, nil) }
            defer { BN_free(number) }
            let hex = number.flatMap { BN_bn2hex($0) }
            defer { signet_OPENSSL_free(hex) }
            return "\(RecipientCertificate.name(issuer)), serial 0x\(hex.map { String(cString: $0).lowercased() } ?? "?")"
        }
        if let keyID, let bytes = ASN1_STRING_get0_data(keyID) {
            return "key id " + [UInt8](UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(keyID)))).hexString
        }
        return "?"
    }
}
