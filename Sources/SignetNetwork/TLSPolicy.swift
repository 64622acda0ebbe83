internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore
import SignetCrypto

/// Which TLS servers a download trusts (FORMAT.md §5). The host name is always checked and
/// TLS 1.2 is the minimum; on top of that:
///
/// - no roots given: the system's CA store;
/// - ``addRoots(from:salt:sealKeys:)``: only these root CAs (a sealed directory is checked first);
/// - ``pins``: after the chain verified, some certificate in it (leaf, intermediate or root)
///   must have one of these SubjectPublicKeyInfo hashes (several pins are backups);
/// - ``certificates``: the server's leaf must be one of these, byte for byte.
public struct TLSPolicy: Sendable {
    /// DER root certificates; empty for the system store.
    public private(set) var roots: [[UInt8]] = []
    /// `sha256//` pins of SubjectPublicKeyInfo, any of which may match.
    public var pins: [KeyID] = []
    /// DER leaf certificates, any of which may be the server's.
    public private(set) var certificates: [[UInt8]] = []
    /// Allows `http://` (no TLS at all). Cannot be combined with roots, pins or certificates.
    public var allowHTTP = false

    /// The default: the system store, host name checked.
    public init() {}

    /// True when something beyond the system store is required.
    public var isPinned: Bool { !roots.isEmpty || !pins.isEmpty || !certificates.isEmpty }

    /// Trusts the root CAs in `path`: a PEM or DER certificate file, or a directory of them.
    /// A directory sealed with `signet trust seal` is checked against its seal first (with
    /// `salt` or `sealKeys`, a seal is required).
    ///
    /// Every certificate must be a CA certificate (basicConstraints CA:TRUE): a root, or an
    /// intermediate, which then acts as a trust anchor too (the chain may end there). A server
    /// (leaf) certificate is refused with exit 4: accepting one server's certificate exactly is
    /// ``addCertificate(from:)`` (`--tls-cert`).
    public mutating func addRoots(from path: String, salt: [UInt8]? = nil, sealKeys: [PublicKey] = []) throws {
        var found: [(file: String, der: [UInt8])] = []
        if Paths.isDirectory(path) {
            let files = try TrustStoreSeal.files(in: path)
            // A directory of package keys (what --trust-dir takes) given here by mistake: said
            // as such, before its seal's demands or its first file's parse error.
            if !files.isEmpty, files.allSatisfy({ Self.isPublicKey(atPath: path + "/" + $0.0) }) {
                throw SignetError(
                    .malformedKey,
                    "--tls-ca directory '\(path)' is a trust directory of public keys (package keys, for --trust-dir), not CA certificates; --tls-ca takes the CA certificates that issued the server's certificate, PEM or DER, as a file or a directory of them",
                    path: path)
            }
            try TrustStoreSeal.check(path, salt: salt, sealKeys: sealKeys)
            guard !files.isEmpty else {
                throw SignetError(.malformedInput, "--tls-ca directory '\(path)' holds no certificate files", path: path)
            }
            for (file, _) in files { found += try Self.certificates(inFile: path + "/" + file, option: "--tls-ca").map { (path + "/" + file, $0) } }
        } else {
            found = try Self.certificates(inFile: path, option: "--tls-ca").map { (path, $0) }
        }
        for (file, der) in found {
            guard let (certificate, _) = parseDER(der, { d2i_X509(nil, $0, $1) }) else { continue }
            let isCA = X509_check_ca(certificate) != 0
            X509_free(certificate)
            guard isCA else {
                throw SignetError(
                    .malformedKey,
                    "'\(file)' given with --tls-ca holds a certificate that is not a CA certificate (no basicConstraints CA:TRUE); --tls-ca takes root or intermediate CAs. To accept one server's certificate exactly, give it with --tls-cert",
                    path: file)
            }
        }
        roots += found.map(\.der)
    }

    /// Accepts a server whose leaf certificate is the one in `path` (PEM or DER).
    public mutating func addCertificate(from path: String) throws {
        certificates += try Self.certificates(inFile: path, option: "--tls-cert")
    }

    /// True when `path` holds a bare public key (SubjectPublicKeyInfo or PKCS#1, PEM or DER)
    /// rather than a certificate.
    static func isPublicKey(atPath path: String) -> Bool {
        defer { OpenSSLErrorQueue.clear() }
        guard let key = try? PublicKey(contentsOf: path, allowWeakKey: true) else { return false }
        return key.certificateDER == nil
    }

