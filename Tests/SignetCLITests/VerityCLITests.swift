import Foundation
import Testing
import SignetTestSupport

/// Issue 52, point 2 (its host part): `pack --verity` records each file's fs-verity digest in
/// the signed manifest.
@Suite("pack --verity: fs-verity digests in the manifest")
struct VerityCLITests {
    @Test("each file's verity digest is what fsverity digest says of it (empty, small, chunked and deflated files); without --verity there is none; such a package installs as any other")
    func packRecordsDigests() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        _ = try tree.write("empty", Data())
        _ = try tree.write("notes.txt", Data(String(repeating: "compressible text\n", count: 400_000).utf8))
        _ = try tree.writeRandom("image.img", count: (5 << 20) + 123)
        _ = try tree.writeRandom("small.bin", count: 4097)
        let package = work.directory.file("app.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package, ["--verity"])
        let manifest = try JSONSerialization.jsonObject(with: try run("unzip", ["-p", package, ".signet/manifest.json"]).stdout) as? [String: Any]
        let files = try #require(manifest?["files"] as? [[String: Any]])
        #expect(files.count == 4)
        for file in files {
            let path = try #require(file["path"] as? String)
            let reference = try run(try which("fsverity"), ["digest", tree.file(path)])
            let expected = String(reference.stdoutText.split(separator: " ").first?.dropFirst("sha256:".count) ?? "")
            #expect(file["verity"] as? String == expected && expected.count == 64, "\(path): \(file["verity"] ?? "none") against \(expected)")
        }
        #expect(try CLI.run(["inspect", package, "--pubkey", work.publicDER]).status == 0)
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)
        let plain = work.directory.file("plain.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: plain)
        #expect(!String(decoding: try run("unzip", ["-p", plain, ".signet/manifest.json"]).stdout, as: UTF8.self).contains("\"verity\""))
    }
}
