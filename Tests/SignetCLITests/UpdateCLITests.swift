import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// `signet update` as a device runs it: from a TUF repository, by its config file, under its
/// systemd units; and the forms issue 48 removed (the channel index, `--reseal`).
@Suite("signet update: one repository, a config file, the units", .serialized)
struct UpdateCLITests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The shell block after `<!-- NAME -->` in README.md.
    static func readmeBlock(_ name: String) throws -> String {
        let text = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        let marker = try #require(text.range(of: "<!-- \(name) -->\n```sh\n"))
        let end = try #require(text.range(of: "\n```", range: marker.upperBound..<text.endIndex))
        return String(text[marker.upperBound..<end.lowerBound])
    }

    static func code(_ result: ProcessResult) -> String? {
        (try? result.json()["error"] as? [String: Any])?["code"] as? String
    }

    /// A small publisher's repository (`repo init --key`: one key for every role) on nginx, and a
    /// device's trusted metadata made from its first root.
    final class Publisher {
        let server: HTTPSServer
        let work: Workspace
        let name: String
        var repo: String { server.www + "/" + name }
        var metadataURL: String { server.url(name + "/metadata/") }
        var key: [String] { ["--key", work.privatePEM, "--passphrase-file", work.passFile] }
        var metadata: String { work.directory.file("metadata") }
        var dest: String { work.directory.file("opt/app") }
        var state: String { work.directory.file("state.json") }

        init(_ name: String) throws {
            server = try TUFCLITests.shared.get()
            work = try Workspace()
            self.name = name
            try check(CLI.run(["repo", "init", repo] + key))
            try check(CLI.run(["tuf", "init", "--metadata-dir", metadata, repo + "/metadata/1.root.json"]))
        }

        @discardableResult
        func check(_ result: ProcessResult) throws -> ProcessResult {
            guard result.status == 0 else { throw SupportError("signet failed (\(result.status)): \(result.stderr)") }
            return result
        }

        /// Packs release `sequence` (files that say so) and publishes it on channel `stable`.
        func release(_ sequence: Int, files: [String: String]? = nil) throws {
            let tree = try TemporaryDirectory()
            for (path, text) in files ?? ["a.txt": "release \(sequence)\n", "b/c.txt": "same in every release\n"] {
                try FileManager.default.createDirectory(atPath: (tree.file(path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data(text.utf8).write(to: URL(fileURLWithPath: tree.file(path)))
            }
            let package = work.directory.file("app-\(sequence).zip")
            try check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", package] + key))
            try check(CLI.run(["repo", "add", repo, package, "--channel", "stable"] + key))
            try check(
                CLI.run([
                    "repo", "refresh", repo, "--snapshot-key", work.privatePEM, "--timestamp-key", work.privatePEM,
                    "--passphrase-file", work.passFile
                ]))
        }

        /// The config lines that name the repository, the device's metadata, DIR and the state.
        var configLines: String {
            """
            repository = "\(metadataURL)"
            tuf-metadata = "\(metadata)"
            channel = "stable"
            dest = "\(dest)"
            tls-ca = ["\(server.root)"]
            state = "\(state)"

            """
        }

        func installedText() -> String? { try? String(contentsOfFile: dest + "/a.txt", encoding: .utf8) }
    }

    @Test(
        "A USB stick: a copy of the repository in a folder (or file://) installs under every TUF check; a changed package, changed metadata and a stale copy are refused, DIR unchanged"
    )
    func localMedia() throws {
        let p = try Publisher("update-stick")
        try p.release(1)
        let sticks = p.work.directory.file("sticks")
        func copy(_ name: String) throws -> String {
            let stick = "\(sticks)/\(name)/app"
            try FileManager.default.createDirectory(atPath: stick, withIntermediateDirectories: true)
            for folder in ["metadata", "targets"] { try FileManager.default.copyItem(atPath: p.repo + "/" + folder, toPath: stick + "/" + folder) }
            return stick
        }
        func update(_ repository: String) throws -> ProcessResult {
            try CLI.run(["update", "--repository", repository, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--json"])
        }
        // README's block as written: the stick made from the repository, the device's config
        // with the stick as its repository.
        let config = try p.work.directory.write("app.conf", Data(p.configLines.utf8), mode: 0o600)
        let block = try Self.readmeBlock("usb-stick").replacingOccurrences(of: "/srv/www/app", with: p.repo)
            .replacingOccurrences(of: "/media/stick", with: sticks + "/readme").replacingOccurrences(of: "/etc/signet/update.d/app.conf", with: config)
        let ran = try SignetTestSupport.run(
            "bash", ["-euo", "pipefail", "-c", block],
            environment: [
                "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":"
                    + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
            ])
        #expect(ran.status == 0 && p.installedText() == "release 1\n", "\(block)\n\(ran.stdoutText) \(ran.stderr)")
        let one = try copy("one")
        try p.release(2)
        let two = try copy("two")
        // Changed metadata (first: a device that verified this version keeps it and reads it no
        // more): the newest targets version edited, its signature no longer covers it.
        let edited = try copy("edited")
        let versions = try FileManager.default.contentsOfDirectory(atPath: edited + "/metadata").filter { $0.hasSuffix(".targets.json") }.sorted {
            $0.count < $1.count || ($0.count == $1.count && $0 < $1)
        }
        let newest = edited + "/metadata/" + (try #require(versions.last))
        let text = try String(contentsOfFile: newest, encoding: .utf8).replacingOccurrences(of: "\"stable\"", with: "\"stabl3\"")
        try Data(text.utf8).write(to: URL(fileURLWithPath: newest))
        let forged = try update(edited + "/metadata/")
        #expect(forged.status != 0 && ["threshold-not-met", "metadata-mismatch"].contains(Self.code(forged) ?? ""), "\(forged.stdoutText)")
        #expect(p.installedText() == "release 1\n")
        // A changed byte in the package: refused against its target, nothing installed.
        let package = try #require(try FileManager.default.contentsOfDirectory(atPath: two + "/targets").first { $0.hasSuffix("app-2.zip") })
        let changed = try copy("changed")
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: changed + "/targets/" + package))
        try handle.seek(toOffset: 40)
        let byte = try #require(try handle.read(upToCount: 1)?.first)
        try handle.seek(toOffset: 40)
        try handle.write(contentsOf: Data([byte ^ 0xff]))
        try handle.close()
        let tampered = try update("file://" + changed + "/metadata/")
        #expect(tampered.status == 1 && Self.code(tampered) == "metadata-mismatch" && p.installedText() == "release 1\n", "\(tampered.stdoutText)")
        // The good copy installs release 2; the older stick is then a rollback.
        let good = try update("file://" + two + "/metadata/")
        #expect(good.status == 0 && p.installedText() == "release 2\n", "\(good.stdoutText) \(good.stderr)")
        let stale = try update(one + "/metadata/")
        #expect(stale.status == 1 && Self.code(stale) == "rollback" && p.installedText() == "release 2\n", "\(stale.stdoutText)")
    }

    @Test(
        "examples/update/app.conf drives a run as written (with issue 52's ima and verity keys added); command-line options override it; an unknown key is exit 2 naming it and its line; an old index key says what replaced it"
    )
    func configFile() throws {
        let p = try Publisher("update-config")
        try p.release(1)
        try FileManager.default.createDirectory(atPath: p.work.directory.file("opt"), withIntermediateDirectories: true)
        let example = try String(contentsOfFile: Self.repository + "/examples/update/app.conf", encoding: .utf8)
        let config =
            example
            .replacingOccurrences(of: "https://updates.example.com/app/metadata/", with: p.metadataURL)
            .replacingOccurrences(of: "/var/lib/signet/tuf/app", with: p.metadata)
            .replacingOccurrences(of: "/opt/app", with: p.dest)
            .replacingOccurrences(of: "/etc/app/tls-roots.pem", with: p.server.root)
            .replacingOccurrences(of: "/var/lib/signet/app-state.json", with: p.state)
        #expect(
            config != example && !config.split(separator: "\n").contains { !$0.hasPrefix("#") && $0.contains("example.com") },
            "every path of the example's settings is replaced (commented keys may name example hosts)")
        let path = p.work.directory.file("app.conf")
        // Issue 52: ima and verity are config keys; verity = "auto" falls back (this package has
        // no fs-verity digests) and says why.
        try Data((config + "ima = \"user\"\nverity = \"auto\"\n").utf8).write(to: URL(fileURLWithPath: path))
        let ran = try CLI.run(["update", "--config", path, "--json"])
        #expect(ran.status == 0, "\(ran.stderr)")
        #expect(p.installedText() == "release 1\n")
        #expect(((try ran.json()["verity"] as? [String: Any])?["not_used"] as? String)?.contains("pack --verity") == true, "\(ran.stdoutText)")
        let attribute = try SignetTestSupport.run("getfattr", ["--only-values", "-n", "user.ima", p.dest + "/a.txt"])
        #expect(attribute.status == 0 && attribute.stdout.first == 0x03, "user.ima on a.txt: \(attribute.stderr)")
        try Data((config + "verity = \"sometimes\"\n").utf8).write(to: URL(fileURLWithPath: path))
        let badVerity = try CLI.run(["update", "--config", path])
        #expect(badVerity.status == 2 && badVerity.stderr.contains("'verity' takes true or false, or \"auto\""), "\(badVerity.stderr)")
        try Data(config.utf8).write(to: URL(fileURLWithPath: path))
        // The command line wins: a channel the repository does not list is refused.
        let overridden = try CLI.run(["update", "--config", path, "--channel", "beta", "--json"])
        #expect(overridden.status != 0 && Self.code(overridden) == "target-not-found", "\(overridden.stdoutText)")
        // Issue 49, point 11: the channels that exist are named.
        #expect(overridden.stderr.contains("channel 'beta'") && overridden.stderr.contains("channels for 'app': stable"), "\(overridden.stderr)")
        #expect(p.installedText() == "release 1\n")
        // An unknown key, on line 3.
        try Data("channel = \"stable\"\n# a comment\ndestination = \"/opt/x\"\n".utf8).write(to: URL(fileURLWithPath: path))
        let unknown = try CLI.run(["update", "--config", path])
        #expect(unknown.status == 2, "\(unknown.stderr)")
        #expect(unknown.stderr.contains("unknown key 'destination'") && unknown.stderr.contains(":3"), "\(unknown.stderr)")
        // A config written for the channel index: exit 2, saying what to write instead.
        try Data("index = \"https://updates.example.com/app/stable.json\"\nchannel = \"stable\"\n".utf8).write(to: URL(fileURLWithPath: path))
        let old = try CLI.run(["update", "--config", path])
        #expect(old.status == 2 && old.stderr.contains("'index'") && old.stderr.contains("repository ="), "\(old.stderr)")
    }

    @Test("--wait bounds the wait for the metadata folder's lock too: another client holding it is exit 5 after --wait, not 10 s")
    func waitForMetadataLock() throws {
        let p = try Publisher("update-wait")
        try p.release(1)
        let lockPath = (p.metadata as NSString).deletingLastPathComponent + "/.metadata.signet-lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0, "the test holds the metadata lock")
        defer { close(fd) }
        let started = Date()
        let waited = try CLI.run([
            "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest,
            "--tls-ca", p.server.root, "--wait", "1", "--json"
        ])
        let seconds = Date().timeIntervalSince(started)
        #expect(waited.status == 5, "\(waited.stdoutText)")
        #expect(seconds < 5, "waited \(seconds) s for --wait 1")
        #expect(p.installedText() == nil)
    }

    @Test("the channel index and --reseal are gone: channel sign, update INDEX_URL and --reseal are usage errors (exit 2), and help no longer offers them")
    func removedForms() throws {
        let work = try TemporaryDirectory()
        let runs: [[String]] = [
            ["channel", "sign", "--channel", "stable", "--package", work.file("a.zip"), "--url", "a.zip", "--key", "k.pem", "--out", work.file("i.json")],
            ["update", "https://updates.example.com/stable.json", "--channel", "stable", "--dest", work.file("d"), "--pubkey", "k.der"],
            [
                "update", "--repository", "https://updates.example.com/m/", "--tuf-metadata", work.file("m"), "--channel", "stable", "--dest", work.file("d"),
                "--reseal"
            ],
            ["unpack", work.file("a.zip"), "--dest", work.file("d"), "--pubkey", "k.der", "--reseal"]
        ]
        for arguments in runs {
            let result = try CLI.run(arguments)
            #expect(result.status == 2, "\(arguments.prefix(2)): \(result.status) \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: work.file("d")) && !FileManager.default.fileExists(atPath: work.file("i.json")))
        }
        for help in [["--help"], ["update", "--help"], ["unpack", "--help"]] {
            let text = try CLI.run(help).stdoutText
            #expect(!text.contains("--reseal") && !text.contains("channel sign") && !text.contains("index-url"), "\(help): \(text)")
        }
        let update = try CLI.run(["update", "--help"]).stdoutText
        #expect(update.contains("--repository") && update.contains("signet tuf init"), "\(update)")
    }

    @Test(
        "the update service and timer, the varlink service and its socket pass systemd-analyze verify (with the built binary); the service keeps the update sandbox"
    )
    func systemdUnits() throws {
        let verified = try run(Self.repository + "/scripts/verify-units.sh", [], environment: ["SIGNET_BINARY": CLI.binary])
        #expect(verified.status == 0, "\(verified.stderr)")
        let service = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-update@.service", encoding: .utf8)
        for setting in [
            "ProtectSystem=strict", "NoNewPrivileges=yes", "ReadWritePaths=/var/lib/signet",
            "ExecStart=/usr/bin/signet update --config /etc/signet/update.d/%i.conf"
        ] {
            #expect(service.contains(setting), "\(setting)")
        }
        let timer = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-update@.timer", encoding: .utf8)
        #expect(timer.contains("RandomizedDelaySec=") && timer.contains("Persistent=true"))
        // The varlink service: the socket the unit makes is the one the command names; the
        // service keeps the update service's sandbox.
        let socket = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-serve@.socket", encoding: .utf8)
        for setting in ["ListenStream=/run/signet/%i.varlink", "SocketMode=0660", "SocketGroup=signet", "SocketUser=root"] {
            #expect(socket.contains(setting), "\(setting)")
        }
        let serve = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-serve@.service", encoding: .utf8)
        #expect(serve.contains("ExecStart=/usr/bin/signet serve --varlink unix:/run/signet/%i.varlink --config /etc/signet/update.d/%i.conf"))
        let sandbox = service.components(separatedBy: "[Service]\n").last!.split(separator: "\n").filter {
            !$0.hasPrefix("#") && $0.contains("=") && !$0.hasPrefix("ExecStart") && !$0.hasPrefix("Type") && !$0.hasPrefix("TimeoutStartSec")
        }
        #expect(sandbox.count > 20, "\(sandbox)")
        for setting in sandbox {
            #expect(serve.contains(setting + "\n"), "the service's sandbox has \(setting)")
        }
        let sysusers = try String(contentsOfFile: Self.repository + "/packaging/sysusers.d/signet.conf", encoding: .utf8)
        #expect(sysusers.contains("\ng signet -\n"))
    }

    @Test(
        "a sealed DIR is never left unsealed: a package without a seal is refused (exit 5, DIR unchanged); a publisher-sealed tree installs with --trust-seal-key and reverifies"
    )
    func sealedDestination() throws {
        let w = try Workspace()
        let salt = w.directory.file("salt")
        try Data("device secret\n".utf8).write(to: URL(fileURLWithPath: salt))
        let next = w.directory.file("next")
        #expect(try CLI.run(["keygen", "--out", next, "--bits", "2048", "--passphrase-file", w.passFile]).status == 0)
        // The device's trust directory, installed from a package, then sealed with its salt.
        let trust = w.directory.file("trust")
        func package(_ sequence: Int, _ files: [String: String], sealKey: String? = nil) throws -> String {
            let tree = try TemporaryDirectory()
            for (path, source) in files { try FileManager.default.copyItem(atPath: source, toPath: tree.file(path)) }
            if let sealKey {
                #expect(try CLI.run(["trust", "seal", tree.path, "--key", sealKey, "--passphrase-file", w.passFile]).status == 0)
            }
            let out = w.directory.file("trust-\(sequence).zip")
            let packed = try CLI.run([
                "pack", tree.path, "--key", w.privatePEM, "--passphrase-file", w.passFile, "--name", "app-trust",
                "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out
            ])
            guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
            return out
        }
        func listing() throws -> [String] {
            try FileManager.default.subpathsOfDirectory(atPath: trust).filter { !$0.hasPrefix(".signet/") && $0 != ".signet" }.sorted()
        }
        #expect(try CLI.run(["unpack", try package(1, ["release.der": w.publicDER]), "--dest", trust, "--pubkey", w.publicDER]).status == 0)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        let before = try listing()
        #expect(before == [".signet-trust", "release.der"], "\(before)")

        // Installed as it is, the sealed directory would be left unsealed: exit 5, unchanged.
        let unsealed = try CLI.run([
            "unpack", try package(2, ["release.der": w.publicDER]), "--dest", trust, "--trust-dir", trust,
            "--trust-salt-file", salt, "--json"
        ])
        #expect(unsealed.status == 5 && Self.code(unsealed) == "destination-refused", "\(unsealed.stderr)")
        #expect(unsealed.stderr.contains("signet trust seal") && !unsealed.stderr.contains("--reseal"), "\(unsealed.stderr)")
        #expect(try listing() == before)
        #expect(try CLI.run(["reverify", trust, "--trust-dir", trust, "--trust-salt-file", salt]).status == 0, "the device's own seal is not an added file")

        // The publisher seals the new tree with the seal key; the device checks it with that key.
        let sealed = try package(3, ["release.der": w.publicDER, "next.der": next + "/public_key.der"], sealKey: next + "/private_key.pem")
        let installed = try CLI.run(["unpack", sealed, "--dest", trust, "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(installed.status == 0, "\(installed.stderr)")
        let check = try CLI.run(["reverify", trust, "--trust-dir", trust, "--trust-seal-key", next + "/public_key.der"])
        #expect(check.status == 0, "\(check.stderr)\(check.stdoutText)")
        let after = try listing()
        #expect(after == [".signet-trust", ".signet-trust.sig", "next.der", "release.der"], "\(after)")
    }
}
