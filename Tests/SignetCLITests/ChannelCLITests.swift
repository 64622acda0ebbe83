import Foundation
import Testing
import SignetTestSupport

/// Issue 27: signed, expiring channel indexes (`signet channel sign`) and `signet update`,
/// against a real nginx (one for the suite).
@Suite("Channels: signet channel sign and signet update against nginx", .serialized)
struct ChannelCLITests {
    nonisolated(unsafe) static let shared = Result { try HTTPSServer() }

    /// A publisher's setup: keys, a package per release, an index per channel, all under www/NAME/.
    final class Publisher {
        let server: HTTPSServer
        let work: Workspace
        let folder: String
        let name: String

        init(_ name: String) throws {
            server = try ChannelCLITests.shared.get()
            work = try Workspace()
            self.name = name
            folder = server.www + "/" + name
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }

        /// Packs release `sequence` (files that say so) as `app-SEQUENCE.zip`.
        func release(_ sequence: Int, files: [String: String]? = nil) throws {
            let tree = try TemporaryDirectory()
            for (path, text) in files ?? ["a.txt": "release \(sequence)\n", "b/c.txt": "same in every release\n"] {
                try FileManager.default.createDirectory(atPath: (tree.file(path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data(text.utf8).write(to: URL(fileURLWithPath: tree.file(path)))
            }
            let packed = try CLI.run(["pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
                                      "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", folder + "/app-\(sequence).zip"])
            guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
        }

        /// Signs `channel.json` for release `sequence`.
        @discardableResult
        func sign(_ sequence: Int, channel: String = "stable", out: String? = nil, key: String? = nil, extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["channel", "sign", "--channel", channel, "--package", folder + "/app-\(sequence).zip", "--url", "app-\(sequence).zip",
                         "--key", key ?? work.privatePEM, "--passphrase-file", work.passFile, "--out", out ?? folder + "/\(channel).json", "--json"] + extra)
        }

        var dest: String { work.directory.file("opt/app") }
        var state: String { work.directory.file("state.json") }

        /// `signet update` of this publisher's channel index into `dest`.
        func update(_ channel: String = "stable", index: String? = nil, _ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["update", server.url(name + "/" + (index ?? "\(channel).json")), "--channel", channel, "--dest", dest,
                         "--pubkey", work.publicDER, "--tls-ca", server.root, "--state", state, "--json"] + extra)
        }

        func installedText() -> String? { try? String(contentsOfFile: dest + "/a.txt", encoding: .utf8) }
    }

    static func code(_ result: ProcessResult) -> String? {
        (try? result.json()["error"] as? [String: Any])?["code"] as? String
    }

    @Test("sign an index and update: installs; re-signed (higher serial): up to date; a new release: installs through ranges; --check changes nothing")
    func updateCycle() throws {
        let p = try Publisher("cycle")
        try FileManager.default.createDirectory(atPath: p.work.directory.file("opt"), withIntermediateDirectories: true)
        try p.release(1)
        let signed = try p.sign(1)
        #expect(signed.status == 0, "\(signed.stderr)")
        let first = try signed.json()["serial"] as? Int ?? 0
        let installed = try p.update()
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(try installed.json()["updated"] as? Bool == true)
        #expect(p.installedText() == "release 1\n")

        // The cron job re-signs the same release: a higher serial, up to date.
        let again = try p.sign(1)
        #expect((try again.json()["serial"] as? Int ?? 0) > first)
        let same = try p.update()
        let sameReport = try same.json()
        #expect(same.status == 0 && sameReport["updated"] as? Bool == false && sameReport["update_available"] as? Bool == false, "\(same.stdoutText)")
        let text = try CLI.run(["update", p.server.url("cycle/stable.json"), "--channel", "stable", "--dest", p.dest, "--pubkey", p.work.publicDER,
                                "--tls-ca", p.server.root, "--state", p.state])
        #expect(text.status == 0 && text.stdoutText.contains("up to date"), "\(text.stdoutText)")

        // A new release: --check reports it and changes nothing; update installs it.
        try p.release(2)
        try p.sign(2)
        let stateBefore = try Data(contentsOf: URL(fileURLWithPath: p.state))
        let checked = try p.update("stable", index: nil, ["--check"])
        #expect(checked.status == 0, "\(checked.stderr)")
        #expect(try checked.json()["update_available"] as? Bool == true)
        #expect((try checked.json()["installed"] as? [String: Any])?["sequence"] as? Int == 1)
        #expect((try checked.json()["available"] as? [String: Any])?["sequence"] as? Int == 2)
        #expect(p.installedText() == "release 1\n")
        #expect(try Data(contentsOf: URL(fileURLWithPath: p.state)) == stateBefore, "--check records nothing")
        let updated = try p.update()
        #expect(updated.status == 0, "\(updated.stderr)")
        #expect(p.installedText() == "release 2\n")
        let transfer = try #require(try updated.json()["transfer"] as? [String: Any])
        #expect(transfer["mode"] as? String == "ranges" && transfer["files_reused"] as? Int == 1, "\(transfer)")
        #expect(try CLI.run(["reverify", p.dest, "--pubkey", p.work.publicDER]).status == 0)
    }

