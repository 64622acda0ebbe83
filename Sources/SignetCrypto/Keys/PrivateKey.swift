public import SystemPackage
import Foundation
internal import COpenSSL
internal import CSignetOpenSSL
import Synchronization
import SignetCore

/// An RSA private key for signing, loaded from any format Signet reads.
///
/// The format is detected from the content, never from the file name: PEM PKCS#1, PEM PKCS#8,
/// encrypted PKCS#8, traditional encrypted PEM, DER PKCS#8 (plain or encrypted), DER PKCS#1,
/// and PKCS#12 (modern AES-256/PBKDF2, or legacy RC2-40/3DES through OpenSSL's legacy provider,
/// which is loaded only when such a file is met).
public struct PrivateKey: Sendable {
    /// The key itself; for a token key only its public half (the private half stays on the token).
    package let key: EVPKey
    /// The token that holds the private half, for a PKCS#11 key.
    let token: TokenKey?
    /// The format the key was found in.
    public let format: KeyFormat
    /// The public half.
    public let publicKey: PublicKey
    /// A certificate that came with the key (PKCS#12 files usually carry one), as DER.
    public let certificateDER: [UInt8]?
    /// Things the caller should tell a person: a key file others can read, legacy encryption.
    public let warnings: [String]

    /// The key id (FORMAT.md §1).
    public var keyID: KeyID { publicKey.keyID }
    /// Modulus size in bits.
    public var bits: Int { key.bits }

    /// Loads a private key file.
    ///
    /// - Parameters:
    ///   - path: the key file.
    ///   - passphrase: where to get the passphrase if the key turns out to be encrypted; asked at most once.
    ///   - allowWeakKey: accept RSA keys below 2048 bits.
    /// - Throws: ``/SignetCore/SignetError`` with `.wrongPassphrase`, `.passphraseRequired`, `.unsupportedKeyType`,
    ///   `.weakKey`, `.wrongKeyKind`, `.malformedKey`, `.legacyProviderMissing`, or a file error.
    public init(contentsOf path: String, passphrase: PassphraseSource? = nil, allowWeakKey: Bool = false) throws {
        let file = try InputFile.open(path, what: "private key")
        let bytes = try file.readAll(limit: KeyLimits.maximumFileSize, what: "private key")
        var warnings: [String] = []
        if let warning = exposureWarning(mode: file.mode, path: path, what: "private key") {
            warnings.append(warning)
        }
        try self.init(bytes: bytes, name: path, passphrase: passphrase, allowWeakKey: allowWeakKey, warnings: warnings)
    }

    /// Loads a private key from bytes in memory. `name` is used in messages.
    public init(bytes: [UInt8], name: String = "<memory>", passphrase: PassphraseSource? = nil, allowWeakKey: Bool = false) throws {
        try self.init(bytes: bytes, name: name, passphrase: passphrase, allowWeakKey: allowWeakKey, warnings: [])
    }

