import Foundation
import SignetTestSupport
import Testing

/// The release log end to end, run as a binary: a repository on nginx, three `signet witness
/// serve` on loopback (a 2-of-3 quorum), `log init|append|status|monitor`, `repo refresh`
/// refusing what is not logged, and a device's `update` that installs only what the log holds.
@Suite("Transparency log: publisher, witnesses, device, monitor (run as a binary)")
struct TransparencyCLITests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Transparency").path

    /// A witness run in the background (`--json`: its one line says its key and URL), and the
    /// line its policy gives it.
    final class RunningWitness {
        let process: BackgroundProcess
        let line: String
        let document: Data
        init(_ number: Int, log: String, work: TemporaryDirectory) throws {
            let key = "\(TransparencyCLITests.fixtures)/w\(number).pem"
            let out = work.file("w\(number).log")
            process = try BackgroundProcess(
                CLI.binary,
                [
                    "witness", "serve", "--listen", "127.0.0.1:0", "--key", key, "--name", "w\(number).example", "--log", log, "--state",
                    work.file("w\(number)"), "--json"
                ],
                log: out)
            var started: [String: Any]? = nil
            var bytes = Data()
            for _ in 0..<250 where started == nil {
                bytes = (try? Data(contentsOf: URL(fileURLWithPath: out))) ?? Data()
                if bytes.last == 0x0a { started = try JSONSerialization.jsonObject(with: bytes) as? [String: Any] } else { usleep(20_000) }
            }
            guard let started, let vkey = started["vkey"] as? String, let url = started["url"] as? String else {
                throw SupportError("witness \(number) did not start: \(String(decoding: bytes, as: UTF8.self))")
            }
            document = bytes
            line = "witness w\(number) \(vkey) \(url)"
        }
    }

    @Test(
        "2 of 3 witnesses cosign; refresh refuses an unlogged release; the device installs a logged one and refuses a missing proof, another release's proof, an older checkpoint, a tile off by one hash, a quorum short by one; the monitor finds a release no targets version lists"
    )
    func endToEnd() throws {
        let p = try UpdateCLITests.Publisher("tlog")
        let work = try TemporaryDirectory()
        let logKey = "\(Self.fixtures)/log.pem"
        let logVKey = try CLI.run(["log", "vkey", logKey, "--name", "example.com/app-log"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        // Every --json document a log command prints, checked against docs/schema/ at the end.
        var documents: [(command: String, stdout: Data)] = [
            ("log vkey", try CLI.run(["log", "vkey", logKey, "--name", "example.com/app-log", "--json"]).stdout)
        ]
        let witnesses = try (1...3).map { try RunningWitness($0, log: logVKey, work: work) }
        documents.append(("witness serve", witnesses[0].document))
        // w1 has seen a larger tree of this log (a fork, or another log under its name): it
        // answers 409 with a size above ours, and the quorum is met by w2 and w3.
        try FileManager.default.createDirectory(atPath: work.file("w1"), withIntermediateDirectories: true)
        let stateName = try SignetTestSupport.run("sh", ["-c", "printf %s 'example.com/app-log' | sha256sum | cut -c1-64"]).stdoutText.trimmingCharacters(
            in: .whitespacesAndNewlines)
        try Data("example.com/app-log\n999\n\(Data(repeating: 7, count: 32).base64EncodedString())\n".utf8).write(
            to: URL(fileURLWithPath: work.file("w1/\(stateName).checkpoint")))
        let policy = try work.write(
            "policy", Data((["log \(logVKey)"] + witnesses.map(\.line) + ["group all-three 2 w1 w2 w3", "quorum all-three", ""]).joined(separator: "\n").utf8))
        let refreshArguments = [
            "repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM, "--passphrase-file", p.work.passFile
        ]
        func release(_ sequence: Int, channel: String = "stable", logged: Bool = false) throws -> String {
            let tree = try TemporaryDirectory()
            _ = try tree.write("a.txt", Data("release \(sequence)\n".utf8))
            let package = p.work.directory.file("app-\(sequence).zip")
            try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", package] + p.key))
            let added = try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", channel] + p.key + (logged ? ["--log-key", logKey] : [])))
            #expect(added.stdoutText.contains(logged ? "logged app-\(sequence).zip; checkpoint" : "signet log append"), "\(added.stdoutText)")
            return package
        }
        func update(_ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(
                [
                    "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca", p.server.root,
                    "--json"
                ]
                    + extra)
        }
        func proofPath(_ sequence: Int) throws -> String {
            let name = try #require(
                try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets").first { $0.hasSuffix("app-\(sequence).zip.tlog-proof") })
            return p.repo + "/targets/" + name
        }

        // The log starts; its policy rides in root v2, signed by the root key.
        let started = try CLI.run(["log", "init", p.repo, "--key", logKey, "--policy", policy, "--json"])
        #expect(started.status == 0 && started.stdoutText.contains("\"root_version\" : 2"), "\(started.stdoutText) \(started.stderr)")
        documents.append(("log init", started.stdout))
        let digest = try #require(try CLI.run(["repo", "status", p.repo, "--json"]).stdoutText.firstMatch(of: /"digest"\s*:\s*"([0-9a-f]{64})"/)?.1)
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "root", "--digest", String(digest)] + p.key))
        _ = try release(1)
        // Not logged yet: refresh publishes nothing that names it.
        let refused = try CLI.run(refreshArguments)
        #expect(refused.status == 3 && refused.stderr.contains("app-1.zip, which the repository's log does not hold"), "\(refused.stderr)")
        let appended = try CLI.run(["log", "append", p.repo, "--key", logKey, "--json"])
        let appendReport = try JSONSerialization.jsonObject(with: appended.stdout) as? [String: Any]
        #expect(appended.status == 0 && appendReport?["cosigners"] as? [String] == ["w2", "w3"], "\(appended.stdoutText) \(appended.stderr)")
        #expect((appendReport?["refusals"] as? [String])?.first?.contains("w1: 409 Conflict") == true, "\(appended.stdoutText)")
        documents.append(("log append", appended.stdout))
        try p.check(CLI.run(refreshArguments))
        let first = try update()
        #expect(first.status == 0 && p.installedText() == "release 1\n", "\(first.stdoutText) \(first.stderr)")

        // Release 2 logged, its proof kept aside; release 3 on another channel makes the log 3.
        _ = try release(2)
        try p.check(CLI.run(["log", "append", p.repo, "--key", logKey]))
        let proofAtTwo = try Data(contentsOf: URL(fileURLWithPath: try proofPath(2)))
        _ = try release(3, channel: "beta")
        try p.check(CLI.run(["log", "append", p.repo, "--key", logKey]))
        try p.check(CLI.run(refreshArguments))
        let proofAtThree = try Data(contentsOf: URL(fileURLWithPath: try proofPath(2)))
        // The proof checked offline: with its own entry, under the policy, and refused for
        // another entry or a quorum short by one.
        let offline = try CLI.run(["log", "verify", try proofPath(2), "--policy", policy, "--json"])
        let offlineReport = try JSONSerialization.jsonObject(with: offline.stdout) as? [String: Any]
        #expect(
            offline.status == 0 && offlineReport?["index"] as? Int == 1 && offlineReport?["size"] as? Int == 3 && offlineReport?["name"] as? String == "app")
        documents.append(("log verify", offline.stdout))
        let otherEntry = try work.write("entry", Data("signet.release/v1\nname app\n".utf8))
        #expect(try CLI.run(["log", "verify", try proofPath(2), "--policy", policy, "--entry", otherEntry]).status == 3)
        func refusedUpdate(_ why: String, _ extra: [String] = [], file: String = #filePath, line: Int = #line) throws {
            let offset = p.server.accessLogSize
            let ran = try update(extra)
            let location = SourceLocation(fileID: #fileID, filePath: file, line: line, column: 1)
            #expect(
                ran.status == 3 && ran.stdoutText.contains("not-logged") && p.installedText() == "release 1\n",
                "\(why): \(ran.status) \(ran.stdoutText) \(ran.stderr)", sourceLocation: location)
            // Before anything of the release is fetched: its proof and the log's tiles only.
            let fetched = String(decoding: try Data(contentsOf: URL(fileURLWithPath: p.server.accessLog)).dropFirst(offset), as: UTF8.self)
                .split(separator: "\n").filter { $0.contains("/tlog/targets/") && !$0.contains(".tlog-proof ") }
            #expect(fetched.isEmpty, "\(why): a package was fetched: \(fetched)", sourceLocation: location)
        }
        // No proof; release 1's proof where release 2's is (a leaf that is not the verified release).
        let proofTwo = try proofPath(2)
        try FileManager.default.removeItem(atPath: proofTwo)
        try refusedUpdate("no proof")
        try Data(contentsOf: URL(fileURLWithPath: try proofPath(1))).write(to: URL(fileURLWithPath: proofTwo))
        try refusedUpdate("release 1's proof where release 2's is")
        try proofAtThree.write(to: URL(fileURLWithPath: proofTwo))
        let tile = p.repo + "/log/tile/0/000.p/3"
        let goodTile = try Data(contentsOf: URL(fileURLWithPath: tile))
        // The device holds checkpoint 1: checkpoint 3 must extend it, read from the tiles. A
        // tile one hash short, or a changed hash, is refused.
        try goodTile.prefix(64).write(to: URL(fileURLWithPath: tile))
        try refusedUpdate("a partial tile of width 2 where 3 is due")
        var changed = goodTile
        changed[40] ^= 1
        try changed.write(to: URL(fileURLWithPath: tile))
        try refusedUpdate("a tile whose second hash is changed")
        try goodTile.write(to: URL(fileURLWithPath: tile))
        // A policy asking all three (w1 did not cosign): a quorum short by one.
        let strict = try work.write(
            "strict",
            Data((["log \(logVKey)"] + witnesses.map(\.line) + ["group all-three all w1 w2 w3", "quorum all-three", ""]).joined(separator: "\n").utf8),
            mode: 0o644)
        try refusedUpdate("quorum k - 1", ["--tlog-policy", strict])
        // The good proof installs; the device now holds checkpoint 3.
        let installed = try update()
        #expect(installed.status == 0 && p.installedText() == "release 2\n", "\(installed.stdoutText) \(installed.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: installed.stdout) as? [String: Any])
        #expect(document["log_entry"] as? Int == 1 && document["log_size"] as? Int == 3, "\(installed.stdoutText)")
        try JSONSchemaCLITests.check([("update", installed.stdout), ("update", first.stdout)])
        // A proof whose checkpoint (4) is older than the one the device holds (5: the
        // publisher's newest, as another release's proof would have brought it).
        _ = try release(4, logged: true)
        let proofAtFour = try Data(contentsOf: URL(fileURLWithPath: try proofPath(4)))
        _ = try release(5, channel: "beta")
        try p.check(CLI.run(["log", "append", p.repo, "--key", logKey]))
        try p.check(CLI.run(refreshArguments))
        let proofFourAtFive = try Data(contentsOf: URL(fileURLWithPath: try proofPath(4)))
        try proofAtFour.write(to: URL(fileURLWithPath: try proofPath(4)))
        let stored = p.metadata + "/tlog-\(stateName.prefix(16)).checkpoint"
        #expect(FileManager.default.fileExists(atPath: stored))
        try FileManager.default.removeItem(atPath: stored)
        try FileManager.default.copyItem(atPath: p.repo + "/log/checkpoint", toPath: stored)
        let older = try update()
        #expect(
            older.status == 3 && older.stdoutText.contains("older than the one this device holds") && p.installedText() == "release 2\n", "\(older.stdoutText)")

        // A copy on local media (metadata/, targets/ and log/): a new device checks the proof
        // beside the package there; without it, refused.
        let stick = work.file("stick/app")
        try FileManager.default.createDirectory(atPath: stick, withIntermediateDirectories: true)
        for folder in ["metadata", "targets", "log"] { try FileManager.default.copyItem(atPath: p.repo + "/" + folder, toPath: stick + "/" + folder) }
        try p.check(CLI.run(["tuf", "init", "--metadata-dir", work.file("stick-device"), p.repo + "/metadata/1.root.json"]))
        func fromStick() throws -> ProcessResult {
            try CLI.run(
                [
                    "update", "--repository", stick + "/metadata/", "--tuf-metadata", work.file("stick-device"), "--channel", "stable", "--dest",
                    work.file("stick-app"), "--json"
                ])
        }
        let stickProof = try #require(try FileManager.default.contentsOfDirectory(atPath: stick + "/targets").first { $0.hasSuffix("app-4.zip.tlog-proof") })
        let stickProofBytes = try Data(contentsOf: URL(fileURLWithPath: stick + "/targets/" + stickProof))
        try FileManager.default.removeItem(atPath: stick + "/targets/" + stickProof)
        let noStickProof = try fromStick()
        #expect(noStickProof.status == 3 && !FileManager.default.fileExists(atPath: work.file("stick-app/a.txt")), "\(noStickProof.stdoutText)")
        try stickProofBytes.write(to: URL(fileURLWithPath: stick + "/targets/" + stickProof))
        let stickInstall = try fromStick()
        #expect(
            stickInstall.status == 0 && (try? String(contentsOfFile: work.file("stick-app/a.txt"), encoding: .utf8)) == "release 4\n",
            "\(stickInstall.stdoutText) \(stickInstall.stderr)")
        // The device now keeps checkpoint 4; the stick's proof at 5 must extend it, read from
        // the stick's own tiles (another DIR, the same device metadata).
        try proofFourAtFive.write(to: URL(fileURLWithPath: stick + "/targets/" + stickProof))
        let extended = try CLI.run(
            [
                "update", "--repository", stick + "/metadata/", "--tuf-metadata", work.file("stick-device"), "--channel", "stable", "--dest",
                work.file("stick-app-2"), "--json"
            ])
        let extendedReport = try JSONSerialization.jsonObject(with: extended.stdout) as? [String: Any]
        #expect(extended.status == 0 && extendedReport?["log_size"] as? Int == 5, "\(extended.stdoutText) \(extended.stderr)")

        // unpack of a package URL or file under the same policy: the proof beside it carries
        // the release's entry, to which the install is bound.
        let packageFour = try #require(try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets").first { $0.hasSuffix("app-4.zip") })
        let unpackState = work.file("tlog-state")
        // The log's URL in the policy: where a device that holds a checkpoint reads tiles.
        let withURL = try work.write(
            "policy-url",
            Data(
                (["log \(logVKey) \(p.server.url("tlog/log/"))"] + witnesses.map(\.line) + ["group all-three 2 w1 w2 w3", "quorum all-three", ""]).joined(
                    separator: "\n"
                ).utf8))
        func unpack(_ package: String, _ dest: String) throws -> ProcessResult {
            try CLI.run(
                [
                    "unpack", package, "--dest", dest, "--pubkey", p.work.publicDER, "--tls-ca", p.server.root, "--tlog-policy", withURL, "--tlog-state",
                    unpackState, "--json"
                ])
        }
        let fromURL = try unpack(p.server.url("tlog/targets/" + packageFour), work.file("unpacked"))
        #expect(fromURL.status == 0 && FileManager.default.fileExists(atPath: work.file("unpacked/a.txt")), "\(fromURL.stdoutText) \(fromURL.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: unpackState).contains { $0.hasPrefix("tlog-") && $0.hasSuffix(".checkpoint") })
        // A copy without its proof; a copy with another release's proof beside it.
        let copy = work.file("app-4.zip")
        try FileManager.default.copyItem(atPath: p.repo + "/targets/" + packageFour, toPath: copy)
        let bare = try unpack(copy, work.file("bare"))
        #expect(bare.status == 3 && bare.stdoutText.contains("not-logged") && !FileManager.default.fileExists(atPath: work.file("bare")), "\(bare.stdoutText)")
        try FileManager.default.copyItem(atPath: try proofPath(1), toPath: copy + ".tlog-proof")
        let other = try unpack(copy, work.file("other"))
        #expect(
            other.status == 3 && other.stdoutText.contains("transparency log entry names") && !FileManager.default.fileExists(atPath: work.file("other/a.txt")),
            "\(other.stdoutText)")

        // Status, and the monitor: a release logged from a staged targets version that was
        // then discarded is in the log and in no targets version.
        let status = try CLI.run(["log", "status", p.repo])
        #expect(status.status == 0 && status.stdoutText.contains("5 entries") && status.stdoutText.contains("cosigned by: w2, w3"), "\(status.stdoutText)")
        documents.append(("log status", try CLI.run(["log", "status", p.repo, "--json"]).stdout))
        #expect(try CLI.run(["log", "monitor", p.repo]).status == 0)
        let tree = try TemporaryDirectory()
        _ = try tree.write("a.txt", Data("only for some devices\n".utf8))
        let targeted = p.work.directory.file("app-9.zip")
        try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "9.0", "--sequence", "9", "--out", targeted] + p.key))
        try p.check(CLI.run(["repo", "add", p.repo, targeted, "--channel", "stable"]))
        try p.check(CLI.run(["log", "append", p.repo, "--key", logKey]))
        try p.check(CLI.run(["repo", "discard", p.repo, "--role", "targets"]))
        let monitor = try CLI.run(["log", "monitor", p.repo])
        #expect(monitor.status == 1 && monitor.stdoutText.contains("UNLISTED entry 5: app 9.0 (sequence 9"), "\(monitor.stdoutText) \(monitor.stderr)")
        let monitorJSON = try CLI.run(["log", "monitor", p.repo, "--json"])
        #expect(monitorJSON.status == 1)
        documents.append(("log monitor", monitorJSON.stdout))
        // Another policy: one that drops the log's key is refused; one that keeps it is staged.
        let noLog = try work.write(
            "no-log", Data("log \(try CLI.run(["log", "vkey", "\(Self.fixtures)/w1.pem", "--name", "other.example/log"]).stdoutText)quorum none\n".utf8))
        let dropped = try CLI.run(["log", "policy", p.repo, noLog])
        #expect(dropped.status == 2 && dropped.stderr.contains("does not name the log's key"), "\(dropped.stderr)")
        let restaged = try CLI.run(["log", "policy", p.repo, strict, "--json"])
        #expect(restaged.status == 0 && restaged.stdoutText.contains("\"root_version\" : 3"), "\(restaged.stdoutText) \(restaged.stderr)")
        documents.append(("log policy", restaged.stdout))
        try JSONSchemaCLITests.check(documents)

        // A quorum not met: w1 holds a larger tree (409), w2 a tree of 2 with another root (its
        // 409 gives 2, and the proof from 2 does not verify against it: 422). Nothing is
        // published: the checkpoint readers see is the one before.
        try Data("example.com/app-log\n2\n\(Data(repeating: 9, count: 32).base64EncodedString())\n".utf8).write(
            to: URL(fileURLWithPath: work.file("w2/\(stateName).checkpoint")))
        let before = try Data(contentsOf: URL(fileURLWithPath: p.repo + "/log/checkpoint"))
        _ = try release(10)
        let short = try CLI.run(["log", "append", p.repo, "--key", logKey])
        #expect(short.status == 3 && short.stderr.contains("quorum is not met"), "\(short.stderr)")
        #expect(short.stderr.contains("w1: 409 Conflict") && short.stderr.contains("w2: HTTP 422"), "\(short.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: p.repo + "/log/checkpoint")) == before)
        for witness in witnesses { witness.process.stop() }
    }

    @Test("README's \"Every release in a public log\" block runs as written: a witness, the log started, a release logged and installed, the monitor")
    func readme() throws {
        let p = try UpdateCLITests.Publisher("tlog-readme")
        let work = p.work.directory
        // What the block takes as given: the release's package, the device's config, a
        // release key under release/, a free port for the witness.
        let tree = try TemporaryDirectory()
        _ = try tree.write("a.txt", Data("release 101\n".utf8))
        try p.check(
            CLI.run(["pack", tree.path, "--name", "app", "--version", "1.0.1", "--sequence", "101", "--out", work.file("app-1.0.1.zip")] + p.key))
        try FileManager.default.createDirectory(atPath: work.file("etc/signet/update.d"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work.file("var/lib"), withIntermediateDirectories: true)
        _ = try work.write("etc/signet/update.d/app.conf", Data(p.configLines.utf8), mode: 0o600)
        let port = try Self.freePort()
        let passphrase = try String(contentsOfFile: p.work.passFile, encoding: .utf8).trimmingCharacters(in: .newlines)
        let block = try UpdateCLITests.readmeBlock("tlog").replacingOccurrences(of: "/srv/www/app", with: p.repo)
            .replacingOccurrences(of: "release/private_key.pem", with: p.work.privatePEM).replacingOccurrences(of: "/etc/", with: work.path + "/etc/")
            .replacingOccurrences(of: "/var/lib/", with: work.path + "/var/lib/").replacingOccurrences(of: "7380", with: "\(port)")
        let ran = try SignetTestSupport.run(
            "bash", ["-euo", "pipefail", "-c", block],
            environment: [
                "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":"
                    + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
                "SIGNET_PASSPHRASE": passphrase
            ], directory: work.path)
        #expect(ran.status == 0 && p.installedText() == "release 101\n", "\(ran.stdoutText) \(ran.stderr)")
        #expect(ran.stdoutText.contains("every release of this repository's packages is listed"), "\(ran.stdoutText)")
        let proof = try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets").first { $0.hasSuffix(".tlog-proof") }
        #expect(proof != nil)
    }

    @Test("the witness answers hostile HTTP clients with the status each deserves, or ends the connection, and then still cosigns")
    func hostile() throws {
        let work = try TemporaryDirectory()
        let logKey = "\(Self.fixtures)/log.pem"
        let logVKey = try CLI.run(["log", "vkey", logKey, "--name", "example.com/app-log"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let witness = try RunningWitness(1, log: logVKey, work: work)
        defer { witness.process.stop() }
        let port = try #require(witness.line.split(separator: ":").last.map(String.init))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Python/witness_hostile.py").path
        let ran = try SignetTestSupport.run("python3", [script, port, logKey])
        #expect(ran.status == 0, "\(ran.stderr)")
        var answers: [String: String] = [:]
        for line in ran.stdoutText.split(separator: "\n") {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], let name = object["case"] as? String else { continue }
            answers[name] = "\(object["answer"] ?? "")"
        }
        let expected = [
            "get": "405", "other path": "404", "not http": "400", "header over 16 KiB": "400", "no content-length": "411", "chunked": "411",
            "two content-lengths": "400", "negative length": "400", "huge length": "400", "body over 64 KiB": "413", "short body": "closed",
            "body not a request": "400", "old with a sign": "400", "unknown log": "404", "signature by nobody": "403", "empty": "closed",
            "well-formed": "200"
        ]
        #expect(answers == expected, "\(ran.stdoutText)")
        #expect(witness.process.running)
    }

    /// A TCP port nothing listens on now (bound, read, closed).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw SupportError("cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
