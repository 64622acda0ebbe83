import Foundation
public import SystemPackage
internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore

/// An RSA public key for verification, from any format Signet reads.
///
/// The format is detected from the content: DER or PEM SubjectPublicKeyInfo, DER or PEM PKCS#1
/// `RSAPublicKey`, and DER or PEM X.509 certificates (what publishers hand out as
/// `public_key.der` or `certificate.der`). Equal keys have equal ``keyID``s.
public struct PublicKey: Sendable, Hashable, CustomStringConvertible {
    package let key: EVPKey
    /// The key id (FORMAT.md §1).
    public let keyID: KeyID
    /// The format the key was found in.
    public let format: KeyFormat
    /// DER SubjectPublicKeyInfo.
    public let subjectPublicKeyInfo: [UInt8]
    /// The certificate the key came in, as DER, if it came in one.
    public let certificateDER: [UInt8]?
    /// Where the key came from (a path, or a name given by the caller).
    public let source: String

    /// Modulus size in bits.
    public var bits: Int { key.bits }
    /// Length of every valid signature by this key, in bytes.
    public var signatureLength: Int { key.signatureSize }

    /// Loads a public key or certificate file.
    ///
    /// - Parameters:
    ///   - path: the file: DER or PEM SubjectPublicKeyInfo, PKCS#1 RSAPublicKey or an X.509 certificate.
    ///   - allowWeakKey: accept RSA keys below 2048 bits (FORMAT.md §1 requires an opt-in).
    public init(contentsOf path: String, allowWeakKey: Bool = false) throws {
        let bytes = try readSmallFile(path, what: "public key", limit: KeyLimits.maximumFileSize)
        try self.init(bytes: bytes, name: path, allowWeakKey: allowWeakKey)
    }

    /// Loads a public key or certificate from bytes in memory. `name` is used in messages.
    public init(bytes: [UInt8], name: String = "<memory>", allowWeakKey: Bool = false) throws {
        guard !bytes.isEmpty else {
            throw SignetError(.malformedKey, "public key '\(name)' is empty; expected a DER or PEM public key or certificate", path: name)
        }
        OpenSSLErrorQueue.clear()
        let (key, format, certificate) =
            looksLikePEM(bytes)
            ? try PublicKeyLoader.pem(bytes, name: name)
            : try PublicKeyLoader.der(bytes, name: name)
        try key.requireAcceptableRSA(path: name, role: "public key", allowWeakKey: allowWeakKey, optInFlag: "--allow-weak-key")
        try self.init(key: key, format: format, certificateDER: certificate, source: name)
    }

    package init(key: EVPKey, format: KeyFormat, certificateDER: [UInt8]?, source: String) throws {
        self.key = key
        self.format = format
        self.subjectPublicKeyInfo = try key.subjectPublicKeyInfo()
        self.keyID = try KeyID(subjectPublicKeyInfo: subjectPublicKeyInfo)
        self.certificateDER = certificateDER
        self.source = source
    }

    /// Writes the key as DER SubjectPublicKeyInfo (what `--pubkey` reads), atomically and
    /// durably; an existing file is replaced only when `replace` is set, and never when it is
    /// one of `inputs` (the key file it was read from, a passphrase file: exit 2).
    public func writeDER(to path: String, replace: Bool = false, protecting inputs: [String] = []) throws {
        try FileIdentity.refuseOverwriting(targets: [path], inputs: inputs.map { ($0, "input") }, what: "--pubout")
        if !replace { try AtomicFile.refuseExisting(path, what: "the public key file") }
        try AtomicFile.write(subjectPublicKeyInfo, to: path, mode: 0o644, replace: replace)
    }

    /// "<short key id> (<bits>-bit RSA, <source>)".
    public var description: String { "\(keyID.short) (\(bits)-bit RSA, \(source))" }

    public static func == (lhs: PublicKey, rhs: PublicKey) -> Bool { lhs.keyID == rhs.keyID }
    public func hash(into hasher: inout Hasher) { hasher.combine(keyID) }
}

enum PublicKeyLoader {
    typealias Loaded = (EVPKey, KeyFormat, [UInt8]?)

    static func der(_ bytes: [UInt8], name: String, pem: Bool = false) throws -> Loaded {
        if let (pointer, complete) = parseDER(bytes, { d2i_PUBKEY(nil, $0, $1) }) {
            if complete { return (EVPKey(owning: pointer), pem ? .pemSPKI : .derSPKI, nil) }
            EVP_PKEY_free(pointer)
        }
        OpenSSLErrorQueue.clear()
        if let (certificate, complete) = parseDER(bytes, { d2i_X509(nil, $0, $1) }) {
            defer { X509_free(certificate) }
            if complete {
                guard let pointer = X509_get_pubkey(certificate) else {
                    throw OpenSSLErrorQueue.error(.malformedKey, "certificate '\(name)' has a public key OpenSSL cannot read", path: name)
                }
                return (EVPKey(owning: pointer), pem ? .pemCertificate : .derCertificate, bytes)
            }
        }
        OpenSSLErrorQueue.clear()
        if let (pointer, complete) = parseDER(bytes, { d2i_PublicKey(EVP_PKEY_RSA, nil, $0, $1) }) {
            if complete { return (EVPKey(owning: pointer), pem ? .pemRSAPublicKey : .derRSAPublicKey, nil) }
            EVP_PKEY_free(pointer)
        }
        OpenSSLErrorQueue.clear()
        if isPrivateKeyDER(bytes) {
            throw SignetError(
                .wrongKeyKind,
                "'\(name)' is a private key; verification takes the public key or certificate (public_key.der or certificate.der). Never give clients the private key",
                path: name)
        }
        throw SignetError(
            .malformedKey, "public key '\(name)' is not a DER or PEM public key, RSAPublicKey or X.509 certificate, or it is truncated", path: name)
    }

