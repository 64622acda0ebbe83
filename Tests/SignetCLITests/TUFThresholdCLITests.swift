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
    @Test(
        "2-of-2 targets: a package one targets key signed is refused offline; a target grown on the server is stopped at its signed length; tuf init never moves the root back"
    )
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
        // A raw signature by one targets key: nothing the metadata vouches for.
        try Data("a file\n".utf8).write(to: URL(fileURLWithPath: fleet.work.file("raw.txt")))
        try fleet.check(CLI.run(["sign", fleet.work.file("raw.txt"), "--key", fleet.priv("rel1")]))
        let raw = try CLI.run(["verify", fleet.work.file("raw.txt"), "--tuf-metadata", device.metadata])
        #expect(raw.status == 3 && raw.stderr.contains("never for a raw signature"), "\(raw.status) \(raw.stderr)")
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
            let packed = try CLI.run([
                "pack", tree, "--key", repo + "/keys/apps.pem", "--name", "app", "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out
            ])
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
            return (
                metadata,
                {
                    try CLI.run([
                        "update", "--repository", server.url("hijack/metadata/"), "--tuf-metadata", metadata, "--channel", "stable",
                        "--dest", dest, "--tls-ca", server.root, "--json"
                    ])
                }
            )
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

    /// Length, SHA-256 and manifest SHA-256 of a package file, as a targets entry states them.
    static func entry(_ package: String) throws -> (length: Int, sha256: String, manifest: String) {
        let script =
            "import hashlib, os, sys, zipfile; p = sys.argv[1]; print(os.path.getsize(p), hashlib.sha256(open(p, 'rb').read()).hexdigest(), hashlib.sha256(zipfile.ZipFile(p).read('.signet/manifest.json')).hexdigest())"
        let parts = try run("python3", ["-c", script, package]).stdoutText.split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        guard parts.count == 3, let length = Int(parts[0]) else { throw SupportError("entry of \(package)") }
        return (length, parts[1], parts[2])
    }

    /// Point 1: the second targets holder signed blind. One holder stages a reviewed release,
    /// signs it, then points the staged entry at another package signed with their own key.
    @Test(
        "a co-signer signs only what they reviewed: a staged file changed after review, a package that does not match its file, or an unannounced delegation is refused; the root the same; the honest flow publishes"
    )
    func noBlindSigning() throws {
        let fleet = try Fleet("review")
        try fleet.release(1)
        let device = try fleet.device()
        try fleet.check(device.update())
        let staging = fleet.repo + "/staging/targets.json"

        // Alice stages release 2 and signs it; the digest she announces is what Bob will sign.
        let honest = fleet.work.file("honest/app-2.zip")
        try FileManager.default.createDirectory(atPath: fleet.work.file("honest"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try fleet.pack(2), toPath: honest)
        let publishedBefore = fleet.trustedTargetsVersion()
        let added = try fleet.check(CLI.run(["repo", "add", fleet.repo, honest, "--channel", "stable", "--json"])).json()
        let announced = try #require(added["digest"] as? String)
        #expect(added["manifest_sha256"] as? String == (try Self.entry(honest).manifest))
        try fleet.check(CLI.run(["repo", "sign", fleet.repo, "--role", "targets", "--key", fleet.priv("rel1"), "--digest", announced]))

        // Then she points the staged entry at a package of her own and signs that.
        let evil = fleet.work.file("evil/app-2.zip")
        try FileManager.default.createDirectory(atPath: fleet.work.file("evil"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try fleet.pack(2, key: "rel1", text: "evil\n"), toPath: evil)
        let (length, sha256, manifest) = try Self.entry(evil)
        try FileManager.default.copyItem(atPath: evil, toPath: fleet.repo + "/targets/\(sha256).app-2.zip")
        func resignStaged(_ edits: [String], keys: [String] = ["rel1"]) throws {
            let result = try TUFCLITests.python(
                ["resign", staging, fleet.repo + "/metadata/1.root.json", staging] + keys.map(fleet.priv) + edits.flatMap { ["--edit", $0] })
            guard result.status == 0 else { throw SupportError("resign: \(result.stderr)") }
        }
        let entry = "s['targets']['app-2.zip']"
        try resignStaged([
            "\(entry)['length'] = \(length)", "\(entry)['hashes']['sha256'] = '\(sha256)'",
            "\(entry)['custom']['signet']['manifest_sha256'] = '\(manifest)'"
        ])

        // Bob reviews: status shows the staged entry (the other manifest), not the published list.
        let status = try fleet.check(CLI.run(["repo", "status", fleet.repo, "--json"])).json()
        let staged = (status["staged"] as? [[String: Any]])?.first { $0["role"] as? String == "targets" }
        let change = (staged?["targets"] as? [[String: Any]])?.first { ($0["staged"] as? [String: Any])?["target"] as? String == "app-2.zip" }
        #expect(
            change?["change"] as? String == "added" && (change?["staged"] as? [String: Any])?["manifest_sha256"] as? String == manifest,
            "\(String(describing: staged))")
        #expect(staged?["digest"] as? String != announced)
        let text = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(text.contains("manifest sha256 \(manifest)") && text.contains("digest"), "\(text)")
        // Bob signs what was announced: refused, nothing signed.
        let bob = try CLI.run(["repo", "sign", fleet.repo, "--role", "targets", "--key", fleet.priv("rel2"), "--digest", announced, "--json"])
        #expect(bob.status == 1 && TUFCLITests.code(bob) == "metadata-mismatch" && bob.stderr.contains("not what you reviewed"), "\(bob.stdoutText)")
        #expect(fleet.trustedTargetsVersion() == publishedBefore)
        // Without a digest and without a terminal: a usage error that says how to review.
        let blind = try CLI.run(["repo", "sign", fleet.repo, "--role", "targets", "--key", fleet.priv("rel2")])
        #expect(blind.status == 2 && blind.stderr.contains("signet repo status"), "\(blind.stderr)")

        // An entry whose manifest SHA-256 is not its file's: refused whatever the digest.
        try resignStaged(["\(entry)['custom']['signet']['manifest_sha256'] = '\(String(repeating: "0", count: 64))'"])
        let mismatch = try fleet.sign("targets", "rel2", ["--accept-unrecognized"])
        #expect(
            mismatch.status == 1 && mismatch.stderr.contains("do not match their files") && mismatch.stderr.contains("manifest SHA-256"), "\(mismatch.stderr)")

        // A delegation to a key only Alice has: shown, and refused unless accepted on purpose.
        try resignStaged([
            "\(entry)['custom']['signet']['manifest_sha256'] = '\(manifest)'",
            "s['delegations'] = {'keys': {}, 'roles': [{'name': 'mine', 'keyids': [], 'threshold': 1, 'terminating': False, 'paths': ['*']}]}"
        ])
        let delegated = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(delegated.contains("delegation: staged delegations: 'mine' for *") && delegated.contains("PROBLEM (unrecognized)"), "\(delegated)")
        let refusedDelegation = try fleet.sign("targets", "rel2")
        #expect(refusedDelegation.status == 1 && refusedDelegation.stderr.contains("--accept-unrecognized"), "\(refusedDelegation.stderr)")

        // The root the same: rotated and signed by root1, then edited to add a key to targets.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "timestamp", "--add", fleet.pub("evil")]))
        let rootDigest = try fleet.digest("root")
        try fleet.check(CLI.run(["repo", "sign", fleet.repo, "--role", "root", "--key", fleet.priv("root1"), "--digest", rootDigest]))
        let stagedRoot = fleet.repo + "/staging/root.json"
        let edited = try TUFCLITests.python([
            "resign", stagedRoot, fleet.repo + "/metadata/1.root.json", stagedRoot, fleet.priv("root1"),
            "--edit", "s['roles']['targets']['threshold'] = 1"
        ])
        try #require(edited.status == 0, "\(edited.stderr)")
        let rootStatus = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(rootStatus.contains("role targets: 1 of"), "\(rootStatus)")
        let root2 = try CLI.run(["repo", "sign", fleet.repo, "--role", "root", "--key", fleet.priv("root2"), "--digest", rootDigest])
        #expect(root2.status == 1 && root2.stderr.contains("not what you reviewed"), "\(root2.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fleet.repo + "/metadata/2.root.json"))

        // The honest flow still publishes: staged again, both sign what they reviewed.
        try FileManager.default.removeItem(atPath: staging)
        try FileManager.default.removeItem(atPath: stagedRoot)
        try fleet.check(CLI.run(["repo", "add", fleet.repo, honest, "--channel", "stable"]))
        try fleet.check(fleet.sign("targets", "rel1"))
        // Alice again (issue 49, point 15): already signed by this key, it counts once.
        let again = try fleet.check(
            CLI.run([
                "repo", "sign", fleet.repo, "--role", "targets", "--key", fleet.priv("rel1"),
                "--digest", try fleet.digest("targets")
            ]))
        #expect(again.stdoutText.contains("already signed by this key") && again.stdoutText.contains("1 of 2"), "\(again.stdoutText)")
        let againJSON = try fleet.check(fleet.sign("targets", "rel1")).json()
        #expect(
            againJSON["already_signed"] as? Bool == true && againJSON["signatures"] as? Int == 1 && againJSON["published"] as? Bool == false, "\(againJSON)")
        let second = try fleet.check(fleet.sign("targets", "rel2")).json()
        #expect(second["already_signed"] as? Bool == false && second["published"] as? Bool == true, "\(second)")
        try fleet.refresh()
        try fleet.check(device.update())
        #expect(device.installed() == "release 2\n")
    }

    /// Point 10's small publisher: README's one-key repository in five commands, run as
    /// written against nginx, and a device that installs from it.
    @Test("README's one-key repository runs as written (five commands), and a device installs from it")
    func readmeOneKey() throws {
        let server = try TUFCLITests.shared.get()
        let work = try TemporaryDirectory()
        let d = work.path
        try FileManager.default.createDirectory(atPath: d + "/dist", withIntermediateDirectories: true)
        try Data("app 1.0.0\n".utf8).write(to: URL(fileURLWithPath: d + "/dist/version.txt"))
        let environment: [String: String?] = [
            "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SIGNET_PASSPHRASE": "one key"
        ]
        let www = server.www + "/one-key-\(getpid())"
        let block = try UpdateCLITests.readmeBlock("tuf-one-key").replacingOccurrences(of: "/srv/www/app", with: www)
        #expect(block.split(separator: "\n").filter { !$0.hasPrefix(" ") }.count == 5, "five commands: \(block)")
        let ran = try run("bash", ["-euo", "pipefail", "-c", block], environment: environment, directory: d)
        try #require(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stderr.contains("whoever steals it owns every device"), "\(ran.stderr)")
        let metadata = d + "/metadata"
        #expect(try CLI.run(["tuf", "init", "--metadata-dir", metadata, www + "/metadata/1.root.json"]).status == 0)
        let update = try CLI.run([
            "update", "--repository", server.url("one-key-\(getpid())/metadata/"), "--tuf-metadata", metadata, "--channel", "stable",
            "--dest", d + "/app", "--tls-ca", server.root, "--json"
        ])
        #expect(update.status == 0, "\(update.stderr)")
        #expect((try? String(contentsOfFile: d + "/app/version.txt", encoding: .utf8)) == "app 1.0.0\n")
    }
}
