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

    @Test("the red-team pass of issue 37: the serial does not wrap at 2^64, and --clock-skew cannot switch expiry off")
    func serialAndSkewBounds() throws {
        let p = try Publisher("bounds")
        try p.release(1)
        let top = try p.sign(1, extra: ["--serial", "18446744073709551615"])
        #expect(top.status == 0, "\(top.stderr)")
        let wrapped = try p.sign(1)
        #expect(wrapped.status == 2 && Self.code(wrapped) == "usage", "\(wrapped.stdoutText)")
        #expect(top.stdoutText.contains("\"serial\" : 18446744073709551615"), "\(top.stdoutText)")
        let skew = try p.update("stable", ["--clock-skew", "9223372036854775807"])
        #expect(skew.status == 2, "\(skew.stdoutText)")
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

    @Test("--reseal: adopts the device's sealed directory, refuses a tree that trusts no key for the channel (trust-lockout) or holds a non-key, a package with its own seal, a missing salt or a seal key; without it a sealed DIR is never left unsealed; a publisher-sealed tree installs with --trust-seal-key")
    func resealGuards() throws {
        let p = try Publisher("reseal")
        let w = p.work
        let salt = w.directory.file("salt")
        try Data("device secret\n".utf8).write(to: URL(fileURLWithPath: salt))
        let next = w.directory.file("next")
        #expect(try CLI.run(["keygen", "--out", next, "--bits", "2048", "--passphrase-file", w.passFile]).status == 0)
        // The device's trust directory, made by hand and sealed with its salt.
        let trust = w.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: w.publicDER, toPath: trust + "/release.der")
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        /// Packs `files` (path: source file) as trust package `sequence`, signed with the publisher's key.
        func trustPackage(_ sequence: Int, _ files: [String: String], key: String? = nil) throws -> String {
            let tree = try TemporaryDirectory()
            for (path, source) in files {
                try FileManager.default.createDirectory(atPath: (tree.file(path) as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: source, toPath: tree.file(path))
            }
            let out = p.folder + "/trust-\(sequence).zip"
            let packed = try CLI.run(["pack", tree.path, "--key", key ?? w.privatePEM, "--passphrase-file", w.passFile, "--name", "app-trust",
                                      "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out])
            guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
            return out
        }
        func unpack(_ package: String, _ extra: [String]) throws -> ProcessResult {
            try CLI.run(["unpack", package, "--dest", trust, "--trust-dir", trust, "--state", p.state, "--json"] + extra)
        }
        func listing() throws -> [String] {
            try FileManager.default.subpathsOfDirectory(atPath: trust).filter { !$0.hasPrefix(".signet/") && $0 != ".signet" }.sorted()
        }

        // Adopted: the hand-made directory matches its seal with this salt; replaced, resealed.
        let first = try trustPackage(1, ["a.der": w.publicDER, "beta/b.der": next + "/public_key.der"])
        let adopted = try unpack(first, ["--trust-salt-file", salt, "--reseal"])
        #expect(adopted.status == 0, "\(adopted.stderr)")
        #expect(try listing() == [".signet-trust", "a.der", "beta", "beta/b.der"])
        #expect(try CLI.run(["reverify", trust, "--trust-dir", trust, "--trust-salt-file", salt]).status == 0)
        let before = try listing()

        // Without --reseal, the sealed directory would be left unsealed: exit 5, unchanged.
        let second = try trustPackage(2, ["a.der": w.publicDER])
        let unsealed = try unpack(second, ["--trust-salt-file", salt])
        #expect(unsealed.status == 5 && Self.code(unsealed) == "destination-refused", "\(unsealed.stderr)")
        #expect(unsealed.stderr.contains("--reseal"), "\(unsealed.stderr)")
        #expect(try listing() == before)
        // --reseal needs the salt, and cannot renew a seal signed with a key: exit 2.
        let noSalt = try unpack(second, ["--reseal"])
        #expect(noSalt.status == 2 && noSalt.stderr.contains("--trust-salt-file"), "\(noSalt.stderr)")
        let sealKey = try unpack(second, ["--reseal", "--trust-salt-file", salt, "--trust-seal-key", w.publicDER])
        #expect(sealKey.status == 2 && sealKey.stderr.contains("--trust-seal-key"), "\(sealKey.stderr)")

        // Lock-out: over the trust channel, a tree whose only key sits in the beta folder.
        let lockout = try trustPackage(3, ["beta/b.der": next + "/public_key.der"])
        let index = try CLI.run(["channel", "sign", "--channel", "trust", "--package", lockout, "--url", "trust-3.zip", "--key", w.privatePEM,
                                 "--passphrase-file", w.passFile, "--out", p.folder + "/trust.json"])
        #expect(index.status == 0, "\(index.stderr)")
        let locked = try CLI.run(["update", p.server.url("reseal/trust.json"), "--channel", "trust", "--dest", trust, "--trust-dir", trust,
                                  "--trust-salt-file", salt, "--reseal", "--tls-ca", p.server.root, "--state", p.state, "--json"])
        #expect(locked.status == 1 && Self.code(locked) == "trust-lockout", "\(locked.stderr)")
        #expect(try listing() == before)
        // examples/update/trust.conf drives the same run (--check: reports, changes nothing).
        let example = try String(contentsOfFile: Self.repository + "/examples/update/trust.conf", encoding: .utf8)
            .replacingOccurrences(of: "https://updates.example.com/app/trust.json", with: p.server.url("reseal/trust.json"))
            .replacingOccurrences(of: "/etc/app/trust", with: trust)
            .replacingOccurrences(of: "/etc/app/seal-salt", with: salt)
            .replacingOccurrences(of: "/etc/app/tls-roots.pem", with: p.server.root)
            .replacingOccurrences(of: "/var/lib/signet/app-state.json", with: p.state)
        let config = w.directory.file("trust.conf")
        try Data(example.utf8).write(to: URL(fileURLWithPath: config))
        let checked = try CLI.run(["update", "--config", config, "--check", "--json"])
        #expect(checked.status == 0, "\(checked.stderr)")
        #expect(try checked.json()["update_available"] as? Bool == true)
        let viaConfig = try CLI.run(["update", "--config", config, "--json"])
        #expect(viaConfig.status == 1 && Self.code(viaConfig) == "trust-lockout", "\(viaConfig.stderr)")
        #expect(try listing() == before)
        // A file in the new tree that is not a key: exit 4, unchanged.
        let notes = w.directory.file("notes.txt")
        try Data("not a key\n".utf8).write(to: URL(fileURLWithPath: notes))
        let garbage = try unpack(try trustPackage(4, ["a.der": w.publicDER, "notes.txt": notes]), ["--trust-salt-file", salt, "--reseal"])
        #expect(garbage.status == 4, "\(garbage.stderr)")
        #expect(try listing() == before)
        // A package bringing its own seal is not resealed over: exit 2.
        let ownSeal = try unpack(try trustPackage(5, ["a.der": w.publicDER, ".signet-trust": notes]), ["--trust-salt-file", salt, "--reseal"])
        #expect(ownSeal.status == 2 && ownSeal.stderr.contains("own trust seal"), "\(ownSeal.stderr)")
        #expect(try listing() == before)
        // Still good: rotated onto the next key alone.
        let rotated = try unpack(try trustPackage(6, ["next.der": next + "/public_key.der"]), ["--trust-salt-file", salt, "--reseal"])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(try listing() == [".signet-trust", "next.der"])

        // Seal keys: the publisher seals the new tree with the seal key; installed without --reseal.
        let sealed = w.directory.file("sealed")
        try FileManager.default.createDirectory(atPath: sealed, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: w.publicDER, toPath: sealed + "/release.der")
        let sealing = ["trust", "seal", sealed, "--key", next + "/private_key.pem", "--passphrase-file", w.passFile]
        #expect(try CLI.run(sealing).status == 0)
        let published = try TemporaryDirectory()
        try FileManager.default.copyItem(atPath: next + "/public_key.der", toPath: published.file("next.der"))
        try FileManager.default.copyItem(atPath: w.publicDER, toPath: published.file("release.der"))
        #expect(try CLI.run(["trust", "seal", published.path, "--key", next + "/private_key.pem", "--passphrase-file", w.passFile]).status == 0)
        let sealedPackage = w.directory.file("sealed-trust.zip")
        #expect(try CLI.run(["pack", published.path, "--key", w.privatePEM, "--passphrase-file", w.passFile, "--name", "sealed-trust", "--version", "1",
                             "--sequence", "1", "--out", sealedPackage]).status == 0)
        let bySealKey = try CLI.run(["unpack", sealedPackage, "--dest", sealed, "--trust-dir", sealed, "--trust-seal-key", next + "/public_key.der", "--force", "--json"])
        #expect(bySealKey.status == 0, "\(bySealKey.stderr)")
        let check = try CLI.run(["reverify", sealed, "--trust-dir", sealed, "--trust-seal-key", next + "/public_key.der"])
        #expect(check.status == 0, "\(check.stderr)\(check.stdoutText)")
        #expect(FileManager.default.fileExists(atPath: sealed + "/.signet-trust.sig") && FileManager.default.fileExists(atPath: sealed + "/next.der"))
    }

    /// The shell block after `<!-- NAME -->` in README.md.
    static func readmeBlock(_ name: String) throws -> String {
        let text = try String(contentsOfFile: Self.repository + "/README.md", encoding: .utf8)
        let marker = try #require(text.range(of: "<!-- \(name) -->\n```sh\n"))
        let end = try #require(text.range(of: "\n```", range: marker.upperBound..<text.endIndex))
        return String(text[marker.upperBound..<end.lowerBound])
    }

    @Test("README's update-channel walk-through runs as written: check, install, up to date; then its key rotation through the trust channel")
    func readmeChannel() throws {
        let server = try Self.shared.get()
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
        func moved(_ block: String) -> String {
            block.replacingOccurrences(of: "https://updates.example.com/app/", with: server.url("readme-channel/"))
                .replacingOccurrences(of: "/srv/www/app/", with: www + "/")
                .replacingOccurrences(of: "/etc/", with: d + "/etc/")
                .replacingOccurrences(of: "/opt/", with: d + "/opt/")
                .replacingOccurrences(of: "/var/lib/", with: d + "/var/lib/")
        }
        try FileManager.default.createDirectory(atPath: www, withIntermediateDirectories: true)
        let ran = try run("bash", ["-euo", "pipefail", "-c", moved(try Self.readmeBlock("channel-update"))], environment: environment, directory: d)
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        let lines = ran.stdoutText.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("update available") } && lines.contains { $0.hasPrefix("updated") } && lines.contains { $0.hasPrefix("up to date") },
                "\(ran.stdoutText)")
        #expect(try String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8) == "app 1.4.2\n")

        // Issue 27 point 5: the signing key rotates through the trust channel.
        let rotated = try run("bash", ["-euo", "pipefail", "-c", moved(try Self.readmeBlock("trust-rotation"))], environment: environment, directory: d)
        #expect(rotated.status == 0, "\(rotated.stderr)\n\(rotated.stdoutText)")
        let trust = d + "/etc/app/trust"
        let keys = try FileManager.default.contentsOfDirectory(atPath: trust).sorted()
        #expect(keys == [".signet", ".signet-trust", "2026.der"], "\(keys)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: trust + "/2026.der")) == (try Data(contentsOf: URL(fileURLWithPath: d + "/keys-2026/public_key.der"))))
        let seal = try String(contentsOfFile: trust + "/.signet-trust", encoding: .utf8)
        #expect(seal.contains("\"salted\" : true") && seal.contains("2026.der") && !seal.contains(".signet/"), "\(seal)")
        #expect(try String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8) == "app 1.4.2\n", "dist did not change; 1.5.0 holds the same file")
        let state = try String(contentsOfFile: d + "/var/lib/signet/app-state.json", encoding: .utf8)
        #expect(state.contains("\"app-trust\"") && state.contains("\"trust\""), "\(state)")
        // The installed trust tree checks out, its device seal not reported as an added file.
        let tree = try CLI.run(["reverify", trust, "--pubkey", d + "/keys-2026/public_key.der", "--json"])
        #expect(tree.status == 0, "\(tree.stdoutText)")
        // The next trust run: up to date, and the directory still matches its seal.
        let again = try CLI.run(["update", "--config", d + "/etc/signet/update.d/trust.conf", "--json"])
        let againUpdated = try again.json()["updated"] as? Bool
        #expect(again.status == 0 && againUpdated == false, "\(again.stderr)")

        // The retired key signs a release and the stable index: refused (exit 3), DIR unchanged.
        let oldRelease = "signet pack dist --key keys/private_key.pem --passphrase-env SIGNET_PASSPHRASE --name app --version 1.6.0 --sequence 160 --out \(www)/app-1.6.0.zip && signet channel sign --channel stable --package \(www)/app-1.6.0.zip --url app-1.6.0.zip --key keys/private_key.pem --passphrase-env SIGNET_PASSPHRASE --out \(www)/stable.json"
        #expect(try run("bash", ["-euo", "pipefail", "-c", oldRelease], environment: environment, directory: d).status == 0)
        let refused = try CLI.run(["update", "--config", d + "/etc/signet/update.d/app.conf", "--json"])
        #expect(refused.status == 3 && Self.code(refused) == "untrusted-signer", "\(refused.stderr)")
        // A key file swapped on the device (the old key put back): the seal catches it (exit 3).
        try FileManager.default.removeItem(atPath: trust + "/2026.der")
        try FileManager.default.copyItem(atPath: d + "/keys/public_key.der", toPath: trust + "/2026.der")
        let swapped = try CLI.run(["update", "--config", d + "/etc/signet/update.d/app.conf", "--json"])
        #expect(swapped.status == 3 && Self.code(swapped) == "broken-trust-seal", "\(swapped.stderr)")
        #expect(try String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8) == "app 1.4.2\n")
        let meta = try run("getfattr", ["--only-values", "-n", "user.signet.meta", d + "/opt/app/version.txt"])
        #expect(meta.stdoutText.contains("\"sequence\":150"), "\(meta.stdoutText)")
    }

    /// The repository (for examples/).
    static let repository: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()
}
