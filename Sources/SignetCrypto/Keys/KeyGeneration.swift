#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import COpenSSL
internal import CSignetOpenSSL
public import SystemPackage
import SignetCore

/// A freshly generated signing identity: an RSA key and a self-signed code-signing certificate.
public struct GeneratedKey: Sendable {
    /// The private key.
    public let privateKey: PrivateKey
    /// The self-signed X.509 certificate (codeSigning EKU), DER.
    public let certificateDER: [UInt8]

    /// The file names ``write(to:passphrase:replace:)-(String,_,_)`` creates, in the order it creates them.
    public static let fileNames = ["private_key.pem", "private_key.p12", "public_key.der", "certificate.der"]

    /// Longest certificate validity accepted, in days (200 years; X.509 times end at year 9999).
    public static let maximumValidityDays = 73_050

    /// Generates a key of `bits` bits (2048 to 16384) and a certificate for it.
    ///
    /// - Parameters:
    ///   - bits: the RSA modulus size.
    ///   - commonName: the certificate's subject and issuer CN.
    ///   - validityDays: how long the certificate is valid from now.
    public static func generate(bits: Int = 3072, commonName: String = "Signet signing key", validityDays: Int = 3650) throws -> GeneratedKey {
        guard bits >= KeyLimits.minimumBits, bits <= KeyLimits.maximumBits else {
            throw SignetError(.usage, "--bits must be between \(KeyLimits.minimumBits) and \(KeyLimits.maximumBits) (3072 is a good default), not \(bits)")
        }
        guard validityDays > 0, validityDays <= maximumValidityDays else {
            throw SignetError(.usage, "--days (the certificate validity) must be 1 to \(maximumValidityDays) days, not \(validityDays)")
        }
        OpenSSLErrorQueue.clear()
        guard let pointer = signet_EVP_RSA_gen(UInt32(bits)) else {
            throw OpenSSLErrorQueue.error(.crypto, "RSA-\(bits) key generation failed")
        }
        let key = EVPKey(owning: pointer)
        let certificate = try makeCertificate(key: key, commonName: commonName, validityDays: validityDays)
        let privateKey = try PrivateKey(key: key, format: .pemPKCS8, certificateDER: certificate, warnings: [], name: "<generated>")
        return GeneratedKey(privateKey: privateKey, certificateDER: certificate)
    }

    /// PKCS#8 PEM; encrypted with AES-256-CBC (PBKDF2-HMAC-SHA256) when a non-empty passphrase is given.
    public func pkcs8PEM(passphrase: Passphrase?) throws -> [UInt8] {
        OpenSSLErrorQueue.clear()
        return try collectingMemoryBIO { bio in
            let ok: Int32
            if let passphrase, !passphrase.isEmpty {
                ok = passphrase.withCString { pass, length in
                    PEM_write_bio_PKCS8PrivateKey(
                        bio, privateKey.key.pointer, EVP_aes_256_cbc(),
                        UnsafeMutablePointer(mutating: pass), length, nil, nil)
                }
            } else {
                ok = PEM_write_bio_PKCS8PrivateKey(bio, privateKey.key.pointer, nil, nil, 0, nil, nil)
            }
            guard ok == 1 else { throw OpenSSLErrorQueue.error(.crypto, "could not encode the private key as PKCS#8") }
        }
    }

    /// PKCS#12 with the key and certificate, AES-256-CBC/PBKDF2 as OpenSSL 3 writes by default.
    /// Without a passphrase the file is protected by the empty passphrase, which Signet tries by itself.
    public func pkcs12(passphrase: Passphrase?) throws -> [UInt8] {
        OpenSSLErrorQueue.clear()
        let certificate = try parseDER(certificateDER) { d2i_X509(nil, $0, $1) }.map(\.0)
            .unwrapped(or: OpenSSLErrorQueue.error(.crypto, "could not re-read the generated certificate"))
        defer { X509_free(certificate) }
        let create = { (pass: UnsafePointer<CChar>) -> OpaquePointer? in
            // 0 for the algorithms selects OpenSSL 3's defaults: AES-256-CBC with PBKDF2.
            PKCS12_create_ex(
                pass, "Signet signing key", privateKey.key.pointer, certificate, nil,
                0, 0, Int32(PKCS12_DEFAULT_ITER), Int32(PKCS12_DEFAULT_ITER), 0, nil, nil)
        }
        let p12 = (passphrase ?? Passphrase(bytes: [])).withCString { pass, _ in create(pass) }
        guard let p12 else { throw OpenSSLErrorQueue.error(.crypto, "could not build the PKCS#12 file") }
        defer { PKCS12_free(p12) }
        return try derEncode("PKCS#12 file") { i2d_PKCS12(p12, $0) }
    }