    /// The refusal of a public key where a certificate was expected: what it is, and what
    /// `option` takes instead.
    static func publicKeyGiven(_ path: String, option: String) -> SignetError {
        let wanted =
            option == "--tls-cert"
            ? "--tls-cert takes the server's own certificate (PEM or DER)"
            : "--tls-ca takes the CA certificates that issued the server's certificate (PEM or DER)"
        return SignetError(
            .malformedKey,
            "'\(path)' is a public key, not a certificate: \(wanted). To trust the server by its public key, give its pin with --tls-pin sha256//... (signet key show prints it); a package's signing key goes with --pubkey or --trust-dir",
            path: path)
    }

    /// The certificates in a PEM file (every CERTIFICATE block) or a DER file, as DER. `option`
    /// names the option in messages.
    static func certificates(inFile path: String, option: String = "--tls-ca") throws -> [[UInt8]] {
        let bytes = try readSmallFile(path, what: "certificate", limit: 4 << 20)
        guard looksLikePEM(bytes) else {
            guard let (certificate, complete) = parseDER(bytes, { d2i_X509(nil, $0, $1) }) else {
                if isPublicKey(atPath: path) { throw publicKeyGiven(path, option: option) }
                throw OpenSSLErrorQueue.error(.malformedKey, "'\(path)' is not a certificate (PEM or DER)", path: path)
            }
            X509_free(certificate)
            guard complete else { throw SignetError(.malformedKey, "'\(path)' has bytes after its certificate", path: path) }
            return [bytes]
        }
        var found: [[UInt8]] = []
        try withMemoryBIO(bytes) { bio in
            while true {
                var label: UnsafeMutablePointer<CChar>? = nil
                var header: UnsafeMutablePointer<CChar>? = nil
                var data: UnsafeMutablePointer<UInt8>? = nil
                var length: Int = 0
                guard PEM_read_bio(bio, &label, &header, &data, &length) == 1 else { break }
                defer {
                    signet_OPENSSL_free(label)
                    signet_OPENSSL_free(header)
                    signet_OPENSSL_free(data)
                }
                guard label.map({ String(cString: $0) }) == "CERTIFICATE" else { continue }
                let body = Array(UnsafeBufferPointer(start: data, count: length))
                guard let (certificate, complete) = parseDER(body, { d2i_X509(nil, $0, $1) }), complete else {
                    throw OpenSSLErrorQueue.error(.malformedKey, "a certificate in '\(path)' is damaged", path: path)
                }
                X509_free(certificate)
                found.append(body)
            }
        }
        OpenSSLErrorQueue.clear() // the end of the PEM stream leaves a "no start line" error
        guard !found.isEmpty else {
            if isPublicKey(atPath: path) { throw publicKeyGiven(path, option: option) }
            if String(decoding: bytes, as: UTF8.self).contains("PRIVATE KEY-----") {
                throw SignetError(
                    .malformedKey,
                    "'\(path)' is a private key, not a certificate: \(option) takes certificates (PEM or DER). A private key has no place on a device that downloads; give the CA's certificate",
                    path: path)
            }
            throw SignetError(.malformedKey, "'\(path)' holds no CERTIFICATE block", path: path)
        }
        return found
    }
}

