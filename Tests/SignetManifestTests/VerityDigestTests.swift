import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
import SignetTestSupport
import SignetCryptoTestSupport

/// Issue 52, point 4: fs-verity file digests computed by Signet, against the reference tool.
@Suite("fs-verity digests: Signet's against fsverity digest (Debian's fsverity)")
struct VerityDigestTests {
    /// Sizes at every edge of the tree: empty, one block, a level-0 block's 128 hashes, one more,
    /// two levels full, and a few megabytes.
    static let sizes = [0, 1, 4095, 4096, 4097, 128 * 4096, 128 * 4096 + 1, 129 * 4096, 128 * 128 * 4096, 128 * 128 * 4096 + 5, (3 << 20) + 77]

    @Test("equal to fsverity digest (SHA-256, 4 KiB blocks, no salt) at every tree edge, however the bytes arrive")
    func matchesReference() throws {
        let folder = try TemporaryDirectory()
        var generator = SystemRandomNumberGenerator()
        let all = randomBytes(Self.sizes.max()!, using: &generator)
        for size in Self.sizes {
            let path = folder.file("f\(size)")
            try Data(all[0..<size]).write(to: URL(fileURLWithPath: path))
            let reference = try run(try which("fsverity"), ["digest", path])
            try #require(reference.status == 0, "\(reference.stderr)")
            let expected = String(reference.stdoutText.split(separator: " ")[0].dropFirst("sha256:".count))
            for step in [size == 0 ? 1 : size, 1000, 4096, 65_537] {
                let digest = try VerityDigest()
                var at = 0
                while at < size {
                    let end = min(size, at + step)
                    try all[at..<end].withUnsafeBytes { try digest.update($0) }
                    at = end
                }
                let hex = try digest.finalize().map { String(format: "%02x", $0) }.joined()
                #expect(hex == expected, "size \(size), fed \(step) at a time")
            }
        }
    }

    @Test("a manifest's verity digest round-trips; anything but 64 lowercase hex digits is a malformed manifest naming the file")
    func inManifest() throws {
        var file = Manifest.File(path: "a.bin", size: 1, sha256: String(repeating: "ab", count: 32), mode: .regular)
        file.verity = Manifest.ContentHash(lowercaseHex: String(repeating: "0f", count: 32))
        let manifest = Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(secondsSinceEpoch: 1_700_000_000), expires: nil, files: [file],
            keyID: try Fixtures.signingKey().keyID, name: "app", sequence: 1, version: "1")
        let encoded = try manifest.encoded()
        #expect(try Manifest.parse(encoded) == manifest)
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(text.contains("\"verity\" : \"\(String(repeating: "0f", count: 32))\""))
        for bad in [String(repeating: "0F", count: 32), String(repeating: "0f", count: 31), "sha256:" + String(repeating: "0f", count: 32)] {
            let changed = text.replacingOccurrences(of: String(repeating: "0f", count: 32), with: bad)
            let error = signetError { _ = try Manifest.parse(Array(changed.utf8)) }
            #expect(
                error?.code == .malformedManifest && error?.reason.contains("a.bin") == true && error?.reason.contains("verity") == true,
                "\(bad): \(error?.reason ?? "accepted")")
        }
    }
}
