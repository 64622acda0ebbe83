import Foundation
import SignetCore
import SignetCrypto

/// TUF metadata being made or signed by a publisher: the `signed` document and the signatures
/// gathered so far. Written as canonical JSON (`{"signatures":[…],"signed":{…}}`), which every
/// TUF client reads; each signature covers the canonical JSON of `signed`.
package struct TUFDocument {
    package var signed: TUFJSON
    /// Key id → hex signature, in the order they were added.
    package var signatures: [(keyID: String, hex: String)]

    package init(signed: TUFJSON) {
        self.signed = signed
        signatures = []
    }

    /// Reads a document (any role), keeping its signatures as they are.
    package init(bytes: [UInt8], name: String) throws {
        let json: TUFJSON
        do { json = try TUFJSON.parse(bytes) } catch {
            throw SignetError(.malformedMetadata, "\(name) is not strict JSON: \(error)", path: name)
        }
        guard let signed = json["signed"], let list = json["signatures"]?.arrayItems else {
            throw SignetError(.malformedMetadata, "\(name) is not TUF metadata (no 'signed' and 'signatures')", path: name)
        }
        self.signed = signed
        signatures = try list.map {
            guard let id = $0["keyid"]?.stringValue, let sig = $0["sig"]?.stringValue else {
                throw SignetError(.malformedMetadata, "\(name) has a signature without 'keyid' and 'sig'", path: name)
            }
            return (id, sig)
        }
    }

    package var bytes: [UInt8] {
        let list = TUFJSON.array(signatures.map { .object([("keyid", .string($0.keyID)), ("sig", .string($0.hex))]) })
        return TUFJSON.object([("signatures", list), ("signed", signed)]).serialized + [UInt8(ascii: "\n")]
    }

    /// Adds (or replaces) the signature of `key`, whose TUF key id is `keyID`.
    package mutating func sign(with key: PrivateKey, keyID: String) throws {
        let signature = try Signer(key: key, algorithm: .rsaPSSSHA256).sign(signed.canonical)
        signatures.removeAll { $0.keyID == keyID }
        signatures.append((keyID, signature.bytes.hexString))
    }

    /// The document as the client parses it (for threshold checks with the client's own rules).
    package func metadata(as type: String, name: String) throws -> TUFMetadata {
        try TUFMetadata(bytes: bytes, expectedType: type, name: name)
    }

    package var version: Int64 { signed["version"]?.integerValue ?? 0 }

    /// Replaces top-level members of `signed` (adding those it lacks), keeping the others.
    package mutating func set(_ members: [(String, TUFJSON)]) {
        guard case .object(var existing) = signed else { return }
        for (key, value) in members {
            if let index = existing.firstIndex(where: { $0.0 == key }) { existing[index].1 = value } else { existing.append((key, value)) }
        }
        signed = .object(existing)
    }
}

/// A publisher's public key as TUF metadata states it: `rsa`, `rsassa-pss-sha256`, the PEM
/// SubjectPublicKeyInfo; its key id is the SHA-256 of that object's canonical JSON (as
/// securesystemslib computes it).
package struct TUFPublicKeyEntry {
    package let keyID: String
    package let json: TUFJSON

    package init(_ key: PublicKey) throws {
        let base64 = Data(key.subjectPublicKeyInfo).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        let pem = "-----BEGIN PUBLIC KEY-----\n\(base64)\n-----END PUBLIC KEY-----\n"
        json = .object([("keytype", .string("rsa")), ("scheme", .string("rsassa-pss-sha256")), ("keyval", .object([("public", .string(pem))]))])
        keyID = try Digest.compute(json.canonical, algorithm: .sha256).hex
    }
}

extension TUFKey {
    /// The key as a Signet ``/SignetCrypto/PublicKey`` (RSA keys only: what Signet's packages are signed with).
    package func publicKey(source: String) -> PublicKey? {
        guard keyType == "rsa", let evp = evpKey else { return nil }
        return try? PublicKey(key: evp, format: .pemSPKI, certificateDER: nil, source: source)
    }
}

extension PublicKey {
    /// The key's id as TUF metadata names it (the SHA-256 of its canonical TUF key object, as
    /// securesystemslib computes it), which `signet repo status` shows beside ``/SignetCrypto/PublicKey/keyID``.
    public func tufKeyID() throws -> String {
        try TUFPublicKeyEntry(self).keyID
    }
}
