import Foundation
package import SystemPackage
import SignetCore
import SignetCrypto

/// The `user.signet.meta` attribute (FORMAT.md §3): compact JSON naming the algorithm, the
/// signer's key id, the package, the path and the content's SHA-256 of an installed file.
/// Informational only: it picks the algorithm to try and names the claimed signer for the
/// untrusted/modified distinction; it never makes a file "ok". Writer and reader live here,
/// beside the attributes that carry it.
package struct SignetMetadata {
    package let algorithm: SignatureAlgorithm?
    package let keyID: KeyID?
    package let name: String?
    package let sequence: UInt64?
    package let path: String?
    package let source: String?

    /// The attribute of the open file; nil when it is absent or not a strict JSON object.
    package init?(_ descriptor: FileDescriptor) {
        guard case .success(let bytes?) = ExtendedAttributes.get(ExtendedAttributes.metadata, on: descriptor) else { return nil }
        self.init(bytes: bytes)
    }

    /// Parses the attribute's value; nil unless it is a strict JSON object.
    package init?(bytes: [UInt8]) {
        guard (try? StrictJSON.check(bytes)) != nil,
            let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        else { return nil }
        algorithm = (object["alg"] as? String).flatMap { SignatureAlgorithm(id: $0) }
        keyID = (object["key_id"] as? String).flatMap { KeyID($0) }
        name = object["name"] as? String
        sequence = (object["sequence"] as? NSNumber)?.uint64Value
        path = object["path"] as? String
        source = object["source"] as? String
    }

    /// The attribute's bytes for one installed file. Keys sorted, absent values left out, the bytes `JSONEncoder` with `[.sortedKeys, .withoutEscapingSlashes]`
    /// made (a test keeps them equal), written directly: it is made once per installed file.
    package static func encode(
        path: String, sha256: String, signer: PublicKey, manifest: Manifest?, algorithm: SignatureAlgorithm,
        source: String? = nil
    ) throws -> [UInt8] {
        var out = ManifestWriter(capacity: 192 + path.utf8.count + (manifest?.name.utf8.count ?? 0) + (source?.utf8.count ?? 0))
        var first = true
        func field(_ key: String, _ value: (inout ManifestWriter) -> Void) {
            out.raw(first ? "{" : ",")
            first = false
            out.string(key)
            out.raw(":")
            value(&out)
        }
        field("alg") { $0.string(algorithm.id) }
        field("key_id") { $0.string(signer.keyID.hex) }
        if let name = manifest?.name { field("name") { $0.string(name) } }
        field("path") { $0.string(path) }
        if let sequence = manifest?.sequence { field("sequence") { $0.raw(String(sequence)) } }
        field("sha256") { $0.string(sha256) }
        if let source { field("source") { $0.string(source) } }
        out.raw("}")
        return out.bytes
    }
}
