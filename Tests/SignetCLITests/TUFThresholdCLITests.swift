import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 48: the promise a TUF threshold makes, kept in practice — by the offline trust source,
/// by the download of what a target binds, by a delegated role that claims another's package or
/// fails to load, and by a trusted root that never moves back. Against the suite's nginx and
/// python-tuf's repositories.
@Suite("TUF thresholds in practice: offline trust, signed lengths, package names, damaged roles, the root's direction", .serialized)
struct TUFThresholdCLITests {
    typealias Fleet = TUFCLITests.Fleet

    /// Point 6: `--tuf-metadata` trusted every targets key alone. Point 4: `update` read a
    /// package bounded only by --max-download-size. Point 9: `tuf init` replaced a trusted root
    /// v2 with v1 silently.
    @Test("2-of-2 targets: a package one targets key signed is refused offline; a target grown on the server is stopped at its signed length; tuf init never moves the root back")
    func thresholdOfflineLengthAndRoot() throws {
        let fleet = try Fleet("threshold")
        try fleet.release(1)
        let device = try fleet.device()
        try fleet.check(device.update())

        // Point 6: the release the threshold signed is trusted offline; one key's package is not.
        let listed = fleet.work.file("app-1.zip")
        #expect(try CLI.run(["reverify", device.dest, "--tuf-metadata", device.metadata]).status == 0)
        #expect(try CLI.run(["inspect", listed, "--tuf-metadata", device.metadata]).status == 0)
        let lone = try fleet.pack(9, key: "rel1", text: "one key's release\n")
        let unpacked = try CLI.run(["unpack", lone, "--dest", fleet.work.file("lone"), "--tuf-metadata", device.metadata, "--json"])
        #expect(unpacked.status == 3 && TUFCLITests.code(unpacked) == "untrusted-signer", "\(unpacked.stdoutText)")
        #expect(unpacked.stderr.contains("one key cannot vouch for a package alone") && unpacked.stderr.contains("2 of 2 keys"), "\(unpacked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fleet.work.file("lone")))
        let inspected = try CLI.run(["inspect", lone, "--tuf-metadata", device.metadata])
        #expect(inspected.status == 3, "\(inspected.stdoutText) \(inspected.stderr)")
        // Installed with the key itself, the tree is still not vouched for by the metadata.
        try fleet.check(CLI.run(["unpack", lone, "--dest", fleet.work.file("lone"), "--pubkey", fleet.pub("rel1")]))
        let reverified = try CLI.run(["reverify", fleet.work.file("lone"), "--tuf-metadata", device.metadata])
        #expect(reverified.status != 0 && reverified.stdoutText.contains("one key cannot vouch"), "\(reverified.stdoutText) \(reverified.stderr)")
        // The same key given as a key of its own is the user's choice.
        #expect(try CLI.run(["reverify", fleet.work.file("lone"), "--tuf-metadata", device.metadata, "--pubkey", fleet.pub("rel1")]).status == 0)

        // Point 4: the target on the server grows by 4 MiB; a new device never takes more than
        // the signed length, by ranges or whole.
        let published = try FileManager.default.contentsOfDirectory(atPath: fleet.repo + "/targets").first { $0.hasSuffix(".app-1.zip") }!
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: fleet.repo + "/targets/" + published))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(count: 4 << 20))
        try handle.close()
        for extra in [[], ["--full-download"]] {
            let fresh = try fleet.device("fresh" + extra.joined())
            let result = try fresh.update(extra)
            #expect(result.status == 1 && TUFCLITests.code(result) == "index-mismatch", "\(extra): \(result.stdoutText)")
            #expect(result.stderr.contains("signed metadata states"), "\(extra): \(result.stderr)")
            #expect(fresh.installed() == nil)
        }

        // Point 9: the device walked to root v2; tuf init with v1 is refused, --force moves it.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "timestamp", "--add", fleet.pub("evil"), "--json"]))
        try fleet.signRoot()
        try fleet.refresh()
        _ = try device.update()
        #expect(device.trustedVersion("root") == 2)
        let before = try Data(contentsOf: URL(fileURLWithPath: device.metadata + "/root.json"))
        let back = try CLI.run(["tuf", "init", "--metadata-dir", device.metadata, fleet.repo + "/metadata/1.root.json", "--json"])
        #expect(back.status == 1 && TUFCLITests.code(back) == "rollback", "\(back.stdoutText)")
        #expect(back.stderr.contains("root version 2") && back.stderr.contains("version 1") && back.stderr.contains("--force"), "\(back.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: device.metadata + "/root.json")) == before)
        #expect(try CLI.run(["tuf", "init", "--metadata-dir", device.metadata, fleet.repo + "/metadata/2.root.json"]).status == 0)
        #expect(try CLI.run(["tuf", "init", "--metadata-dir", device.metadata, fleet.repo + "/metadata/1.root.json", "--force"]).status == 0)
        #expect(device.trustedVersion("root") == 1)
    }

    /// Point 2: a role delegated only `community/*` listed `community/tool.zip` named `app`,
    /// sequence 99, and `update` installed it over the real app. Point 3: a delegated role that
    /// failed to load was skipped (`try?`), hiding what it lists.
    @Test("python-tuf repository: a delegated role cannot claim another role's package name; a damaged delegated role fails the update with its code")
    func delegatedNamesAndDamage() throws {
        let server = try TUFCLITests.shared.get()
        let work = try TemporaryDirectory()
        let repo = server.www + "/hijack"
        guard try TUFCLITests.python(["keys", repo + "/keys"]).status == 0 else { throw SupportError("keys") }
        func pack(_ text: String, sequence: Int, out: String) throws {
            let tree = work.file("tree-\(sequence)")
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
            let packed = try CLI.run(["pack", tree, "--key", repo + "/keys/apps.pem", "--name", "app", "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out])
            guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
        }
        let package = work.file("app-5.zip"), hijack = work.file("tool.zip")
        try pack("the real app\n", sequence: 5, out: package)
        try pack("hijacked\n", sequence: 99, out: hijack)
        let made = try TUFCLITests.python(["pyrepo", repo, package, "stable", "app", "5.0", "5", hijack])
        try #require(made.status == 0, "\(made.stderr)")

        func device(_ label: String) throws -> (metadata: String, update: () throws -> ProcessResult) {
            let metadata = work.file(label + "/metadata"), dest = work.file(label + "/app")
            #expect(try CLI.run(["tuf", "init", "--metadata-dir", metadata, repo + "/metadata/1.root.json"]).status == 0)
            return (metadata, {
                try CLI.run(["update", "--repository", server.url("hijack/metadata/"), "--tuf-metadata", metadata, "--channel", "stable",
                             "--dest", dest, "--tls-ca", server.root, "--json"])
            })
        }
        let first = try device("first")
        let update = try first.update()
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try update.json()["role"] as? String == "apps", "\(update.stdoutText)")
        #expect((try? String(contentsOfFile: work.file("first/app/a.txt"), encoding: .utf8)) == "the real app\n")
        // Offline, the same rule: the hijack's listing vouches for nothing.
        let offline = try CLI.run(["unpack", hijack, "--dest", work.file("offline"), "--tuf-metadata", first.metadata, "--json"])
        #expect(offline.status == 3 && TUFCLITests.code(offline) == "untrusted-signer", "\(offline.stdoutText)")

        // A mirror with no keys changes one signature byte of the delegated role.
        let path = repo + "/metadata/1.apps.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let sig = try #require(text.range(of: "\"sig\": \""))
        let at = text.index(sig.upperBound, offsetBy: 10)
        text.replaceSubrange(at...at, with: text[at] == "0" ? "1" : "0")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let damaged = try device("damaged").update()
        #expect(damaged.status == 3 && TUFCLITests.code(damaged) == "threshold-not-met", "\(damaged.stdoutText) \(damaged.stderr)")
        #expect(damaged.stderr.contains("apps"), "\(damaged.stderr)")
        #expect(!damaged.stdoutText.contains("up to date"))
        #expect(!FileManager.default.fileExists(atPath: work.file("damaged/app")))
    }
}
