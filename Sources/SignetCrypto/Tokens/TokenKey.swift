internal import COpenSSL
internal import CPKCS11
internal import CSignetOpenSSL
import Synchronization
import SignetCore

/// An RSA private key that stays on a PKCS#11 token: Signet hashes locally (streamed, as for
/// file keys) and the token signs only the digest: `CKM_RSA_PKCS` over the DigestInfo (DER
/// made by OpenSSL's X509_SIG, never by hand) for PKCS#1 v1.5, `CKM_RSA_PKCS_PSS` over the
/// digest for PSS. Multi-part hash-and-sign (`CKM_SHA256_RSA_PKCS` with C_SignUpdate) is not
/// used: SoftHSM 2.6.1 fails it, and sending whole files to a token would be slow anyway.
///
/// One session per concurrent signer (sessions are not shared between threads), opened as
/// needed and kept; the user is logged in once, with the first session, and stays logged in
/// while any session is open.
package final class TokenKey: @unchecked Sendable {
    let module: PKCS11Module
    let slot: CK_SLOT_ID
    /// "token 'release' (serial 1a2b…)".
    let tokenDescription: String
    let handle: CK_OBJECT_HANDLE
    let idle: Mutex<[CK_SESSION_HANDLE]>
    /// The public half, from the token (CKA_MODULUS, CKA_PUBLIC_EXPONENT) through OpenSSL.
    let publicKey: EVPKey

    var functions: CK_FUNCTION_LIST { module.functions.pointee }

    /// Finds the key `uri` names, logging in with the PIN from `uri`'s pin-source, else `pin`.
    ///
    /// - Throws: ``/SignetCore/SignetError``: `.tokenModule` (exit 5), `.tokenObjectNotFound` (4, listing
    ///   what there is), `.wrongPassphrase` (4; never retried: tokens lock after a few wrong
    ///   PINs), `.passphraseRequired` (4), `.unsupportedKeyType` or `.weakKey` (4).
    init(uri: PKCS11URI, modulePath: String, pin: PassphraseSource?, allowWeakKey: Bool) throws {
        module = try PKCS11Module.load(modulePath)
        let functions = module.functions.pointee
        let opened = try Self.openToken(uri, module: module, pin: pin)
        slot = opened.slot
        tokenDescription = opened.description
        let session = opened.session
        var keep = false
        defer { if !keep { _ = functions.C_CloseSession(session) } }

        // The key.
        let found = try Self.find(functions, session, class: CKO_PRIVATE_KEY, label: uri.object, id: uri.id)
        guard found.count == 1 else {
            let all = try Self.find(functions, session, class: CKO_PRIVATE_KEY, label: nil, id: nil)
            let listing =
                all.isEmpty
                ? "it holds no private key"
                : "its private keys: "
                    + all.map { object in
                        let label =
                            (try? Self.attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_LABEL))).flatMap { $0 }.map {
                                String(decoding: $0, as: UTF8.self)
                            } ?? ""
                        let id = (try? Self.attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_ID))).flatMap { $0 } ?? []
                        return "object=\(label);id=\(id.map { String(format: "%%%02x", $0) }.joined())"
                    }.joined(separator: ", ")
            throw SignetError(
                .tokenObjectNotFound,
                found.isEmpty
                    ? "no private key on \(tokenDescription) matches \(uri); \(listing)"
                    : "\(found.count) private keys on \(tokenDescription) match \(uri); name one by object= and id=: \(listing)")
        }
        handle = found[0]
        let keyType = try Self.attribute(functions, session, handle, CK_ATTRIBUTE_TYPE(CKA_KEY_TYPE)).map(Self.number) ?? nil
        guard keyType == CK_KEY_TYPE(CKK_RSA) else {
            throw SignetError(
                .unsupportedKeyType,
                "the key \(uri) on \(tokenDescription) is not an RSA key (CKA_KEY_TYPE \(keyType.map { String($0) } ?? "unknown")); Signet signs with RSA keys of 2048 bits or more"
            )
        }
        let (modulus, exponent) = try Self.rsaNumbers(functions, session, handle)
        guard let modulus else {
            throw SignetError(.malformedKey, "the key \(uri) on \(tokenDescription) does not give its modulus (CKA_MODULUS)")
        }
        guard let exponent else {
            throw SignetError(.malformedKey, "the key \(uri) on \(tokenDescription) gives no public exponent, on itself or on a public key with its CKA_ID")
        }
        publicKey = try Self.rsaPublicKey(modulus: modulus, exponent: exponent)
        guard publicKey.bits >= 2048 || allowWeakKey else {
            throw SignetError(
                .weakKey,
                "the key \(uri) on \(tokenDescription) is \(publicKey.bits)-bit RSA; Signet signs with 2048 bits or more (--allow-weak-key overrides, not recommended)"
            )
        }
        idle = Mutex([session])
        keep = true
    }

    /// The token `uri` names, with a session on it, logged in (with the PIN from `uri`'s
    /// pin-source, else `pin`) when the token requires it. The caller closes the session.
    static func openToken(_ uri: PKCS11URI, module: PKCS11Module, pin: PassphraseSource?) throws -> (
        slot: CK_SLOT_ID, description: String, session: CK_SESSION_HANDLE
    ) {
        let functions = module.functions.pointee
        // The token.
        var count: CK_ULONG = 0
        try Self.check(functions.C_GetSlotList(CK_BBOOL(CK_TRUE), nil, &count), "C_GetSlotList", module: module.path)
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        try Self.check(functions.C_GetSlotList(CK_BBOOL(CK_TRUE), &slots, &count), "C_GetSlotList", module: module.path)
        var candidates: [(CK_SLOT_ID, label: String, serial: String, manufacturer: String, model: String, flags: CK_FLAGS)] = []
        for slot in slots.prefix(Int(count)) {
            var info = CK_TOKEN_INFO()
            // An uninitialised token (SoftHSM always offers one) holds no key: not a candidate.
            guard functions.C_GetTokenInfo(slot, &info) == CKR_OK, info.flags & CK_FLAGS(CKF_TOKEN_INITIALIZED) != 0 else { continue }
            candidates.append((slot, Self.text(info.label), Self.text(info.serialNumber), Self.text(info.manufacturerID), Self.text(info.model), info.flags))
        }
        let matching = candidates.filter { candidate in
            (uri.token.map { $0 == candidate.label } ?? true) && (uri.serial.map { $0 == candidate.serial } ?? true)
                && (uri.manufacturer.map { $0 == candidate.manufacturer } ?? true) && (uri.model.map { $0 == candidate.model } ?? true)
                && (uri.slotID.map { CK_SLOT_ID($0) == candidate.0 } ?? true)
        }
        let present =
            candidates.isEmpty
            ? "the module '\(module.path)' has no token at all (for SoftHSM2: softhsm2-util --init-token)"
            : "tokens there: " + candidates.map { "'\($0.label)' (serial \($0.serial), slot \($0.0))" }.joined(separator: ", ")
        guard let token = matching.first else {
            throw SignetError(.tokenObjectNotFound, "no token matches \(uri); \(present)")
        }
        guard matching.count == 1 else {
            throw SignetError(.tokenObjectNotFound, "\(matching.count) tokens match \(uri); add token= or serial= to choose one: \(present)")
        }
        let slot = token.0
        let tokenDescription = "token '\(token.label)' (serial \(token.serial))"

        // The first session, and the login it carries for every later one.
        var session: CK_SESSION_HANDLE = 0
        try Self.check(
            functions.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION), nil, nil, &session), "C_OpenSession on \(tokenDescription)", module: module.path)
        var opened = false
        defer { if !opened { _ = functions.C_CloseSession(session) } }
        if token.flags & CK_FLAGS(CKF_LOGIN_REQUIRED) != 0 {
            let source: PassphraseSource? = uri.pinSource.map { PassphraseSource.file($0, what: "PIN file") } ?? pin
            guard let source else {
                throw SignetError(
                    .passphraseRequired,
                    "\(tokenDescription) needs its user PIN: give --passphrase-file FILE, --passphrase-env VAR, or pin-source=file:/path in the URI (a PIN is never taken from the command line)"
                )
            }
            let secret = try source.passphrase(for: tokenDescription)
            let rv = secret.withCString { pointer, length in
                pointer.withMemoryRebound(to: CK_UTF8CHAR.self, capacity: Int(length)) {
                    functions.C_Login(session, CK_USER_TYPE(CKU_USER), UnsafeMutablePointer(mutating: $0), CK_ULONG(length))
                }
            }
            switch rv {
            case CK_RV(CKR_OK), CK_RV(CKR_USER_ALREADY_LOGGED_IN): break
            case CK_RV(CKR_PIN_INCORRECT), CK_RV(CKR_PIN_LEN_RANGE):
                throw SignetError(
                    .wrongPassphrase,
                    "the PIN from \(source.description) is wrong for \(tokenDescription); Signet tried it once and will not retry (tokens lock after a few wrong PINs)"
                )
            case CK_RV(CKR_PIN_LOCKED):
                throw SignetError(.wrongPassphrase, "the user PIN of \(tokenDescription) is locked; the security officer must unlock it")
            default:
                throw SignetError(.crypto, "logging in to \(tokenDescription) failed (\(PKCS11Module.name(of: rv)))")
            }
        }
        opened = true
        return (slot, tokenDescription, session)
    }

    deinit {
        let functions = module.functions.pointee
        idle.withLock { sessions in
            for session in sessions { _ = functions.C_CloseSession(session) }
        }
    }

    /// Signs `digest` on the token: `length` bytes (the modulus length).
    func sign(_ digest: Digest, algorithm: SignatureAlgorithm, length: Int) throws -> [UInt8] {
        let session = try takeSession()
        var healthy = true
        defer { if healthy { idle.withLock { $0.append(session) } } else { _ = functions.C_CloseSession(session) } }
        var data: [UInt8]
        var mechanism = CK_MECHANISM()
        var parameters = CK_RSA_PKCS_PSS_PARAMS()
        if algorithm.isPSS {
            data = digest.bytes
            (parameters.hashAlg, parameters.mgf) = try Self.pssHash(digest.algorithm)
            parameters.sLen = CK_ULONG(digest.algorithm.size) // salt as long as the digest (FORMAT.md §4)
            mechanism.mechanism = CK_MECHANISM_TYPE(CKM_RSA_PKCS_PSS)
        } else {
            data = try Self.digestInfo(digest)
            mechanism.mechanism = CK_MECHANISM_TYPE(CKM_RSA_PKCS)
        }
        var signature = [UInt8](repeating: 0, count: length)
        var produced = CK_ULONG(length)
        let rv: CK_RV = withUnsafeMutablePointer(to: &parameters) { pss in
            if algorithm.isPSS {
                mechanism.pParameter = UnsafeMutableRawPointer(pss)
                mechanism.ulParameterLen = CK_ULONG(MemoryLayout<CK_RSA_PKCS_PSS_PARAMS>.size)
            }
            let started = functions.C_SignInit(session, &mechanism, handle)
            guard started == CKR_OK else { return started }
            return functions.C_Sign(session, &data, CK_ULONG(data.count), &signature, &produced)
        }
        guard rv == CKR_OK, Int(produced) == length else {
            if rv == CKR_SESSION_HANDLE_INVALID || rv == CKR_SESSION_CLOSED || rv == CKR_DEVICE_REMOVED || rv == CKR_TOKEN_NOT_PRESENT { healthy = false }
            throw SignetError(
                .crypto,
                "\(algorithm.id) signing on \(tokenDescription) failed (\(rv == CKR_OK ? "\(produced) bytes, not \(length)" : PKCS11Module.name(of: rv)))")
        }
        return signature
    }

    func takeSession() throws -> CK_SESSION_HANDLE {
        if let session = idle.withLock({ $0.popLast() }) { return session }
        var session: CK_SESSION_HANDLE = 0
        try Self.check(
            functions.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION), nil, nil, &session), "C_OpenSession on \(tokenDescription)", module: module.path)
        return session
    }

    // MARK: Helpers

    /// A fixed-width, space-padded token text field.
    static func text<T>(_ field: T) -> String {
        withUnsafeBytes(of: field) { bytes in
            var text = String(decoding: bytes, as: UTF8.self)
            while text.last == " " || text.last == "\0" { text.removeLast() }
            return text
        }
    }

    static func check(_ rv: CK_RV, _ call: String, module: String) throws {
        guard rv == CKR_OK else {
            throw SignetError(.tokenModule, "\(call) failed in the PKCS#11 module '\(module)' (\(PKCS11Module.name(of: rv)))", path: module)
        }
    }

    static func number(_ bytes: [UInt8]) -> CK_ULONG? {
        guard bytes.count == MemoryLayout<CK_ULONG>.size else { return nil }
        return bytes.withUnsafeBytes { $0.loadUnaligned(as: CK_ULONG.self) }
    }

    /// An RSA private key object's modulus and public exponent. The exponent is on most private
    /// key objects; else it is taken from the public key with the same CKA_ID.
    static func rsaNumbers(_ functions: CK_FUNCTION_LIST, _ session: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE) throws -> (
        modulus: [UInt8]?, exponent: [UInt8]?
    ) {
        let modulus = try attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_MODULUS))
        var exponent = try attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_PUBLIC_EXPONENT))
        if exponent == nil, let id = try attribute(functions, session, object, CK_ATTRIBUTE_TYPE(CKA_ID)),
            let publicObject = try find(functions, session, class: CKO_PUBLIC_KEY, label: nil, id: id).first
        {
            exponent = try attribute(functions, session, publicObject, CK_ATTRIBUTE_TYPE(CKA_PUBLIC_EXPONENT))
        }
        return (modulus, exponent)
    }

    /// An attribute's value; nil when the object does not have it or keeps it secret.
    static func attribute(_ functions: CK_FUNCTION_LIST, _ session: CK_SESSION_HANDLE, _ object: CK_OBJECT_HANDLE, _ type: CK_ATTRIBUTE_TYPE) throws -> [UInt8]?
    {
        var template = CK_ATTRIBUTE(type: type, pValue: nil, ulValueLen: 0)
        guard functions.C_GetAttributeValue(session, object, &template, 1) == CKR_OK, template.ulValueLen != CK_ULONG.max,
            template.ulValueLen <= 1 << 16
        else { return nil }
        var value = [UInt8](repeating: 0, count: Int(template.ulValueLen))
        let rv = value.withUnsafeMutableBytes { buffer -> CK_RV in
            template.pValue = buffer.baseAddress
            return functions.C_GetAttributeValue(session, object, &template, 1)
        }
        guard rv == CKR_OK, Int(template.ulValueLen) <= value.count else { return nil }
        return Array(value.prefix(Int(template.ulValueLen)))
    }

    /// Objects of `class` with the label and id given (either may be left out).
    static func find(
        _ functions: CK_FUNCTION_LIST, _ session: CK_SESSION_HANDLE, class objectClass: some BinaryInteger,
        label: String?, id: [UInt8]?
    ) throws -> [CK_OBJECT_HANDLE] {
        var classValue = CK_OBJECT_CLASS(objectClass)
        var labelBytes = Array((label ?? "").utf8)
        var idBytes = id ?? []
        return try withUnsafeMutableBytes(of: &classValue) { classBuffer in
            try labelBytes.withUnsafeMutableBytes { labelBuffer in
                try idBytes.withUnsafeMutableBytes { idBuffer in
                    var template = [CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_CLASS), pValue: classBuffer.baseAddress, ulValueLen: CK_ULONG(classBuffer.count))]
                    if label != nil {
                        template.append(
                            CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_LABEL), pValue: labelBuffer.baseAddress, ulValueLen: CK_ULONG(labelBuffer.count)))
                    }
                    if id != nil {
                        template.append(CK_ATTRIBUTE(type: CK_ATTRIBUTE_TYPE(CKA_ID), pValue: idBuffer.baseAddress, ulValueLen: CK_ULONG(idBuffer.count)))
                    }
                    guard functions.C_FindObjectsInit(session, &template, CK_ULONG(template.count)) == CKR_OK else {
                        throw SignetError(.crypto, "searching the token for keys failed (C_FindObjectsInit)")
                    }
                    defer { _ = functions.C_FindObjectsFinal(session) }
                    var found: [CK_OBJECT_HANDLE] = []
                    var batch = [CK_OBJECT_HANDLE](repeating: 0, count: 32)
                    while found.count < 1024 {
                        var count: CK_ULONG = 0
                        guard functions.C_FindObjects(session, &batch, CK_ULONG(batch.count), &count) == CKR_OK, count > 0 else { break }
                        found.append(contentsOf: batch.prefix(Int(count)))
                    }
                    return found
                }
            }
        }
    }

    /// The PSS hash and MGF1 mechanisms for a digest.
    private static func pssHash(_ algorithm: DigestAlgorithm) throws -> (CK_MECHANISM_TYPE, CK_RSA_PKCS_MGF_TYPE) {
        switch algorithm {
        case .sha256: return (CK_MECHANISM_TYPE(CKM_SHA256), CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA256))
        case .sha384: return (CK_MECHANISM_TYPE(CKM_SHA384), CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA384))
        case .sha512: return (CK_MECHANISM_TYPE(CKM_SHA512), CK_RSA_PKCS_MGF_TYPE(CKG_MGF1_SHA512))
        default: throw SignetError(.usage, "PSS with \(algorithm) cannot be signed on a token")
        }
    }

    /// The DER DigestInfo PKCS#1 v1.5 signs (RFC 8017 §9.2), made by OpenSSL's X509_SIG.
    package static func digestInfo(_ digest: Digest) throws -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let md = digest.algorithm.md, let info = X509_SIG_new() else {
            throw OpenSSLErrorQueue.error(.crypto, "could not make a DigestInfo for \(digest.algorithm)")
        }
        defer { X509_SIG_free(info) }
        var algorithm: UnsafeMutablePointer<X509_ALGOR>?
        var octets: UnsafeMutablePointer<ASN1_OCTET_STRING>?
        X509_SIG_getm(info, &algorithm, &octets)
        guard let algorithm, let octets, X509_ALGOR_set0(algorithm, OBJ_nid2obj(EVP_MD_get_type(md)), V_ASN1_NULL, nil) == 1,
            ASN1_OCTET_STRING_set(octets, digest.bytes, Int32(digest.bytes.count)) == 1
        else {
            throw OpenSSLErrorQueue.error(.crypto, "could not make a DigestInfo for \(digest.algorithm)")
        }
        let length = i2d_X509_SIG(info, nil)
        guard length > 0 else { throw OpenSSLErrorQueue.error(.crypto, "could not encode a DigestInfo") }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_X509_SIG(info, &cursor)
        }
        guard written == length else { throw OpenSSLErrorQueue.error(.crypto, "could not encode a DigestInfo") }
        return der
    }

    /// An OpenSSL RSA public key from its modulus and exponent (big-endian bytes).
    static func rsaPublicKey(modulus: [UInt8], exponent: [UInt8]) throws -> EVPKey {
        OpenSSLErrorQueue.clear()
        guard let builder = OSSL_PARAM_BLD_new() else { throw OpenSSLErrorQueue.error(.crypto, "out of memory") }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw OpenSSLErrorQueue.error(.crypto, "bad modulus") }
        defer { BN_free(n) }
        guard let e = BN_bin2bn(exponent, Int32(exponent.count), nil) else { throw OpenSSLErrorQueue.error(.crypto, "bad exponent") }
        defer { BN_free(e) }
        // The builder keeps the names' pointers, not copies: static strings, never Swift temporaries.
        func name(_ text: StaticString) -> UnsafePointer<CChar> { UnsafeRawPointer(text.utf8Start).assumingMemoryBound(to: CChar.self) }
        guard OSSL_PARAM_BLD_push_BN(builder, name("n"), n) == 1, OSSL_PARAM_BLD_push_BN(builder, name("e"), e) == 1,
            let parameters = OSSL_PARAM_BLD_to_param(builder)
        else {
            throw OpenSSLErrorQueue.error(.crypto, "could not build the token key's public half")
        }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else { throw OpenSSLErrorQueue.error(.crypto, "no RSA in OpenSSL") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1, EVP_PKEY_fromdata(context, &key, signet_EVP_PKEY_PUBLIC_KEY(), parameters) == 1, let key else {
            throw OpenSSLErrorQueue.error(.malformedKey, "the token key's modulus and exponent do not make an RSA public key")
        }
        return EVPKey(owning: key)
    }
}
