import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 49: operating a repository without stranding it by accident, and messages that name
/// the real mistake.
@Suite("Repository operations (issue 49)")
struct RepositoryOperationsCLITests {
    @Test("a key file others can read is warned about once, even when it is given for two roles")
    func keyWarningOnce() throws {
        let p = try UpdateCLITests.Publisher("ops-warning")
        let exposed = p.work.directory.file("exposed.pem")
        try FileManager.default.copyItem(atPath: p.work.privatePEM, toPath: exposed)
        #expect(chmod(exposed, 0o644) == 0)
        let refreshed = try CLI.run(["repo", "refresh", p.repo, "--snapshot-key", exposed, "--timestamp-key", exposed, "--passphrase-file", p.work.passFile])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let warnings = refreshed.stderr.split(separator: "\n").filter { $0.contains("warning") && $0.contains("exposed.pem") }
        #expect(warnings.count == 1, "\(refreshed.stderr)")
    }

    @Test(
        "repo add warns about a sequence that looks like a Unix time (pack without --sequence), as pack does, and not about a numbered one; its arguments swapped are named as such"
    )
    func unixTimeSequence() throws {
        let p = try UpdateCLITests.Publisher("ops-sequence")
        let tree = try TemporaryDirectory()
        try Data("a\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
        let key = ["--key", p.work.privatePEM, "--passphrase-file", p.work.passFile]
        for (sequence, warned) in [(nil, true), ("143", false)] as [(String?, Bool)] {
            let package = p.work.directory.file("app-\(sequence ?? "time").zip")
            let packed = try CLI.run(
                ["pack", tree.path, "--name", "app", "--version", "1", "--out", package] + key + (sequence.map { ["--sequence", $0] } ?? []),
                environment: ["SOURCE_DATE_EPOCH": nil])
            try #require(packed.status == 0, "\(packed.stderr)")
            let added = try CLI.run(["repo", "add", p.repo, package, "--channel", sequence == nil ? "time" : "numbered"])
            #expect(added.status == 0, "\(added.stderr)")
            #expect(added.stderr.contains("looks like a Unix time") == warned, "\(sequence ?? "time"): \(added.stderr)")
            try FileManager.default.removeItem(atPath: p.repo + "/staging/targets.json")
        }
        // The arguments swapped (point 11): a usage error naming the order, nothing staged.
        let swapped = try CLI.run(["repo", "add", p.work.directory.file("app-143.zip"), p.repo, "--channel", "stable"])
        #expect(swapped.status == 2 && swapped.stderr.contains("the repository comes first"), "\(swapped.stderr)")
        #expect(!FileManager.default.fileExists(atPath: p.repo + "/staging/targets.json"))
    }

    @Test("--repository without metadata/: the 404 names the metadata folder to try (point 11)")
    func repositoryURLWithoutMetadata() throws {
        let p = try UpdateCLITests.Publisher("ops-url")
        try p.release(1)
        let url = p.server.url("ops-url/")
        let result = try CLI.run([
            "update", "--repository", url, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest,
            "--tls-ca", p.server.root, "--retries", "0"
        ])
        #expect(result.status == 5 && result.stderr.contains("'\(url)metadata/'"), "\(result.stderr)")
        #expect(p.installedText() == nil)
    }

    @Test("tuf init with the staged, unsigned root says to use the published metadata/1.root.json; a private key given as a role key is named (point 11)")
    func tufInitStagedRoot() throws {
        let work = try Workspace()
        let repo = work.directory.file("repo")
        let made = try CLI.run([
            "repo", "init", repo, "--root-key", work.publicDER, "--targets-key", work.publicDER,
            "--snapshot-key", work.publicDER, "--timestamp-key", work.publicDER
        ])
        try #require(made.status == 0, "\(made.stderr)")
        let result = try CLI.run(["tuf", "init", "--metadata-dir", work.directory.file("device"), repo + "/staging/root.json"])
        #expect(result.status == 3 && result.stderr.contains("metadata/1.root.json") && result.stderr.contains("staging/root.json"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("device/root.json")))
        // A private key where a role's public key is meant: named as such, nothing made.
        let wrongKind = try CLI.run([
            "repo", "init", work.directory.file("repo2"), "--root-key", work.privatePEM, "--targets-key", work.publicDER,
            "--snapshot-key", work.publicDER, "--timestamp-key", work.publicDER
        ])
        #expect(wrongKind.status != 0 && wrongKind.stderr.contains("is a private key") && wrongKind.stderr.contains("public keys"), "\(wrongKind.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("repo2")))
    }

    @Test("a config value the options refuse is said as the option's own message, in text and JSON, never as a Swift error dump (point 8)")
    func configValueMessage() throws {
        let work = try TemporaryDirectory()
        let config = try work.write(
            "app.conf",
            Data(
                """
                repository = "https://updates.example.com/app/metadata/"
                tuf-metadata = "\(work.file("metadata"))"
                channel = "stable"
                dest = "\(work.file("app"))"
                health-check = "true"
                health-timeout = "20 seconds"

                """.utf8), mode: 0o600)
        for json in [false, true] {
            let result = try CLI.run(["update", "--config", config] + (json ? ["--json"] : []))
            let said = json ? result.stdoutText : result.stderr
            #expect(result.status == 2 && said.contains("--health-timeout takes a number and a unit"), "\(said)")
            #expect(!said.contains("commandError") && !said.contains("ParserError"), "\(said)")
        }
    }

    @Test(
        "point 7: as another user, status DIR reads root's release record, unpack is told to run as root, never to remove Signet's lock or record; update --check runs read-only (no lock, nothing written)"
    )
    func readOnlyAsAnotherUser() throws {
        let p = try UpdateCLITests.Publisher("ops-nonroot")
        try p.release(1)
        try p.release(2)
        let config = try p.work.directory.write("app.conf", Data(p.configLines.utf8), mode: 0o644)
        try p.check(CLI.run(["update", "--config", config]))
        try p.check(CLI.run(["update", "--config", config]))
        chmod(p.work.path, 0o755)
        chmod(p.work.directory.file("opt"), 0o755)
        // What another user may read: the TLS root and the public key (a device's are public).
        let root = try p.work.directory.write("tls-root.pem", try Data(contentsOf: URL(fileURLWithPath: p.server.root)), mode: 0o644)
        let publicKey = try p.work.directory.write("release.der", try Data(contentsOf: URL(fileURLWithPath: p.work.publicDER)), mode: 0o644)
        try Data(p.configLines.replacingOccurrences(of: p.server.root, with: root).utf8).write(to: URL(fileURLWithPath: config))
        guard let status = try CLIHelpers.asUser(65534, CLI.binary, ["status", p.dest]) else { return }
        #expect(
            status.status == 0 && status.stdoutText.contains("current:") && status.stdoutText.contains("sequence 2"), "\(status.stdoutText) \(status.stderr)")
        let refused = try #require(
            try CLIHelpers.asUser(65534, CLI.binary, ["unpack", p.work.directory.file("app-1.zip"), "--dest", p.dest, "--pubkey", publicKey]))
        #expect(refused.status != 0 && refused.stderr.contains("Run this as root") && !refused.stderr.contains("Remove it"), "unpack: \(refused.stderr)")
        // update --check by a monitor (issue 61): every TUF check, read-only — no lock, nothing written.
        try p.release(3)
        let parent = (p.metadata as NSString).deletingLastPathComponent
        func snapshot() throws -> [String: Date] {
            var seen: [String: Date] = [:]
            for folder in [p.metadata, parent] {
                for name in try FileManager.default.contentsOfDirectory(atPath: folder) {
                    seen[folder + "/" + name] = try FileManager.default.attributesOfItem(atPath: folder + "/" + name)[.modificationDate] as? Date
                }
            }
            return seen
        }
        let before = try snapshot()
        let checked = try #require(try CLIHelpers.asUser(65534, CLI.binary, ["update", "--config", config, "--check", "--json"]))
        #expect(checked.status == 0, "\(checked.stderr)")
        let report = try checked.json()
        #expect(report["update_available"] as? Bool == true && (report["available"] as? [String: Any])?["sequence"] as? Int == 3, "\(checked.stdoutText)")
        #expect(try snapshot() == before, "nothing written beside or in the metadata folder")
    }

    @Test(
        "point 8 and 11: a config key is left out with --unset; keep-previous = false is read as no; an unclosed string and a wrong yes/no value are said plainly"
    )
    func configKeysPlainly() throws {
        let p = try UpdateCLITests.Publisher("ops-config-keys")
        try p.release(1)
        let log = p.work.directory.file("post.log")
        let config = try p.work.directory.write(
            "app.conf",
            Data(
                (p.configLines + """
                    health-check = "false"
                    post-install = "sh -c 'echo ran >> \(log)'"
                    keep-previous = false

                    """).utf8), mode: 0o644)
        // The config's health check would fail the install: left out, with the post-install.
        let unset = try CLI.run(["update", "--config", config, "--unset", "health-check", "--unset=post-install"])
        #expect(unset.status == 0 && p.installedText() == "release 1\n", "\(unset.stderr)")
        #expect(!FileManager.default.fileExists(atPath: log))
        #expect(!FileManager.default.fileExists(atPath: p.work.directory.file("opt/.app.signet-previous")))
        let unknown = try CLI.run(["update", "--config", config, "--unset", "healthcheck"])
        #expect(unknown.status == 2 && unknown.stderr.contains("--unset healthcheck: not a config key"), "\(unknown.stderr)")
        let alone = try CLI.run(["update", "--unset", "health-check"])
        #expect(alone.status == 2 && alone.stderr.contains("--unset leaves out keys of --config"), "\(alone.stderr)")

        let unclosed = try p.work.directory.write(
            "unclosed.conf", Data("repository = \"https://updates.example.com/app/metadata/\ndest = \"/opt/app\"\n".utf8), mode: 0o644)
        let open = try CLI.run(["update", "--config", unclosed])
        #expect(open.status == 2 && open.stderr.contains("unclosed.conf:1: a string on this line is not closed"), "\(open.stderr)")
        let word = try CLI.run(["update", "--config", config, "--keep-previous", "false"])
        #expect(
            word.status == 2 && word.stderr.contains("not one of its values") && word.stderr.contains("'yes' and 'no'")
                && !word.stderr.contains("whole number"), "\(word.stderr)")
    }

    @Test(
        "point 11 and 15: a device whose clock is two years off is told to check it (local time); an expired timestamp names repo refresh; a missing newer root is named, not read as a targets threshold problem"
    )
    func causesNamed() throws {
        let p = try UpdateCLITests.Publisher("ops-causes")
        try p.release(1)
        let update = [
            "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root,
            "--retries", "0"
        ]
        let early = try RepositoryKeepingCLITests.later("-730d", update)
        #expect(
            early.status != 0 && early.stderr.contains("not yet valid") && early.stderr.contains("this device's clock reads 20")
                && early.stderr.contains("set the clock"), "\(early.stderr)")
        let stale = try RepositoryKeepingCLITests.later("+2d", update)
        #expect(stale.status == 1 && stale.stderr.contains("timestamp.json") && stale.stderr.contains("signet repo refresh"), "\(stale.stderr)")
        #expect(p.installedText() == nil)

        let fleet = try TUFCLITests.Fleet("ops-missing-root", targetsThreshold: 1)
        try fleet.release(1, signers: ["rel1"])
        try fleet.check(
            CLI.run([
                "repo", "rotate", fleet.repo, "--role", "targets", "--remove", fleet.pub("rel1"), "--remove", fleet.pub("rel2"), "--add", fleet.pub("rel3")
            ]))
        try fleet.signRoot()
        try fleet.check(fleet.sign("targets", "rel3"))
        try fleet.refresh()
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/2.root.json")
        let stuck = try fleet.device().update()
        #expect(stuck.status == 3 && stuck.stderr.contains("trusts root v1") && stuck.stderr.contains("2.root.json"), "\(stuck.stderr)")
    }

    @Test(
        "A staged package is never served: repo add stages it outside targets/ (404 on nginx until the targets threshold signs, 200 after the refresh); repo discard removes it; the published release and its package stay"
    )
    func discardStaged() throws {
        let p = try UpdateCLITests.Publisher("ops-discard")
        try p.release(1)
        let tree = try TemporaryDirectory()
        try Data("two\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
        let package = p.work.directory.file("app-2.zip")
        try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "2", "--sequence", "2", "--out", package] + p.key))
        let added = try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable", "--json"])).json()
        let sha256 = try SignetTestSupport.run("sha256sum", [package]).stdoutText.prefix(64)
        let name = "\(sha256).\(try #require(added["target"] as? String))"
        func served() throws -> String {
            try SignetTestSupport.run(
                "curl", ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", p.server.root, p.server.url("ops-discard/targets/\(name)")]
            ).stdoutText
        }
        // The embargoed package: not in targets/, not served; staged in a folder only its owner reads.
        #expect(try served() == "404", "an unsigned package is not served")
        #expect(try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets").count == 1)
        #expect(FileManager.default.fileExists(atPath: p.repo + "/staging/targets/" + name))
        let mode = try FileManager.default.attributesOfItem(atPath: p.repo + "/staging/targets")[.posixPermissions] as? Int
        #expect(mode == 0o700, "staging/targets is \(String(mode ?? 0, radix: 8))")
        let status = try p.check(CLI.run(["repo", "status", p.repo])).stdoutText
        #expect(
            status.contains("staged targets v") && status.contains("signet repo discard \(p.repo) --role targets") && !status.contains("PROBLEM"), "\(status)")
        let discarded = try p.check(CLI.run(["repo", "discard", p.repo, "--role", "targets", "--json"])).json()
        #expect((discarded["removed"] as? [String]) == [name], "\(discarded)")
        #expect(
            !FileManager.default.fileExists(atPath: p.repo + "/staging/targets.json")
                && !FileManager.default.fileExists(atPath: p.repo + "/staging/targets/" + name))
        let after = try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets")
        #expect(after.count == 1 && after[0].hasSuffix(".app-1.zip"), "\(after)")
        let again = try CLI.run(["repo", "discard", p.repo, "--role", "targets"])
        #expect(again.status == 5 && again.stderr.contains("nothing of role targets is staged"), "\(again.stderr)")
        // The device still installs the published release.
        try p.check(
            CLI.run(["update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root])
        )
        #expect(p.installedText() == "release 1\n")
        // Staged again and signed: the package reaches targets/ with the version that lists it.
        let digest = try #require(try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable", "--json"])).json()["digest"] as? String)
        #expect(try served() == "404")
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "targets", "--digest", digest] + p.key))
        try RolloutCLITests.refresh(p)
        #expect(try served() == "200", "published with its targets version")
        #expect(try FileManager.default.contentsOfDirectory(atPath: p.repo + "/staging/targets").isEmpty)
        try p.check(
            CLI.run(["update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root])
        )
        #expect(p.installedText() == "two\n")
    }

    @Test(
        "Messages that name the real mistake: a missing parent folder, a metadata file given as the repository, another repository's root, --allow-http beside a config's tls-ca, a value error with the subcommand's usage, a plan for a release no channel lists"
    )
    func mistakesNamed() throws {
        let p = try UpdateCLITests.Publisher("ops-messages")
        try p.release(1)
        try p.release(2)
        let initialised = try CLI.run(["repo", "init", p.work.directory.file("no-such-folder/site")] + p.key)
        #expect(
            initialised.status == 5 && initialised.stderr.contains("its parent folder '\(p.work.directory.file("no-such-folder"))' does not exist"),
            "\(initialised.stderr)")
        let file = try CLI.run([
            "update", "--repository", p.metadataURL + "timestamp.json", "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca",
            p.server.root
        ])
        #expect(file.status == 2 && file.stderr.contains("names a metadata file") && file.stderr.contains("give '\(p.metadataURL)'"), "\(file.stderr)")
        // A device set up from another repository's root.
        let other = try UpdateCLITests.Publisher("ops-messages-other")
        try other.release(1)
        let foreign = try CLI.run([
            "update", "--repository", p.metadataURL, "--tuf-metadata", other.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root
        ])
        #expect(foreign.status == 3 && foreign.stderr.contains("initialised with another repository's root.json"), "\(foreign.stderr)")
        let config = try p.work.directory.write("app.conf", Data(p.configLines.utf8), mode: 0o600)
        let http = try CLI.run(["update", "--config", config, "--allow-http"])
        #expect(http.status == 2 && http.stderr.contains("tls-ca set by --config FILE: add --unset tls-ca"), "\(http.stderr)")
        let value = try CLI.run(["repo", "add", p.repo, p.work.directory.file("app-2.zip"), "--channel", "bad name!"])
        #expect(
            value.status == 2 && value.stderr.contains("Usage: signet repo add") && value.stderr.contains("See 'signet repo add --help'"), "\(value.stderr)")
        // OpenSSL's queue, said once (a decoder that tries again queues the same lines twice).
        let wrongPass = try p.work.directory.write("wrong-pass.txt", Data("not the passphrase\n".utf8), mode: 0o600)
        let refused = try CLI.run(["sign", config, "--key", p.work.privatePEM, "--passphrase-file", wrongPass])
        let lines = refused.stderr.components(separatedBy: "(OpenSSL: ").last.map { $0.dropLast(2).components(separatedBy: "; ") } ?? []
        #expect(refused.status != 0 && !lines.isEmpty && Set(lines).count == lines.count, "\(refused.stderr)")
        // Release 1 lost its channel to release 2: a plan for it reaches no device.
        let replanned = try CLI.run(["repo", "rollout", p.repo, "app-1.zip", "--plan", "now"])
        #expect(replanned.status == 0 && replanned.stderr.contains("is listed on no channel"), "\(replanned.stderr)")
    }

    @Test(
        "point 15: every missing role key named at once; an empty metadata folder names tuf init; reverify outside a checkout does not suggest the example key; a full disk says needed and free; a shared folder for --state is named as the folder"
    )
    func polish() throws {
        let work = try Workspace()
        let repo = work.directory.file("repo")
        let init1 = try CLI.run(["repo", "init", repo, "--root-key", work.publicDER, "--targets-key", work.publicDER])
        #expect(init1.status == 2 && init1.stderr.contains("--snapshot-key, --timestamp-key"), "\(init1.stderr)")
        let refresh = try CLI.run(["repo", "refresh", repo])
        #expect(refresh.status == 2 && refresh.stderr.contains("--snapshot-key and --timestamp-key"), "\(refresh.stderr)")

        let empty = work.directory.file("metadata")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let noRoot = try CLI.run([
            "update", "--repository", "https://127.0.0.1:1/metadata/", "--tuf-metadata", empty, "--channel", "stable", "--dest", work.directory.file("app")
        ])
        #expect(noRoot.status == 5 && noRoot.stderr.contains("signet tuf init --metadata-dir \(empty)"), "\(noRoot.stderr)")

        let elsewhere = try CLI.run(["reverify", work.directory.path], directory: work.directory.path)
        #expect(elsewhere.status == 2 && !elsewhere.stderr.contains("keys-example") && elsewhere.stderr.contains("--tuf-metadata"), "\(elsewhere.stderr)")

        // A 1 MiB tmpfs: 2 MB of files do not fit; a world-writable folder is not --state's.
        let small = work.directory.file("small")
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        let mounted = try SignetTestSupport.run("mount", ["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", small])
        try #require(mounted.status == 0, "tests run as root (README): \(mounted.stderr)")
        defer { _ = try? SignetTestSupport.run("umount", [small]) }
        let tree = work.directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        _ = try work.directory.writeRandom("tree/big.bin", count: 2_000_000)
        let package = work.directory.file("big.zip")
        #expect(
            try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "big", "--version", "1", "--out", package, "--store"
            ]).status == 0)
        let full = try CLI.run(["unpack", package, "--dest", small + "/app", "--pubkey", work.publicDER])
        #expect(
            full.status == 5 && full.stderr.contains("no space left") && full.stderr.contains("unpacks to 1.9 MiB")
                && full.stderr.contains("is free on that filesystem"), "\(full.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: small).isEmpty)
        chmod(small, 0o1777)
        let shared = try CLI.run(["unpack", package, "--dest", work.directory.file("app2"), "--pubkey", work.publicDER, "--state", small + "/state.json"])
        #expect(shared.status == 5 && shared.stderr.contains("the folder of --state") && shared.stderr.contains("'\(small)'"), "\(shared.stderr)")
    }
}