    /// What ``write(to:passphrase:replace:)-(String,_,_)`` wrote.
    public struct WrittenFiles: Sendable {
        /// The directory.
        public let directory: String
        /// Full paths of the files, in ``GeneratedKey/fileNames`` order.
        public let paths: [String]
        /// True when the private key files are protected by a non-empty passphrase.
        public let encrypted: Bool
    }

    /// Refuses (``/SignetCore/SignetError/Code/fileExists``) when any of the key files is already in
    /// `directory`: what `write(to:passphrase:replace:)` does without `replace`, for a caller
    /// that wants to know before generating a key or asking for a passphrase.
    public static func refuseExisting(in directory: String) throws {
        let existing = fileNames.map { directory + "/" + $0 }.filter { access($0, F_OK) == 0 }
        guard existing.isEmpty else {
            throw SignetError(
                .fileExists,
                "refusing to overwrite \(existing.map { "'\($0)'" }.joined(separator: ", ")); choose an empty --out directory, move the old keys away first, or give --force to replace them (the old private key is then lost)",
                path: existing[0])
        }
    }

    /// Writes `private_key.pem`, `private_key.p12` (mode 0600), `public_key.der` and
    /// `certificate.der` (0644) into `directory`, creating it if needed (mode 0700).
    ///
    /// A passphrase that is given but empty is refused (`.emptyPassphrase`, exit 4).
    /// Without `replace`, never replaces a file: if any of them exists nothing is written; if
    /// writing fails half-way, the files this call created are removed again. With `replace`
    /// (the CLI's `--force`), existing key files are replaced.
    public func write(to directory: String, passphrase: Passphrase?, replace: Bool = false) throws -> WrittenFiles {
        if let passphrase, passphrase.isEmpty {
            // An empty passphrase would silently write an unencrypted key: nil says "none" explicitly.
            throw SignetError(.emptyPassphrase, "the passphrase is empty; give a non-empty passphrase, or none to write an unencrypted key (not recommended)")
        }
        // Missing parents are made like `mkdir -p`, the new ones private to the owner.
        try Paths.createDirectories(directory, mode: 0o700, what: "output directory")
        let paths = Self.fileNames.map { directory + "/" + $0 }
        if !replace { try Self.refuseExisting(in: directory) }
        let contents: [([UInt8], mode_t)] = [
            (try pkcs8PEM(passphrase: passphrase), 0o600),
            (try pkcs12(passphrase: passphrase), 0o600),
            (privateKey.publicKey.subjectPublicKeyInfo, 0o644),
            (certificateDER, 0o644)
        ]
        var written: [String] = []
        do {
            for (path, (bytes, mode)) in zip(paths, contents) {
                try AtomicFile.write(bytes, to: path, mode: mode, replace: replace)
                written.append(path)
            }
        } catch {
            // Only files that did not exist are removed: with replace, what was written stands.
            if !replace { for path in written { unlink(path) } }
            throw error
        }
        return WrittenFiles(directory: directory, paths: paths, encrypted: !(passphrase?.isEmpty ?? true))
    }

    static func makeCertificate(key: EVPKey, commonName: String, validityDays: Int) throws -> [UInt8] {
        guard let certificate = X509_new() else { throw OpenSSLErrorQueue.error(.crypto, "could not allocate a certificate") }
        defer { X509_free(certificate) }
        func require(_ ok: Bool, _ what: String) throws {
            if !ok { throw OpenSSLErrorQueue.error(.crypto, "could not build the certificate: \(what)") }
        }
        try require(X509_set_version(certificate, Int(X509_VERSION_3)) == 1, "version")

        // A random positive 127-bit serial number.
        var serialBytes = [UInt8](repeating: 0, count: 16)
        try require(RAND_bytes(&serialBytes, 16) == 1, "serial number")
        serialBytes[0] &= 0x7f
        guard let serial = BN_bin2bn(serialBytes, 16, nil) else { throw OpenSSLErrorQueue.error(.crypto, "serial number") }
        defer { BN_free(serial) }
        try require(BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(certificate)) != nil, "serial number")

