import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
import SignetTestSupport
import SignetCryptoTestSupport

/// Which other keys may have signed an unchanged file of a release (FORMAT.md §3, "Peer keys").
@Suite("Peer keys of a manifest's signer")
struct PeerKeysTests {
    @Test("peer keys: an unchanged file may keep a signature by another key of the role that lists the manifest, never by another role's key or a revoked one")
    func peerKeys() throws {
        let a = try PublicKey(contentsOf: Fixtures.key("rsa2048-spki.der"))
        let b = try PublicKey(contentsOf: Fixtures.key("other3072-spki.der"))
        let c = try PublicKey(contentsOf: Fixtures.key("rsa1024-spki.der"), allowWeakKey: true)
        let bytes = Array("the manifest as signed".utf8)
        let digest = try Digest.compute(bytes, algorithm: .sha256).hex
        let manifest = Manifest(
            algorithm: .rsaPSSSHA256, created: Timestamp(secondsSinceEpoch: 0), expires: nil, files: [],
            keyID: a.keyID, name: "app", sequence: 3, version: "3")
        // Outside TUF: every other key the policy accepts.
        var policy = TrustPolicy(keys: [a, b, c])
        #expect(Set(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID)) == [b.keyID, c.keyID])
        policy.revoked = [c.keyID]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID) == [b.keyID])
        // Through TUF: only the keys of the role whose metadata lists this manifest.
        policy = TrustPolicy(keys: [a, b, c])
        policy.tufOnlyKeys = [a.keyID, b.keyID, c.keyID]
        policy.tufListings = [
            .init(name: "app", sequence: 3, manifestSHA256: digest, keyIDs: [a.keyID, b.keyID], role: "targets", threshold: 1, roleKeys: 2),
            .init(name: "tools", sequence: 1, manifestSHA256: String(repeating: "0", count: 64), keyIDs: [c.keyID], role: "tools", threshold: 1, roleKeys: 1),
            .init(
                name: "app", sequence: 2, manifestSHA256: String(repeating: "1", count: 64), keyIDs: [a.keyID, c.keyID], role: "old", threshold: 1, roleKeys: 2)
        ]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).map(\.keyID) == [b.keyID])
        #expect(policy.peerKeys(of: c.keyID, manifestBytes: bytes, manifest: manifest).isEmpty, "c's roles do not list this manifest")
        policy.revoked = [b.keyID]
        #expect(policy.peerKeys(of: a.keyID, manifestBytes: bytes, manifest: manifest).isEmpty)
    }
}