/// The TLS checks of one download, run by OpenSSL during each handshake (every redirect too).
/// Records what the server presented, for the message when it is refused.
package final class TLSCheck: @unchecked Sendable {
    // Written during a handshake on the downloading thread, read after curl returns on it.
    let policy: TLSPolicy
    /// A certificate named in a refusal: its subject and `sha256//` pin, and whether the server
    /// sent it or it came from the local roots (`--tls-ca` or the system store) when the chain
    /// was built.
    struct Shown {
        let subject: String
        let pin: String
        let local: Bool
        var description: String { "\(subject.isEmpty ? "(no subject)" : subject) \(pin)" }
    }

    /// The certificates the server presented (leaf first) and, when the chain verified, those
    /// of the verified chain it did not send (the local root).
    private(set) var shown: [Shown] = []
    var presentedPins: [String] { shown.map(\.pin) }

    /// The refusal's list: what the server sent, then what the local store added, said apart.
    var shownDescription: String {
        let sent = shown.filter { !$0.local }.map(\.description)
        let local = shown.filter(\.local).map(\.description)
        var text = sent.isEmpty ? "" : "; the server presented (leaf first): " + sent.joined(separator: ", ")
        if !local.isEmpty { text += "; the chain was completed from the local roots with: " + local.joined(separator: ", ") }
        return text
    }
    /// Why Signet's own check (pins, pinned certificate) refused the server, if it did.
    private(set) var refusal: String?

    init(policy: TLSPolicy) {
        self.policy = policy
    }

    /// Installs the roots and the verify callback on curl's SSL_CTX.
    func install(on context: OpaquePointer) -> Bool {
        if !policy.roots.isEmpty {
            guard let store = X509_STORE_new() else { return false }
            for der in policy.roots {
                guard let (certificate, _) = parseDER(der, { d2i_X509(nil, $0, $1) }) else { X509_STORE_free(store); return false }
                let added = X509_STORE_add_cert(store, certificate)
                X509_free(certificate)
                guard added == 1 else { X509_STORE_free(store); return false }
            }
            SSL_CTX_set_cert_store(context, store) // the context owns it now
        }
        SSL_CTX_set_cert_verify_callback(
            context,
            { storeContext, argument in
                guard let storeContext, let argument else { return 0 }
                return Unmanaged<TLSCheck>.fromOpaque(argument).takeUnretainedValue().verify(storeContext)
            }, Unmanaged.passUnretained(self).toOpaque())
        return true
    }

    /// OpenSSL's chain verification, then the pins and pinned certificates on the verified chain.
    private func verify(_ storeContext: OpaquePointer) -> Int32 {
        var presented: [OpaquePointer] = []
        if let leaf = X509_STORE_CTX_get0_cert(storeContext) { presented.append(leaf) }
        if let untrusted = X509_STORE_CTX_get0_untrusted(storeContext) {
            for index in 0..<signet_sk_X509_num(untrusted) {
                if let certificate = signet_sk_X509_value(untrusted, index), !presented.contains(certificate) { presented.append(certificate) }
            }
        }
        shown = presented.map { Shown(subject: CertificateChain.subjectComponents($0).joined(separator: ","), pin: Self.pin(of: $0) ?? "?", local: false) }
        guard X509_verify_cert(storeContext) == 1 else {
            // OpenSSL's reason (no allowed root, expired, not yet valid, …) and where in the chain.
            let code = X509_STORE_CTX_get_error(storeContext)
            let depth = X509_STORE_CTX_get_error_depth(storeContext)
            let place = depth == 0 ? "the server's certificate" : "the certificate \(depth) up the chain"
            refusal = "\(String(cString: X509_verify_cert_error_string(Int(code)))) (\(place))"
            if code == X509_V_ERR_CERT_NOT_YET_VALID || code == X509_V_ERR_CERT_HAS_EXPIRED || code == X509_V_ERR_CRL_NOT_YET_VALID
                || code == X509_V_ERR_CRL_HAS_EXPIRED
            {
                refusal! += "; \(Timestamp.clockReading)"
            }
            return 0
        }
        var chain: [OpaquePointer] = []
        if let verified = X509_STORE_CTX_get0_chain(storeContext) {
            for index in 0..<signet_sk_X509_num(verified) {
                if let certificate = signet_sk_X509_value(verified, index) { chain.append(certificate) }
            }
        }
        // The host name is matched by libcurl, which falls back to the subject's CN when the
        // certificate names no DNS or IP in a subjectAltName; that fallback is refused here
        // (RFC 6125 and browsers since 2017): a name must be in the subjectAltName.
        if let leaf = chain.first, signet_x509_san_names(leaf) <= 0 {
            refusal = "the server's certificate names no host in a subjectAltName extension (a name only in its subject CN is not accepted)"
            X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
            return 0
        }
        let chainPins = chain.map { Self.pin(of: $0) }
        for (certificate, pin) in zip(chain, chainPins) {
            guard let pin, !presentedPins.contains(pin) else { continue }
            shown.append(Shown(subject: CertificateChain.subjectComponents(certificate).joined(separator: ","), pin: pin, local: true))
        }
        if !policy.pins.isEmpty {
            let wanted = Set(policy.pins.map(\.pin))
            guard chainPins.contains(where: { $0.map(wanted.contains) ?? false }) else {
                refusal = "no certificate in the verified chain has a pinned public key (--tls-pin)"
                X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
                return 0
            }
        }
        if !policy.certificates.isEmpty {
            guard let leaf = chain.first, let der = try? derEncode("certificate", { i2d_X509(leaf, $0) }),
                policy.certificates.contains(der)
            else {
                refusal = "the server's certificate is not one of the pinned certificates (--tls-cert)"
                X509_STORE_CTX_set_error(storeContext, X509_V_ERR_APPLICATION_VERIFICATION)
                return 0
            }
        }
        return 1
    }

    /// The `sha256//` pin of a certificate's SubjectPublicKeyInfo.
    static func pin(of certificate: OpaquePointer) -> String? {
        guard let spki = X509_get_X509_PUBKEY(certificate),
            let der = try? derEncode("public key", { i2d_X509_PUBKEY(spki, $0) }),
            let id = try? KeyID(subjectPublicKeyInfo: der)
        else { return nil }
        return id.pin
    }
}
