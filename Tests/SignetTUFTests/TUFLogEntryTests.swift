import Foundation
import SignetCore
import SignetCrypto
import Testing

@testable import SignetTUF

/// A release's entry in a transparency log (FORMAT.md §10): rebuilt from the verified target
/// alone, one exact encoding, and none for a value a line cannot hold.
@Suite("Transparency log entry of a release")
struct TUFLogEntryTests {
    static func target(name: String = "app", version: String = "1.2.0", length: Int64 = 4096) -> TUFPackageTarget {
        TUFPackageTarget(
            target: "app-1.2.0.zip", name: name, version: version, sequence: 42, manifestSHA256: String(repeating: "AB", count: 32), channels: ["stable"],
            length: length, sha256: String(repeating: "cd", count: 32))
    }

    @Test("the entry's exact bytes (hashes in lowercase), its RFC 6962 leaf hash; channels and rollouts are not part of it; control characters have none")
    func encoding() throws {
        let entry = try Self.target().logEntry()
        let expected =
            "signet.release/v1\nname app\nversion 1.2.0\nsequence 42\nmanifest-sha256 \(String(repeating: "ab", count: 32))\n"
            + "target-sha256 \(String(repeating: "cd", count: 32))\ntarget-length 4096\n"
        #expect(String(decoding: entry, as: UTF8.self) == expected)
        var digest = [UInt8](repeating: 0, count: 32)
        let leaf = try Self.target().logLeafHash()
        #expect(leaf == TileTree.leafHash(entry) && leaf != digest)
        digest = TileTree.leafHash(Array(expected.utf8))
        #expect(leaf == digest)
        for bad in [Self.target(version: "1.2\nname evil"), Self.target(name: ""), Self.target(version: "1\u{7f}"), Self.target(length: -1)] {
            #expect(throws: SignetError.self) { try bad.logEntry() }
        }
    }
}