    /// A key that never leaves a PKCS#11 token (an HSM, a smart card, SoftHSM), named by an
    /// RFC 7512 URI such as `pkcs11:token=release;object=signing-2026`.
    ///
    /// - Parameters:
    ///   - uri: the key's URI (``PKCS11URI``); `pin-value=` is refused.
    ///   - module: the PKCS#11 module; nil takes the URI's `module-path=`, then the environment
    ///     variable `SIGNET_PKCS11_MODULE`, then p11-kit's proxy module where installed.
    ///   - pin: where the user PIN comes from when the URI has no `pin-source=`; asked once.
    ///   - allowWeakKey: accept RSA keys below 2048 bits.
    ///   - environment: the environment to read `SIGNET_PKCS11_MODULE` from (the process's).
    /// - Throws: ``/SignetCore/SignetError``: `.usage` for a bad URI or no module to use, `.tokenModule`
    ///   (exit 5), `.tokenObjectNotFound`, `.wrongPassphrase`, `.passphraseRequired`,
    ///   `.unsupportedKeyType`, `.weakKey` (exit 4).
    public init(
        pkcs11 uri: String, module: String? = nil, pin: PassphraseSource? = nil, allowWeakKey: Bool = false,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws {
        let parsed = try PKCS11URI(uri)
        let modulePath = try PKCS11Module.path(for: parsed, module: module, environment: environment)
        let token = try TokenKey(uri: parsed, modulePath: modulePath, pin: pin, allowWeakKey: allowWeakKey)
        self.key = token.publicKey
        self.token = token
        self.format = .pkcs11
        self.publicKey = try PublicKey(key: token.publicKey, format: .pkcs11, certificateDER: nil, source: "\(parsed) on \(token.tokenDescription)")
        self.certificateDER = nil
        self.warnings = []
    }

    /// Whether `text` names a key on a token (a `pkcs11:` URI) rather than a file.
    public static func isTokenURI(_ text: String) -> Bool { text.hasPrefix("pkcs11:") }

    package init(key: EVPKey, format: KeyFormat, certificateDER: [UInt8]?, warnings: [String], name: String) throws {
        self.key = key
        self.token = nil
        self.format = format
        self.publicKey = try PublicKey(key: key, format: format, certificateDER: certificateDER, source: name)
        self.certificateDER = certificateDER
        self.warnings = warnings
    }

    private init(bytes: [UInt8], name: String, passphrase: PassphraseSource?, allowWeakKey: Bool, warnings: [String]) throws {
        guard !bytes.isEmpty else {
            throw SignetError(.malformedKey, "private key '\(name)' is empty; expected a PEM, DER PKCS#8 or PKCS#12 private key", path: name)
        }
        let request = PassphraseRequest(source: passphrase, keyName: name)
        let loaded =
            try looksLikePEM(bytes)
            ? PrivateKeyLoader.pem(bytes, name: name, request: request)
            : PrivateKeyLoader.der(bytes, name: name, request: request)
        try loaded.key.requireAcceptableRSA(path: name, role: "private key", allowWeakKey: allowWeakKey, optInFlag: "--allow-weak-key")
        try Self.requireConsistent(loaded.key, name: name)
        var allWarnings = warnings
        if loaded.format == .pkcs12Legacy {
            allWarnings.append(
                "private key '\(name)' is a PKCS#12 file with legacy encryption (RC2-40/3DES); re-export it with modern encryption: openssl pkcs12 -in '\(name)' -legacy -nodes | openssl pkcs12 -export -out new.p12"
            )
        }
        try self.init(key: loaded.key, format: loaded.format, certificateDER: loaded.certificateDER, warnings: allWarnings, name: name)
    }
}

extension PrivateKey {
    /// Refuses a damaged key: a bit flipped in the modulus or a prime still loads and signs, but
    /// no key verifies what it signs (and a faulty CRT signature can leak the key).
    ///
    /// The check is the arithmetic that signing relies on, with OpenSSL's big numbers, in
    /// microseconds: n = p·q; d mod (p−1) and d mod (q−1) are the CRT exponents; e times each
    /// CRT exponent is 1 modulo p−1 and q−1 (so e·d ≡ 1 mod λ(n), and both the CRT and the
    /// plain computation invert the public operation); and the CRT coefficient is q⁻¹ mod p.
    /// A bit flipped in any of n, e, d, p, q or the CRT values breaks one of these (the tests
    /// flip each). OpenSSL's full validation (`EVP_PKEY_pairwise_check`, `openssl pkey
    /// -check`) also proves p and q prime, which costs tens of milliseconds per load and
    /// protects against nothing a damaged file does: it is kept only for the keys this
    /// arithmetic does not cover (more than two primes, or no CRT values). Every signature
    /// is also verified with the public half before it is used (``Signer``).
    static func requireConsistent(_ key: EVPKey, name: String) throws {
        OpenSSLErrorQueue.clear()
        let damaged = {
            OpenSSLErrorQueue.error(
                .malformedKey,
                "private key '\(name)' is damaged: its numbers do not fit together (openssl pkey -check refuses it too); restore it from a backup", path: name)
        }
        switch RSAArithmetic.check(key) {
        case .consistent: return
        case .inconsistent: throw damaged()
        case .notCovered: break
        }
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else {
            throw OpenSSLErrorQueue.error(.crypto, "could not check private key '\(name)'")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_pairwise_check(context) == 1 else { throw damaged() }
    }
}

/// The consistency of an RSA private key's numbers (``PrivateKey/requireConsistent(_:name:)``).
enum RSAArithmetic {
    enum Outcome { case consistent, inconsistent, notCovered }