    static func pem(_ bytes: [UInt8], name: String) throws -> Loaded {
        let labels = pemLabels(in: bytes)
        if let privateLabel = labels.first(where: { PrivateKeyLoader.privateLabels.contains($0) }),
            !labels.contains(where: { PrivateKeyLoader.publicLabels.contains($0) })
        {
            throw SignetError(
                .wrongKeyKind,
                "'\(name)' is a private key (BEGIN \(privateLabel)); verification takes the public key or certificate (public_key.der or certificate.der). Never give clients the private key",
                path: name)
        }
        // Read blocks in order and take the first public one (a PEM bundle may start with something else).
        return try withMemoryBIO(bytes) { bio in
            while true {
                var label: UnsafeMutablePointer<CChar>? = nil
                var header: UnsafeMutablePointer<CChar>? = nil
                var data: UnsafeMutablePointer<UInt8>? = nil
                var length: Int = 0
                guard PEM_read_bio(bio, &label, &header, &data, &length) == 1 else {
                    throw OpenSSLErrorQueue.error(
                        .malformedKey,
                        "public key '\(name)' is PEM without a readable public key or certificate block (found: \(labels.joined(separator: ", "))); the base64 may be damaged",
                        path: name)
                }
                defer {
                    signet_OPENSSL_free(label)
                    signet_OPENSSL_free(header)
                    signet_OPENSSL_free(data)
                }
                let blockLabel = label.map { String(cString: $0) } ?? ""
                guard PrivateKeyLoader.publicLabels.contains(blockLabel) else { continue }
                let body = Array(UnsafeBufferPointer(start: data, count: length))
                if blockLabel == "TRUSTED CERTIFICATE" {
                    // OpenSSL's "trusted" form appends trust settings after the certificate.
                    guard let (certificate, _) = parseDER(body, { d2i_X509_AUX(nil, $0, $1) }) else {
                        throw OpenSSLErrorQueue.error(.malformedKey, "certificate in '\(name)' is damaged", path: name)
                    }
                    defer { X509_free(certificate) }
                    guard let pointer = X509_get_pubkey(certificate) else {
                        throw OpenSSLErrorQueue.error(.malformedKey, "certificate '\(name)' has a public key OpenSSL cannot read", path: name)
                    }
                    let certificateDER = try derEncode("certificate") { i2d_X509(certificate, $0) }
                    return (EVPKey(owning: pointer), .pemCertificate, certificateDER)
                }
                return try der(body, name: name, pem: true)
            }
        }
    }

    static func isPrivateKeyDER(_ bytes: [UInt8]) -> Bool {
        defer { OpenSSLErrorQueue.clear() }
        if let (info, _) = parseDER(bytes, { d2i_PKCS8_PRIV_KEY_INFO(nil, $0, $1) }) {
            PKCS8_PRIV_KEY_INFO_free(info)
            return true
        }
        if let (sig, _) = parseDER(bytes, { d2i_X509_SIG(nil, $0, $1) }) {
            X509_SIG_free(sig)
            return true
        }
        if let (p12, _) = parseDER(bytes, { d2i_PKCS12(nil, $0, $1) }) {
            PKCS12_free(p12)
            return true
        }
        if let (key, _) = parseDER(bytes, { d2i_PrivateKey_ex(EVP_PKEY_RSA, nil, $0, $1, nil, nil) }) {
            EVP_PKEY_free(key)
            return true
        }
        return false
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension PublicKey {
    /// Loads a public key or certificate file (`init(contentsOf:allowWeakKey:)`).
    public init(contentsOf path: FilePath, allowWeakKey: Bool = false) throws {
        try self.init(contentsOf: path.string, allowWeakKey: allowWeakKey)
    }

    /// Loads a public key or certificate from a `file:` URL.
    public init(contentsOf url: URL, allowWeakKey: Bool = false) throws {
        try self.init(contentsOf: try Paths.fileSystemPath(of: url), allowWeakKey: allowWeakKey)
    }

    /// Loads a public key or certificate from bytes in memory (`Data`, a slice, ...).
    public init(bytes: some DataProtocol, name: String = "<memory>", allowWeakKey: Bool = false) throws {
        try self.init(bytes: [UInt8](bytes), name: name, allowWeakKey: allowWeakKey)
    }

    /// Whether `signature` is this key's valid signature over `data`, by `algorithm`: the one-key
    /// check, without a ``TrustPolicy`` or a ``Verifier``. A signature that is not exactly this
    /// key's length is never valid.
    ///
    /// ```swift
    /// let key = try PublicKey(contentsOf: FilePath("keys/public_key.der"))
    /// guard key.isValidSignature(signature, for: firmware) else { throw Refused() }
    /// ```
    public func isValidSignature(
        _ signature: some DataProtocol, for data: some DataProtocol,
        algorithm: SignatureAlgorithm = .default
    ) -> Bool {
        guard let digest = try? Digest.compute([UInt8](data), algorithm: algorithm.digest) else { return false }
        return Verifier(policy: TrustPolicy(keys: [self])).verify(signature: [UInt8](signature), digest: digest, algorithm: algorithm).isValid
    }

    /// Whether `signature` is this key's valid signature over the file at `path`, which is
    /// streamed. Throws only when the file cannot be read.
    public func isValidSignature(
        _ signature: some DataProtocol, forFileAt path: FilePath,
        algorithm: SignatureAlgorithm = .default
    ) throws -> Bool {
        let digest = try Digest.compute(fileAt: path.string, algorithm: algorithm.digest)
        return Verifier(policy: TrustPolicy(keys: [self])).verify(signature: [UInt8](signature), digest: digest, algorithm: algorithm).isValid
    }
}
