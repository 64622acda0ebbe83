import Foundation
import Testing
import SignetTestSupport

/// FORMAT.md §7, "Rotating the targets keys": a rotation never strands a release. The targets
/// key that packed a release rolling out is rotated out; the release is re-signed (same
/// sequence, every file untouched), devices in its wave still install it, one that holds it
/// moves to the re-signed one without fetching a file, and its tree passes reverify with the
/// device's trust. On nginx, with the one-key repository of `UpdateCLITests.Publisher`.
@Suite("Re-signing: a key rotation never strands a release", .serialized)
struct ResignCLITests {
    typealias Device = RolloutCLITests.Device

    @Test("signet resign: the same files byte for byte, a new key; refused without the old key, and for a package that does not verify")
    func resignPackage() throws {
        let work = try Workspace()
        let other = try Workspace()
        let tree = try TemporaryDirectory()
        try Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }).write(to: URL(fileURLWithPath: tree.file("data.bin")))
        try Data(String(repeating: "line of text\n", count: 500_000).utf8).write(to: URL(fileURLWithPath: tree.file("big.txt")))
        let package = work.directory.file("app.zip")
        #expect(
            try CLI.run([
                "pack", tree.path, "--name", "app", "--version", "1", "--sequence", "1", "--out", package,
                "--key", work.privatePEM, "--passphrase-file", work.passFile
            ]).status == 0)
        let out = work.directory.file("resigned.zip")
        let key = ["--key", other.privatePEM, "--passphrase-file", other.passFile]
        let missing = try CLI.run(["resign", package, "--out", out] + key)
        #expect(missing.status == 2 && missing.stderr.contains("--pubkey"), "\(missing.stderr)")
        let wrong = try CLI.run(["resign", package, "--out", out, "--pubkey", other.publicDER] + key)
        #expect(wrong.status == 3 && !FileManager.default.fileExists(atPath: out), "\(wrong.stderr)")
        let done = try CLI.run(["resign", package, "--out", out, "--pubkey", work.publicDER, "--json"] + key)
        #expect(done.status == 0, "\(done.stderr)")
        #expect(try CLI.run(["inspect", out, "--pubkey", other.publicDER]).status == 0)
        #expect(try CLI.run(["inspect", out, "--pubkey", work.publicDER]).status == 3)
        // Every resource entry as it was: compressed bytes, method and CRC (Python's zipfile).
        let compare = try SignetTestSupport.run(
            "python3",
            [
                "-c",
                """
                import sys, zipfile
                a, b = zipfile.ZipFile(sys.argv[1]), zipfile.ZipFile(sys.argv[2])
                for name in ["data.bin", "big.txt"]:
                    x, y = a.getinfo(name), b.getinfo(name)
                    assert (x.compress_type, x.compress_size, x.CRC) == (y.compress_type, y.compress_size, y.CRC), name
                    assert a.read(name) == b.read(name), name
                assert b.testzip() is None
                print("same")
                """, package, out
            ])
        #expect(compare.stdoutText == "same\n", "\(compare.stderr)")
        let json = try done.json()
        #expect(json["sequence"] as? Int == 1 && json["files"] as? Int == 2, "\(json)")
        // A package changed on the way is not vouched for.
        let changed = work.directory.file("changed.zip")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: package))
        bytes[100] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: changed))
        let refused = try CLI.run(["resign", changed, "--out", work.directory.file("never.zip"), "--pubkey", work.publicDER] + key)
        #expect(refused.status != 0 && !FileManager.default.fileExists(atPath: work.directory.file("never.zip")), "\(refused.stderr)")
    }

    @Test(
        "Rotating out the targets key that packed a release mid-rollout: the rotation, the staged root's review and repo status name it; repo resign stages it; devices in its wave install it, one holding it moves to the re-signed tree without fetching a file, reverify passes with the device's trust, the bucket stays"
    )
    func rotationMidRollout() throws {
        let p = try UpdateCLITests.Publisher("resign-rotation")
        let newKey = try Workspace()
        let tree = try TemporaryDirectory()
        try Data("release 1\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
        for index in 0..<30 { try Data(String(repeating: "file \(index)\n", count: 200).utf8).write(to: URL(fileURLWithPath: tree.file("f\(index).txt"))) }
        let package = p.work.directory.file("app-1.zip")
        try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.1", "--sequence", "1", "--out", package] + p.key))
        try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable", "--rollout", "50%@0h,100%@30d"] + p.key))
        try RolloutCLITests.refresh(p)
        // Two devices in the first wave: one installs now, one only after the rotation.
        let candidates = try (0..<12).map { try Device(p, 500 + $0) }
        let buckets = try RolloutCLITests.buckets(candidates.map(\.id), name: "app", sequence: 1)
        let inWave = zip(candidates, buckets).filter { $0.1 < 5_000 }.map(\.0)
        try #require(inWave.count >= 2, "buckets \(buckets)")
        let (early, late) = (inWave[0], inWave[1])
        let first = try early.update(p)
        #expect(first.status == 0 && early.installed == "release 1\n", "\(first.stderr)")
        let bucket = try RolloutCLITests.rollout(first)["bucket"] as? Int

        // The rotation names the release it strands, and what to run.
        let rotated = try CLI.run(["repo", "rotate", p.repo, "--role", "targets", "--add", newKey.publicDER, "--remove", p.work.publicDER, "--json"])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(rotated.stderr.contains("app-1.zip") && rotated.stderr.contains("signet repo resign"), "\(rotated.stderr)")
        #expect((try rotated.json()["stranded"] as? [[String: Any]])?.first?["target"] as? String == "app-1.zip", "\(rotated.stdoutText)")
        let review = try p.check(CLI.run(["repo", "status", p.repo])).stdoutText
        #expect(review.contains("STRANDS: app-1.zip") && review.contains("signet repo resign"), "\(review)")
        // Before the root holders sign, the new key's signature would count for nothing.
        let early1 = try CLI.run(["repo", "resign", p.repo, "app-1.zip", "--key", newKey.privatePEM, "--passphrase-file", newKey.passFile])
        #expect(early1.status == 3 && early1.stderr.contains("sign it first"), "\(early1.stderr)")
        let rootDigest = try #require(try rotated.json()["digest"] as? String)
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "root", "--digest", rootDigest] + p.key))
        let held = try p.check(CLI.run(["repo", "status", p.repo, "--json"])).json()
        let alerts = try #require(held["alerts"] as? [[String: Any]])
        #expect(alerts.contains { $0["kind"] as? String == "stranded" && ($0["message"] as? String)?.contains("app-1.zip") == true }, "\(alerts)")

        // Re-signed with the new key, signed (it holds the targets role alone), published with the root.
        let resigned = try CLI.run(["repo", "resign", p.repo, "app-1.zip", "--key", newKey.privatePEM, "--passphrase-file", newKey.passFile, "--json"])
        #expect(resigned.status == 0, "\(resigned.stderr)")
        #expect(try resigned.json()["sequence"] as? Int == 1)
        try RolloutCLITests.refresh(p)
        let after = try p.check(CLI.run(["repo", "status", p.repo, "--json"])).json()
        #expect(!((after["alerts"] as? [[String: Any]]) ?? []).contains { $0["kind"] as? String == "stranded" }, "\(after)")
        #expect(((after["roles"] as? [[String: Any]])?.first { $0["name"] as? String == "root" })?["version"] as? Int == 2, "\(after)")

        // A device in the wave that lacked it installs it; the one that held it moves to the
        // re-signed tree, fetching no file, in the same bucket.
        let lateRun = try late.update(p)
        #expect(lateRun.status == 0 && late.installed == "release 1\n", "\(lateRun.stdoutText) \(lateRun.stderr)")
        let moved = try early.update(p)
        #expect(moved.status == 0, "\(moved.stderr)")
        let report = try moved.json()
        #expect(report["updated"] as? Bool == true, "\(moved.stdoutText)")
        #expect((report["transfer"] as? [String: Any])?["files_fetched"] as? Int == 0, "\(moved.stdoutText)")
        #expect(try RolloutCLITests.rollout(moved)["bucket"] as? Int == bucket, "the same sequence: the bucket does not move")
        for device in [early, late] {
            let checked = try CLI.run(["reverify", device.dest, "--tuf-metadata", device.metadata])
            #expect(checked.status == 0, "\(checked.stdoutText) \(checked.stderr)")
        }
        let again = try early.update(p)
        let againJSON = try again.json()
        #expect(again.status == 0 && againJSON["updated"] as? Bool == false, "up to date now: \(again.stdoutText)")
    }
}
