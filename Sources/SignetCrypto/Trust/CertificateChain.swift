import Foundation
internal import COpenSSL
internal import CSignetOpenSSL
import SignetCore

/// X.509 chain validation with OpenSSL, against the given roots only (never a system store).
package enum CertificateChain {
    struct Refusal: Error {
        let reason: String
    }

    /// Validates `leaf` up to one of `roots` with `intermediates`; requires the codeSigning EKU when
    /// the leaf has an EKU, validity now (unless `allowExpired`), and `expectedSubject`'s RDNs.
    /// Returns the leaf's public key.
    static func validate(
        leaf: [UInt8], intermediates: [[UInt8]], roots: [[UInt8]], allowExpired: Bool,
        expectedSubject: String?
    ) -> Result<PublicKey, Refusal> {
        OpenSSLErrorQueue.clear()
        defer { OpenSSLErrorQueue.clear() }
        func parse(_ der: [UInt8]) -> OpaquePointer? {
            guard let (certificate, complete) = parseDER(der, { d2i_X509(nil, $0, $1) }) else { return nil }
            if complete { return certificate }
            X509_free(certificate)
            return nil
        }
        guard let leafCertificate = parse(leaf) else { return .failure(Refusal(reason: "the signer certificate is not valid DER X.509")) }
        defer { X509_free(leafCertificate) }
        guard let store = X509_STORE_new() else { return .failure(Refusal(reason: "could not allocate an X509 store")) }
        defer { X509_STORE_free(store) }
        for (index, root) in roots.enumerated() {
            guard let certificate = parse(root) else { return .failure(Refusal(reason: "CA certificate \(index + 1) is not valid DER X.509")) }
            defer { X509_free(certificate) }
            guard X509_STORE_add_cert(store, certificate) == 1 else { return .failure(Refusal(reason: "could not add CA certificate \(index + 1)")) }
        }
        guard let untrusted = signet_sk_X509_new_null() else { return .failure(Refusal(reason: "could not allocate a certificate stack")) }
        defer { signet_sk_X509_pop_free(untrusted) }
        for (index, der) in intermediates.enumerated() {
            guard let certificate = parse(der) else {
                return .failure(Refusal(reason: "intermediate certificate \(index) in the package is not valid DER X.509"))
            }
            guard signet_sk_X509_push(untrusted, certificate) > 0 else {
                X509_free(certificate)
                return .failure(Refusal(reason: "could not collect the intermediates"))
            }
        }
        guard let context = X509_STORE_CTX_new() else { return .failure(Refusal(reason: "could not allocate a verification context")) }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, leafCertificate, untrusted) == 1 else {
            return .failure(Refusal(reason: "could not set up certificate verification"))
        }
        if allowExpired { X509_STORE_CTX_set_flags(context, UInt(X509_V_FLAG_NO_CHECK_TIME)) }
        if X509_verify_cert(context) != 1 {
            let code = X509_STORE_CTX_get_error(context)
            let text = String(cString: X509_verify_cert_error_string(Int(code)))
            let hint = code == X509_V_ERR_CERT_HAS_EXPIRED ? " (--allow-expired-cert accepts expired chains)" : ""
            return .failure(Refusal(reason: "the signer certificate does not chain to a trusted root: \(text)\(hint)"))
        }
        // Extended key usage: when present, it must allow code signing.
        _ = X509_check_purpose(leafCertificate, -1, 0)
        if X509_get_extension_flags(leafCertificate) & UInt32(EXFLAG_XKUSAGE) != 0,
            X509_get_extended_key_usage(leafCertificate) & UInt32(XKU_CODE_SIGN) == 0
        {
            return .failure(Refusal(reason: "the signer certificate's extended key usage does not include codeSigning"))
        }
        let subject = subjectComponents(leafCertificate)
        if let expectedSubject {
            let wanted = expectedSubject.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            if let missing = wanted.first(where: { !subject.contains($0) }) {
                return .failure(Refusal(reason: "the signer certificate's subject (\(subject.joined(separator: ","))) lacks \(missing)"))
            }
        }
        guard let key = X509_get_pubkey(leafCertificate) else { return .failure(Refusal(reason: "the signer certificate's key cannot be read")) }
        let evp = EVPKey(owning: key)
        guard evp.isRSA, evp.bits >= KeyLimits.minimumBits else {
            return .failure(Refusal(reason: "the signer certificate's key is \(evp.typeName) \(evp.bits) bits; Signet needs RSA of 2048 bits or more"))
        }
        guard let publicKey = try? PublicKey(key: evp, format: .derCertificate, certificateDER: leaf, source: "signer certificate") else {
            return .failure(Refusal(reason: "the signer certificate's key cannot be encoded"))
        }
        return .success(publicKey)
    }

    /// The subject as RFC 2253 components ("CN=Release signer", "O=Example").
    package static func subjectComponents(_ certificate: OpaquePointer) -> [String] {
        guard let name = X509_get_subject_name(certificate) else { return [] }
        let text =
            (try? collectingMemoryBIO { bio in
                _ = X509_NAME_print_ex(bio, name, 0, signet_XN_FLAG_RFC2253())
            }).map { String(decoding: $0, as: UTF8.self) } ?? ""
        return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