    /// One big number read from the key; secret ones are cleared when freed.
    final class Number {
        let pointer: OpaquePointer
        init?(_ key: EVPKey, _ parameter: String) {
            var bn: OpaquePointer? = nil
            guard EVP_PKEY_get_bn_param(key.pointer, parameter, &bn) == 1, let bn else { return nil }
            pointer = bn
        }
        init?(copying other: Number) {
            guard let bn = BN_dup(other.pointer) else { return nil }
            pointer = bn
        }
        init?() {
            guard let bn = BN_new() else { return nil }
            pointer = bn
        }
        deinit { BN_clear_free(pointer) }
    }

    static func check(_ key: EVPKey) -> Outcome {
        // A third prime: a multi-prime key, which the two-prime arithmetic below does not describe.
        if Number(key, "rsa-factor3") != nil { return .notCovered }
        guard let n = Number(key, "n"), let e = Number(key, "e"), let d = Number(key, "d"),
            let p = Number(key, "rsa-factor1"), let q = Number(key, "rsa-factor2"),
            let dP = Number(key, "rsa-exponent1"), let dQ = Number(key, "rsa-exponent2"),
            let qInv = Number(key, "rsa-coefficient1")
        else { return .notCovered }
        guard let context = BN_CTX_new() else { return .notCovered }
        defer { BN_CTX_free(context) }
        guard let t = Number(), let pMinus1 = Number(copying: p), let qMinus1 = Number(copying: q) else { return .notCovered }
        // p, q > 1, so that p − 1 and q − 1 are moduli.
        guard BN_cmp(p.pointer, BN_value_one()) > 0, BN_cmp(q.pointer, BN_value_one()) > 0,
            BN_sub_word(pMinus1.pointer, 1) == 1, BN_sub_word(qMinus1.pointer, 1) == 1
        else { return .inconsistent }
        // n = p·q
        guard BN_mul(t.pointer, p.pointer, q.pointer, context) == 1 else { return .notCovered }
        guard BN_cmp(t.pointer, n.pointer) == 0 else { return .inconsistent }
        // dP = d mod (p − 1), dQ = d mod (q − 1)
        for (exponent, modulus) in [(dP, pMinus1), (dQ, qMinus1)] {
            guard BN_div(nil, t.pointer, d.pointer, modulus.pointer, context) == 1 else { return .notCovered }
            guard BN_cmp(t.pointer, exponent.pointer) == 0 else { return .inconsistent }
            // e·dP ≡ 1 mod (p − 1), e·dQ ≡ 1 mod (q − 1)
            guard BN_mod_mul(t.pointer, e.pointer, exponent.pointer, modulus.pointer, context) == 1 else { return .notCovered }
            guard BN_is_one(t.pointer) == 1 else { return .inconsistent }
        }
        // qInv·q ≡ 1 mod p
        guard BN_mod_mul(t.pointer, qInv.pointer, q.pointer, p.pointer, context) == 1 else { return .notCovered }
        return BN_is_one(t.pointer) == 1 ? .consistent : .inconsistent
    }
}

/// Asks the passphrase source at most once, and remembers whether anyone asked.
final class PassphraseRequest {
    let source: PassphraseSource?
    let keyName: String
    private(set) var wasAsked = false
    private var cached: Passphrase?
    var failure: Error?

    init(source: PassphraseSource?, keyName: String) {
        self.source = source
        self.keyName = keyName
    }

    func passphrase() throws -> Passphrase {
        wasAsked = true
        if let cached { return cached }
        guard let source else {
            throw SignetError(
                .passphraseRequired,
                "private key '\(keyName)' is encrypted; give its passphrase with --passphrase-file FILE or --passphrase-env VAR (or run on a terminal to be prompted)",
                path: keyName)
        }
        let value = try source.obtain(keyName)
        cached = value
        return value
    }