    @Test("refused: an expired index (stale-index), an older index served again (rollback), another channel's index (wrong-channel), a key from another channel's folder (exit 3); DIR unchanged")
    func refusals() throws {
        let p = try Publisher("refuse")
        try p.release(1)
        try p.release(2)
        try p.sign(1)
        #expect(try p.update().status == 0)
        // Expired: signed for 2 s, used after 3 s.
        #expect(try p.sign(2, extra: ["--expires-in", "2s"]).status == 0)
        sleep(3)
        let stale = try p.update("stable", index: nil, ["--clock-skew", "0"])
        #expect(stale.status == 1 && Self.code(stale) == "stale-index", "\(stale.stderr)")
        #expect(stale.stderr.contains("expired at"), "\(stale.stderr)")
        #expect(p.installedText() == "release 1\n")

        // A replay: an older, still valid index served after a newer one was seen.
        let old = try p.sign(1, out: p.folder + "/replay.json")
        let oldSerial = try #require(try old.json()["serial"] as? Int)
        #expect(try p.sign(2, extra: ["--serial", "\(oldSerial + 1)"]).status == 0)
        #expect(try p.update().status == 0)
        #expect(p.installedText() == "release 2\n")
        let replay = try p.update("stable", index: "replay.json")
        #expect(replay.status == 1 && Self.code(replay) == "rollback", "\(replay.stderr)")
        #expect(p.installedText() == "release 2\n")

        // The beta channel's index where stable is configured.
        try p.sign(2, channel: "beta")
        let beta = try p.update("stable", index: "beta.json")
        #expect(beta.status == 1 && Self.code(beta) == "wrong-channel", "\(beta.stderr)")

        // A key trusted only for beta (its folder in the trust directory) signing stable: exit 3.
        let other = p.work.directory.file("beta-keys")
        #expect(try CLI.run(["keygen", "--out", other, "--bits", "2048", "--passphrase-file", p.work.passFile]).status == 0)
        let trust = p.work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust + "/beta", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: p.work.publicDER, toPath: trust + "/release.der")
        try FileManager.default.copyItem(atPath: other + "/public_key.der", toPath: trust + "/beta/beta.der")
        try p.sign(2, out: p.folder + "/by-beta.json", key: other + "/private_key.pem")
        let restricted = try CLI.run(["update", p.server.url("refuse/by-beta.json"), "--channel", "stable", "--dest", p.dest, "--trust-dir", trust,
                                      "--tls-ca", p.server.root, "--json"])
        #expect(restricted.status == 3, "\(restricted.stderr)")
        #expect(restricted.stderr.contains("channel 'beta' only"), "\(restricted.stderr)")
        #expect(p.installedText() == "release 2\n")
    }

    @Test("an index whose package is not the one it binds: exit 1 index-mismatch, nothing installed; garbage, truncated, duplicate-key and huge indexes: exit 4")
    func mismatchAndMalformed() throws {
        let p = try Publisher("bad")
        try p.release(1)
        try p.release(2)
        try p.sign(1)
        #expect(try p.update().status == 0)
        // The index binds release 2, but the server's app-2.zip is another, validly signed release 3.
        try p.sign(2)
        try p.release(3)
        try FileManager.default.removeItem(atPath: p.folder + "/app-2.zip")
        try FileManager.default.moveItem(atPath: p.folder + "/app-3.zip", toPath: p.folder + "/app-2.zip")
        for extra in [[String](), ["--full-download"]] {
            let mismatch = try p.update("stable", index: nil, extra)
            #expect(mismatch.status == 1 && Self.code(mismatch) == "index-mismatch", "\(extra): \(mismatch.stderr)")
            #expect(p.installedText() == "release 1\n")
        }

        let good = try Data(contentsOf: URL(fileURLWithPath: p.folder + "/stable.json"))
        let envelope = try #require(try JSONSerialization.jsonObject(with: good) as? [String: Any])
        let payload = try #require(Data(base64Encoded: envelope["payload"] as! String))
        let payloadText = String(decoding: payload, as: UTF8.self)
        func withPayload(_ text: String) throws -> Data {
            var copy = envelope
            copy["payload"] = Data(text.utf8).base64EncodedString()
            return try JSONSerialization.data(withJSONObject: copy)
        }
        let cases: [(String, Data)] = [
            ("garbage", Data("not an index at all".utf8)),
            ("truncated", good.prefix(good.count / 2)),
            ("duplicate keys", Data(String(decoding: good, as: UTF8.self).replacingOccurrences(of: "{\n", with: "{\n  \"payloadType\": \"x\",\n").utf8)),
            ("duplicate keys in the payload", try withPayload(payloadText.replacingOccurrences(of: "{\"format\"", with: "{\"serial\":1,\"format\""))),
            ("huge", Data(repeating: 0x20, count: 600_000) + good),
        ]
        for (name, bytes) in cases {
            try bytes.write(to: URL(fileURLWithPath: p.folder + "/broken.json"))
            let result = try p.update("stable", index: "broken.json")
            #expect(result.status == 4, "\(name): \(result.status) \(result.stderr)")
            #expect(p.installedText() == "release 1\n")
        }
    }