        try require(X509_gmtime_adj(X509_getm_notBefore(certificate), 0) != nil, "notBefore")
        try require(X509_time_adj_ex(X509_getm_notAfter(certificate), Int32(clamping: validityDays), 0, nil) != nil, "notAfter")
        try require(X509_set_pubkey(certificate, key.pointer) == 1, "public key")

        guard let name = X509_get_subject_name(certificate) else { throw OpenSSLErrorQueue.error(.crypto, "subject") }
        try require(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, commonName, -1, -1, 0) == 1, "common name")
        try require(X509_set_issuer_name(certificate, name) == 1, "issuer")

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, certificate, certificate, nil, nil, 0)
        let extensions: [(Int32, String)] = [
            (NID_basic_constraints, "critical,CA:FALSE"),
            (NID_key_usage, "critical,digitalSignature"),
            (NID_ext_key_usage, "codeSigning"),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always")
        ]
        for (nid, value) in extensions {
            guard let ext = X509V3_EXT_nconf_nid(nil, &context, nid, value) else {
                throw OpenSSLErrorQueue.error(.crypto, "could not build the certificate extension \(value)")
            }
            defer { X509_EXTENSION_free(ext) }
            try require(X509_add_ext(certificate, ext, -1) == 1, value)
        }
        guard let sha256 = EVP_MD_fetch(nil, "SHA256", nil) else { throw OpenSSLErrorQueue.error(.crypto, "SHA-256") }
        defer { EVP_MD_free(sha256) }
        try require(X509_sign(certificate, key.pointer, sha256) > 0, "signature")
        return try derEncode("certificate") { i2d_X509(certificate, $0) }
    }
}

extension PrivateKey {
    /// A self-signed X.509 certificate of this key for the kernel's IMA keyring (`_ima`; issue
    /// 52), DER: version 3, CA:FALSE, digitalSignature, codeSigning, and a subject key
    /// identifier of RFC 5280's method 1 (SHA-1 of the `RSAPublicKey`), whose last 4 bytes are
    /// the key id of the IMA signatures `unpack --ima` writes — the id the kernel looks the key
    /// up by. The same certificate `keygen` writes as `certificate.der`, for any key file. A key
    /// on a token cannot sign it here (`.usage`).
    ///
    /// - Parameters:
    ///   - commonName: the certificate's subject and issuer CN.
    ///   - validityDays: how long it is valid from now (1 day to 200 years).
    /// - Returns: the certificate, DER.
    public func imaCertificate(commonName: String, validityDays: Int = 3650) throws -> [UInt8] {
        guard format != .pkcs11 else {
            throw SignetError(
                .usage,
                "--ima-cert signs the certificate with the private key, and this key is on a token: make it with the token's own tools (openssl req -x509 -provider pkcs11 …, with the extensions FORMAT.md §3 lists), or use the certificate keygen wrote"
            )
        }
        guard (1...GeneratedKey.maximumValidityDays).contains(validityDays) else {
            throw SignetError(.usage, "the certificate validity must be 1 to \(GeneratedKey.maximumValidityDays) days, not \(validityDays)")
        }
        return try GeneratedKey.makeCertificate(key: key, commonName: commonName, validityDays: validityDays)
    }
}

extension Optional {
    func unwrapped(or error: @autoclosure () -> Error) throws -> Wrapped {
        guard let self else { throw error() }
        return self
    }
}

// MARK: Swift-native forms: FilePath

extension GeneratedKey {
    /// ``refuseExisting(in:)-(String)`` with a `FilePath`.
    public static func refuseExisting(in directory: FilePath) throws {
        try refuseExisting(in: directory.string)
    }

    /// ``write(to:passphrase:replace:)-(String,_,_)`` with a `FilePath`.
    public func write(to directory: FilePath, passphrase: Passphrase?, replace: Bool = false) throws -> WrittenFiles {
        try write(to: directory.string, passphrase: passphrase, replace: replace)
    }
}