    var wrongPassphrase: SignetError {
        SignetError(
            .wrongPassphrase,
            "wrong passphrase for private key '\(keyName)' (from \(source?.description ?? "the prompt")); check the passphrase, or that the key file is not damaged",
            path: keyName,
            openSSLErrors: OpenSSLErrorQueue.drain().map(\.text))
    }
}

/// The C callback OpenSSL calls when a PEM key turns out to be encrypted.
private let pemPassphraseCallback: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = {
    buffer, size, _, context in
    guard let buffer, let context else { return -1 }
    let request = Unmanaged<PassphraseRequest>.fromOpaque(context).takeUnretainedValue()
    do {
        let bytes = try request.passphrase().bytes
        guard bytes.count <= Int(size) else {
            request.failure = SignetError(
                .wrongPassphrase, "the passphrase for '\(request.keyName)' is longer than the \(size) bytes OpenSSL accepts for PEM keys", path: request.keyName
            )
            return -1
        }
        bytes.withUnsafeBytes { raw in
            if let base = raw.baseAddress { memcpy(buffer, base, raw.count) }
        }
        return Int32(bytes.count)
    } catch {
        request.failure = error
        return -1
    }
}

enum PrivateKeyLoader {
    struct Loaded {
        let key: EVPKey
        let format: KeyFormat
        let certificateDER: [UInt8]?
    }

    static let privateLabels: Set<String> = ["PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY"]
    static let publicLabels: Set<String> = ["PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE", "X509 CERTIFICATE", "TRUSTED CERTIFICATE"]

    static func pem(_ bytes: [UInt8], name: String, request: PassphraseRequest) throws -> Loaded {
        let labels = pemLabels(in: bytes)
        guard let label = labels.first(where: { privateLabels.contains($0) }) else {
            if labels.contains("OPENSSH PRIVATE KEY") {
                throw SignetError(
                    .malformedKey, "private key '\(name)' is in OpenSSH's own format; convert a copy to PKCS#8 with: ssh-keygen -p -m PKCS8 -f COPY", path: name
                )
            }
            if labels.contains(where: { publicLabels.contains($0) }) {
                throw SignetError(
                    .wrongKeyKind,
                    "'\(name)' holds a public key or certificate (\(labels.joined(separator: ", "))); signing needs the private key, e.g. private_key.pem or private_key.p12",
                    path: name)
            }
            throw SignetError(
                .malformedKey,
                "'\(name)' is PEM but holds no private key (found: \(labels.joined(separator: ", "))); expected BEGIN PRIVATE KEY, BEGIN ENCRYPTED PRIVATE KEY or BEGIN RSA PRIVATE KEY",
                path: name)
        }
        let encryptedTraditional = label == "RSA PRIVATE KEY" && String(decoding: bytes, as: UTF8.self).contains("Proc-Type: 4,ENCRYPTED")
        let format: KeyFormat =
            switch label {
            case "ENCRYPTED PRIVATE KEY": .pemPKCS8Encrypted
            case "RSA PRIVATE KEY": encryptedTraditional ? .pemPKCS1Encrypted : .pemPKCS1
            default: .pemPKCS8
            }
        OpenSSLErrorQueue.clear()
        let pointer = try withMemoryBIO(bytes) { bio in
            let context = Unmanaged.passUnretained(request).toOpaque()
            return withExtendedLifetime(request) {
                PEM_read_bio_PrivateKey_ex(bio, nil, pemPassphraseCallback, context, nil, nil)
            }
        }
        guard let pointer else {
            if let failure = request.failure {
                OpenSSLErrorQueue.clear()
                throw failure
            }
            if request.wasAsked { throw request.wrongPassphrase }
            throw OpenSSLErrorQueue.error(
                .malformedKey, "private key '\(name)' (\(format)) could not be read: the PEM data is damaged or truncated", path: name)
        }
        return Loaded(key: EVPKey(owning: pointer), format: format, certificateDER: nil)
    }