    @Test("a config file drives the same run; command-line options override it; an unknown key is exit 2 naming it and its line")
    func configFile() throws {
        let p = try Publisher("config")
        try p.release(1)
        try p.sign(1)
        let example = try String(contentsOfFile: Self.repository + "/examples/update/app.conf", encoding: .utf8)
        let config = example
            .replacingOccurrences(of: "https://updates.example.com/app/stable.json", with: p.server.url("config/stable.json"))
            .replacingOccurrences(of: "/opt/app", with: p.dest)
            .replacingOccurrences(of: "/etc/app/trust", with: p.work.directory.file("trust"))
            .replacingOccurrences(of: "/etc/app/tls-roots.pem", with: p.server.root)
            .replacingOccurrences(of: "/var/lib/signet/app-state.json", with: p.state)
        try FileManager.default.createDirectory(atPath: p.work.directory.file("trust"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: p.work.publicDER, toPath: p.work.directory.file("trust/release.der"))
        let path = p.work.directory.file("app.conf")
        try Data(config.utf8).write(to: URL(fileURLWithPath: path))
        let ran = try CLI.run(["update", "--config", path, "--json"])
        #expect(ran.status == 0, "\(ran.stderr)")
        #expect(p.installedText() == "release 1\n")
        // The command line wins: another channel than the file's is refused by the index.
        let overridden = try CLI.run(["update", "--config", path, "--channel", "beta", "--json"])
        #expect(overridden.status == 1 && Self.code(overridden) == "wrong-channel", "\(overridden.stderr)")
        // An unknown key, on line 3.
        try Data("channel = \"stable\"\n# a comment\ndestination = \"/opt/x\"\n".utf8).write(to: URL(fileURLWithPath: path))
        let unknown = try CLI.run(["update", "--config", path])
        #expect(unknown.status == 2, "\(unknown.stderr)")
        #expect(unknown.stderr.contains("unknown key 'destination'") && unknown.stderr.contains(":3"), "\(unknown.stderr)")
    }

    @Test("the update service and timer pass systemd-analyze verify (with the built binary)")
    func systemdUnits() throws {
        let verified = try run(Self.repository + "/scripts/verify-units.sh", [], environment: ["SIGNET_BINARY": CLI.binary])
        #expect(verified.status == 0, "\(verified.stderr)")
        let service = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-update@.service", encoding: .utf8)
        for setting in ["ProtectSystem=strict", "NoNewPrivileges=yes", "ReadWritePaths=/var/lib/signet", "ExecStart=/usr/bin/signet update --config /etc/signet/update.d/%i.conf"] {
            #expect(service.contains(setting), "\(setting)")
        }
        let timer = try String(contentsOfFile: Self.repository + "/packaging/systemd/signet-update@.timer", encoding: .utf8)
        #expect(timer.contains("RandomizedDelaySec=") && timer.contains("Persistent=true"))
    }

    @Test("README's update-channel walk-through runs as written: check, install, up to date")
    func readmeChannel() throws {
        let server = try Self.shared.get()
        let text = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        let marker = try #require(text.range(of: "<!-- channel-update -->\n```sh\n"))
        let end = try #require(text.range(of: "\n```", range: marker.upperBound..<text.endIndex))
        let work = try TemporaryDirectory()
        let d = work.path
        let environment: [String: String?] = [
            "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SIGNET_PASSPHRASE": "channel walk-through",
        ]
        let setup = """
        set -e
        mkdir -p dist pki
        echo 'app 1.4.2' > dist/version.txt
        signet keygen --out keys --bits 2048 --passphrase-env SIGNET_PASSPHRASE > /dev/null
        cp '\(server.root)' pki/root.pem
        """
        #expect(try run("bash", ["-c", setup], environment: environment, directory: d).status == 0)
        let www = server.www + "/readme-channel"
        let script = String(text[marker.upperBound..<end.lowerBound])
            .replacingOccurrences(of: "https://updates.example.com/app/", with: server.url("readme-channel/"))
            .replacingOccurrences(of: "/srv/www/app/", with: www + "/")
            .replacingOccurrences(of: "/etc/", with: d + "/etc/")
            .replacingOccurrences(of: "/opt/", with: d + "/opt/")
            .replacingOccurrences(of: "/var/lib/", with: d + "/var/lib/")
        try FileManager.default.createDirectory(atPath: www, withIntermediateDirectories: true)
        let ran = try run("bash", ["-euo", "pipefail", "-c", script], environment: environment, directory: d)
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        let lines = ran.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("update available") } && lines.contains { $0.hasPrefix("updated") } && lines.contains { $0.hasPrefix("up to date") },
                "\(ran.stdoutText)")
        #expect(try String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8) == "app 1.4.2\n")
    }

    /// The repository (for examples/).
    static let repository: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()
}
