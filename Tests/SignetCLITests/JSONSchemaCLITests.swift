import Foundation
import Testing
import SignetTestSupport

/// Issues 29 and 41: every command's `--json` output is valid against its JSON Schema (draft
/// 2020-12) in docs/schema/ (numbers are numbers, booleans booleans, a field that does not apply
/// is null, no field undocumented), checked with the `jsonschema` package from PyPI over
/// documents from real runs, failures included; a failure prints its error document on stdout
/// (and its message, for a person, on stderr).
@Suite("--json of every command against docs/schema/, run as a binary")
struct JSONSchemaCLITests {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()

    @Test("every command's --json document (and error document) matches the documented types")
    func everyCommand() throws {
        let server = try HTTPSServer.site("JSONSchemaCLITests")
        let work = try Workspace()
        var documents: [(command: String, stdout: Data)] = []
        func record(_ command: String, _ arguments: [String], status expected: Int32? = 0) throws {
            let result = try CLI.run(arguments + ["--json"])
            if let expected { #expect(result.status == expected, "\(arguments): \(result.stderr)") }
            // A failure: its error document on stdout (one document, nothing else: check() parses
            // the whole of stdout), and the same message as text on stderr (FORMAT.md §4).
            if result.status != 0, let document = try? JSONSerialization.jsonObject(with: result.stdout) as? [String: Any],
                let error = document["error"] as? [String: Any], let message = error["message"] as? String
            {
                #expect(
                    result.stderr.contains("signet: error: ") && result.stderr.contains(String(message.prefix(60))),
                    "\(arguments): stderr does not say the document's message '\(message)': \(result.stderr)")
            }
            documents.append((command, result.stdout))
        }
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        try record("--version", ["--version"])
        try record("keygen", ["keygen", "--out", work.directory.file("more-keys"), "--bits", "2048"])
        try record("key show", ["key", "show", work.publicDER])
        try record("key show", ["key", "show", work.privatePEM, "--passphrase-file", work.passFile, "--pubout", work.directory.file("pub.der")])

        let file = try work.directory.write("fw.bin", Data("firmware\n".utf8))
        try record("sign", ["sign", file] + key)
        try record("verify", ["verify", file, "--pubkey", work.publicDER])
        try Data("firmware, changed\n".utf8).write(to: URL(fileURLWithPath: work.directory.file("changed.bin")))
        try record("verify", ["verify", work.directory.file("changed.bin"), "--signature", file + ".sig", "--pubkey", work.publicDER], status: 1)
        try record("verify", ["verify", work.directory.file("nothing.bin"), "--pubkey", work.publicDER], status: 5)

        // A package with a structured file, on the server too.
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src + "/conf", withIntermediateDirectories: true)
        try Data(#"{"serial": 1, "server": {"url": "https://a.example"}}"#.utf8).write(to: URL(fileURLWithPath: src + "/conf/app.json"))
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: src + "/hello.txt"))
        let package = server.www + "/app.zip"
        try record("pack", ["pack", src] + key + ["--name", "app", "--version", "1.0", "--sequence", "10", "--structured", "conf/*.json", "--out", package])
        try record("inspect", ["inspect", package])
        try record("inspect", ["inspect", package, "--pubkey", work.publicDER])
        try record(
            "pack", ["pack", src, "--key", work.directory.file("missing.pem"), "--name", "a", "--version", "1", "--out", work.directory.file("x.zip")],
            status: 5)
        try record("pack", ["pack", src] + key, status: 2) // ArgumentParser's refusal, as an error document

        // A bare package (zip + openssl), inspected with --bare.
        let bare = work.directory.file("bare")
        try FileManager.default.createDirectory(atPath: bare, withIntermediateDirectories: true)
        try Data("x\n".utf8).write(to: URL(fileURLWithPath: bare + "/x.txt"))
        #expect(
            try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", bare + "/x.txt.sig", bare + "/x.txt"])
                .status == 0)
        #expect(try SignetTestSupport.run("zip", ["-q", "-r", "../bare.zip", "."], directory: bare).status == 0)
        try record("inspect --bare", ["inspect", work.directory.file("bare.zip"), "--bare", "--pubkey", work.publicDER])

        // Installs: a local package, then the same over HTTPS (with its transfer report).
        let app = work.directory.file("app")
        try record("unpack", ["unpack", package, "--dest", app, "--pubkey", work.publicDER])
        let viaURL = work.directory.file("app2")
        try record("unpack", ["unpack", server.url("app.zip"), "--dest", viaURL, "--pubkey", work.publicDER, "--tls-ca", server.root])
        try record("unpack", ["unpack", package, "--dest", work.directory.file("app3"), "--pubkey", work.directory.file("more-keys/public_key.der")], status: 3)

        // Checks: clean, then a changed structured key (changed_keys), a file, status.
        try record("reverify", ["reverify", app, "--pubkey", work.publicDER])
        try Data(#"{"serial": 2, "server": {"url": "https://a.example"}}"#.utf8).write(to: URL(fileURLWithPath: app + "/conf/app.json"))
        try record("reverify", ["reverify", app, "--pubkey", work.publicDER, "--allow-key", "conf/app.json:serial"])
        try record("reverify", ["reverify", app, "--pubkey", work.publicDER], status: 1)
        try record("reverify", ["reverify", app + "/hello.txt", viaURL, "--pubkey", work.publicDER])
        try record("status", ["status", app + "/hello.txt"])
        try record("status", ["status", app + "/hello.txt", file, "--pubkey", work.publicDER], status: 1)
        // Issue 39: a reinstall with hooks, left pending; status DIR, confirm, rollback (and
        // one refused: no previous release is left). Twice: the tree the first replaces has the
        // file edited above, which a rollback would refuse.
        try record("unpack", ["unpack", package, "--dest", app, "--pubkey", work.publicDER, "--force"])
        let next = work.directory.file("app-11.zip")
        try record("pack", ["pack", src] + key + ["--name", "app", "--version", "1.1", "--sequence", "11", "--out", next])
        try record(
            "unpack",
            [
                "unpack", next, "--dest", app, "--pubkey", work.publicDER, "--pending",
                "--post-install", "echo restarted", "--health-check", "true"
            ])
        try record("status DIR", ["status", app])
        try record("confirm", ["confirm", app])
        try record("rollback", ["rollback", "--boot-check", app])
        try record("rollback", ["rollback", app])
        try record("rollback", ["rollback", app], status: 1)
        try FileManager.default.createDirectory(atPath: work.directory.file("never-installed"), withIntermediateDirectories: true)
        try record("status DIR", ["status", work.directory.file("never-installed")], status: 1)

        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        try record("trust seal", ["trust", "seal", trust])

        // Downloads.
        try FileManager.default.copyItem(atPath: file, toPath: server.www + "/fw.bin")
        try FileManager.default.copyItem(atPath: file + ".sig", toPath: server.www + "/fw.bin.sig")
        try record(
            "fetch",
            [
                "fetch", server.url("fw.bin"), "--out", work.directory.file("fetched.bin"), "--tls-ca", server.root,
                "--signature", server.url("fw.bin.sig"), "--pubkey", work.publicDER
            ])
        try record("fetch", ["fetch", server.url("none.bin"), "--out", work.directory.file("none.bin"), "--tls-ca", server.root, "--retries", "0"], status: nil)

        // A TUF repository (issue 37), one key for every role, and a device following it.
        let repo = server.www + "/tuf"
        try record(
            "repo init",
            [
                "repo", "init", repo, "--root-key", work.publicDER, "--targets-key", work.publicDER,
                "--snapshot-key", work.publicDER, "--timestamp-key", work.publicDER
            ])
        try record(
            "repo sign",
            [
                "repo", "sign", repo, "--role", "root", "--digest",
                try CLI.run(["repo", "status", repo, "--staged-digest", "root"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
            ] + key)
        try record("repo add", ["repo", "add", repo, package, "--channel", "stable"])
        try record("repo status", ["repo", "status", repo])
        try record(
            "repo sign",
            [
                "repo", "sign", repo, "--role", "targets", "--digest",
                try CLI.run(["repo", "status", repo, "--staged-digest", "targets"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
            ] + key)
        try record(
            "repo refresh", ["repo", "refresh", repo, "--snapshot-key", work.privatePEM, "--timestamp-key", work.privatePEM, "--passphrase-file", work.passFile]
        )
        try record("repo status", ["repo", "status", repo])
        let metadata = work.directory.file("tuf-metadata")
        try record("tuf init", ["tuf", "init", "--metadata-dir", metadata, repo + "/metadata/1.root.json"])
        try record("tuf refresh", ["tuf", "refresh", "--metadata-dir", metadata, "--metadata-url", server.url("tuf/metadata/"), "--tls-ca", server.root])
        try record(
            "tuf download",
            [
                "tuf", "download", "--metadata-dir", metadata, "--metadata-url", server.url("tuf/metadata/"), "--target-name", "app.zip",
                "--target-dir", work.directory.file("tuf-targets"), "--tls-ca", server.root
            ])
        let viaRepository = [
            "update", "--repository", server.url("tuf/metadata/"), "--tuf-metadata", metadata, "--channel", "stable",
            "--dest", work.directory.file("tuf-app"), "--tls-ca", server.root
        ]
        try record("update", viaRepository)
        try record("update", viaRepository) // up to date: "installed" is a release now
        try record("update", viaRepository + ["--channel", "beta"], status: nil)
        // Issue 53: a rollout plan, and a device's place in it (a deferred install).
        try record("repo rollout", ["repo", "rollout", repo, "app.zip", "--plan", "0.01%@0h,100%@30d"] + key)
        try CLI.run(["repo", "refresh", repo, "--snapshot-key", work.privatePEM, "--timestamp-key", work.privatePEM, "--passphrase-file", work.passFile])
        let deviceID = work.directory.file("machine-id")
        try Data("0123456789abcdef0123456789abcdef\n".utf8).write(to: URL(fileURLWithPath: deviceID))
        try record("update", viaRepository + ["--check", "--device-id-file", deviceID])
        // Issue 61: a package and a listed release signed again.
        try record("resign", ["resign", package, "--pubkey", work.publicDER, "--out", work.directory.file("resigned.zip")] + key)
        try record("repo resign", ["repo", "resign", repo, "app.zip"] + key)
        try record("repo rotate", ["repo", "rotate", repo, "--role", "targets", "--add", work.directory.file("more-keys/public_key.der")])
        try record("repo renew", ["repo", "renew", repo, "--role", "targets"] + key)
        try record("repo discard", ["repo", "discard", repo, "--role", "root"])
        // Issue 49: a cron job told to warn a year ahead reports what expires, and exits 1.
        try record(
            "repo refresh",
            [
                "repo", "refresh", repo, "--snapshot-key", work.privatePEM, "--timestamp-key", work.privatePEM,
                "--passphrase-file", work.passFile, "--warn-within", "366d"
            ], status: 1)
        try record("repo status", ["repo", "status", repo, "--warn-within", "366d"])
        try record(
            "tuf refresh",
            ["tuf", "refresh", "--metadata-dir", work.directory.file("nowhere"), "--metadata-url", server.url("tuf/metadata/"), "--tls-ca", server.root],
            status: 5)

        try Self.check(documents)
        // Every schema is exercised here, except the token listing (TokenCLITests, SoftHSM2) and
        // the event lines (EventsCLITests).
        // The log's commands and the witness: TransparencyCLITests checks their documents here.
        let transparency = ["log-vkey", "log-init", "log-policy", "log-append", "log-status", "log-monitor", "log-verify", "witness-serve"]
        let used = Set(documents.map { Self.schemaName($0.command) }).union(["error", "key-show-token", "events"] + transparency)
        let shipped = try FileManager.default.contentsOfDirectory(atPath: Self.schemaDirectory)
            .filter { $0.hasSuffix(".schema.json") }.map { String($0.dropLast(".schema.json".count)) }
        #expect(Set(shipped) == used, "schemas without a run: \(Set(shipped).subtracting(used)); runs without a schema: \(used.subtracting(shipped))")
    }

    static var schemaDirectory: String { here.appendingPathComponent("../../docs/schema").standardized.path }

    /// The schema file's stem for a command: "repo init" → "repo-init".
    static func schemaName(_ command: String) -> String {
        let words = command.lowercased().split { !($0.isLetter || $0.isNumber) }
        return words.joined(separator: "-")
    }

    /// Validates `documents` (a command's name, and what it printed) against the command's
    /// schema in docs/schema/ (or error.schema.json for an error document) with
    /// json_schema_check.py and PyPI's `jsonschema`; every error is a failed expectation.
    static func check(_ documents: [(command: String, stdout: Data)]) throws {
        let work = try TemporaryDirectory()
        let collected = try JSONSerialization.data(
            withJSONObject: try documents.map { entry -> [String: Any] in
                guard let object = try? JSONSerialization.jsonObject(with: entry.stdout) else {
                    throw SupportError("\(entry.command): stdout is not one JSON document: \(String(decoding: entry.stdout, as: UTF8.self))")
                }
                return ["schema": Self.schemaName(entry.command), "document": object]
            })
        let path = work.file("documents.json")
        try collected.write(to: URL(fileURLWithPath: path))
        let checked = try SignetTestSupport.run("python3", [Self.here.appendingPathComponent("json_schema_check.py").path, Self.schemaDirectory, path])
        #expect(checked.status == 0, "\(checked.stdoutText)\(checked.stderr)")
        #expect(checked.stdoutText.contains("\(documents.count) documents,") && checked.stdoutText.contains(" schemas, 0 problems"), "\(checked.stdoutText)")
    }
}