    static func der(_ bytes: [UInt8], name: String, request: PassphraseRequest) throws -> Loaded {
        OpenSSLErrorQueue.clear()
        // Unencrypted PKCS#8 PrivateKeyInfo.
        if let (info, complete) = parseDER(bytes, { d2i_PKCS8_PRIV_KEY_INFO(nil, $0, $1) }) {
            defer { PKCS8_PRIV_KEY_INFO_free(info) }
            if complete, let pointer = EVP_PKCS82PKEY_ex(info, nil, nil) {
                return Loaded(key: EVPKey(owning: pointer), format: .derPKCS8, certificateDER: nil)
            }
        }
        OpenSSLErrorQueue.clear()
        // Encrypted PKCS#8 EncryptedPrivateKeyInfo.
        if let (sig, complete) = parseDER(bytes, { d2i_X509_SIG(nil, $0, $1) }) {
            defer { X509_SIG_free(sig) }
            if complete {
                return try decryptPKCS8(sig, name: name, request: request)
            }
        }
        OpenSSLErrorQueue.clear()
        // PKCS#12.
        if let (p12, complete) = parseDER(bytes, { d2i_PKCS12(nil, $0, $1) }) {
            defer { PKCS12_free(p12) }
            if complete {
                return try PKCS12Loader.load(p12, name: name, request: request)
            }
        }
        OpenSSLErrorQueue.clear()
        // DER PKCS#1 RSAPrivateKey.
        if let (pointer, complete) = parseDER(bytes, { d2i_PrivateKey_ex(EVP_PKEY_RSA, nil, $0, $1, nil, nil) }) {
            if complete { return Loaded(key: EVPKey(owning: pointer), format: .derPKCS1, certificateDER: nil) }
            EVP_PKEY_free(pointer)
        }
        OpenSSLErrorQueue.clear()
        if (try? PublicKey(bytes: bytes, name: name, allowWeakKey: true)) != nil {
            throw SignetError(
                .wrongKeyKind, "'\(name)' holds a public key or certificate; signing needs the private key, e.g. private_key.pem or private_key.p12", path: name
            )
        }
        throw SignetError(
            .malformedKey, "private key '\(name)' is not in any format Signet reads (PEM PKCS#1/PKCS#8, DER PKCS#8, PKCS#12), or it is truncated", path: name)
    }

    static func decryptPKCS8(_ sig: OpaquePointer, name: String, request: PassphraseRequest) throws -> Loaded {
        let passphrase = try request.passphrase()
        let info = passphrase.withCString { pass, length in PKCS8_decrypt_ex(sig, pass, length, nil, nil) }
        guard let info else { throw request.wrongPassphrase }
        defer { PKCS8_PRIV_KEY_INFO_free(info) }
        guard let pointer = EVP_PKCS82PKEY_ex(info, nil, nil) else {
            throw OpenSSLErrorQueue.error(.malformedKey, "private key '\(name)' decrypted, but its content is not a valid key", path: name)
        }
        return Loaded(key: EVPKey(owning: pointer), format: .derPKCS8Encrypted, certificateDER: nil)
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension PrivateKey {
    /// Loads a private key file (`init(contentsOf:passphrase:allowWeakKey:)`).
    public init(contentsOf path: FilePath, passphrase: PassphraseSource? = nil, allowWeakKey: Bool = false) throws {
        try self.init(contentsOf: path.string, passphrase: passphrase, allowWeakKey: allowWeakKey)
    }

    /// Loads a private key from a `file:` URL.
    public init(contentsOf url: URL, passphrase: PassphraseSource? = nil, allowWeakKey: Bool = false) throws {
        try self.init(contentsOf: try Paths.fileSystemPath(of: url), passphrase: passphrase, allowWeakKey: allowWeakKey)
    }

    /// Loads a private key from bytes in memory (`Data`, a slice, ...).
    public init(bytes: some DataProtocol, name: String = "<memory>", passphrase: PassphraseSource? = nil, allowWeakKey: Bool = false) throws {
        try self.init(bytes: [UInt8](bytes), name: name, passphrase: passphrase, allowWeakKey: allowWeakKey)
    }
}
