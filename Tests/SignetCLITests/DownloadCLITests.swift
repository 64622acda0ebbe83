import Foundation
import Testing
import SignetTestSupport

@Suite("Downloads over HTTPS against a real nginx: TLS policy, errors, resume, install", .serialized)
struct DownloadCLITests {
    /// One nginx for the suite (issue 50: no server started per test); each test serves its own paths.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("DownloadCLITests") }

    /// Starts `signet fetch` of `path` where nginx pauses after 320 KiB (/stallfirst/,
    /// /norange/: until a request asks for a range), kills it
    /// with SIGKILL once its partial download holds at least 128 KiB (waiting for bytes, not for
    /// a fixed time: a sanitizer build on a busy machine may take seconds to connect), and
    /// returns the size of the partial download it left.
    static func killedMidway(_ server: HTTPSServer, _ path: String, out: String) throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["fetch", server.url(path), "--out", out, "--tls-ca", server.root]
        process.standardError = FileHandle.nullDevice
        let partial = URL(fileURLWithPath: out).deletingLastPathComponent().appendingPathComponent(
            "." + URL(fileURLWithPath: out).lastPathComponent + ".signet-download"
        ).path
        func size() -> Int { (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0 }
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while size() < 128 * 1024 && process.isRunning && Date() < deadline { usleep(20_000) }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        return size()
    }

    @Test("TLS policy: system store, --tls-ca, pins anywhere in the chain, --tls-cert, host name")
    func tlsPolicy() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        let body = try contents(try server.directory.writeRandom("www/file.bin", count: 100_000))
        let out = work.file("file.bin")
        func fetch(_ extra: [String], host: String = "localhost") throws -> ProcessResult {
            try CLI.run(["fetch", server.url("file.bin", host: host), "--out", out, "--retries", "0", "--force"] + extra)
        }
        // The system store does not know the private root.
        let system = try fetch([])
        #expect(system.status == 3, "\(system.stderr)")
        let leafPin = try server.pin(server.leaf)
        #expect(system.stderr.contains("localhost") && system.stderr.contains(leafPin), "names the host and the presented pins: \(system.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Only the given roots.
        #expect(try fetch(["--tls-ca", server.root]).status == 0)
        #expect(try contents(out) == body, "byte-identical")
        #expect(try fetch(["--tls-ca", server.otherRoot]).status == 3)
        // A pin of the leaf, the intermediate or the root passes; an unknown pin fails and the
        // message lists the chain's pins; one good and one unknown pin pass.
        for certificate in [server.leaf, server.intermediate, server.root] {
            let pinned = try fetch(["--tls-ca", server.root, "--tls-pin", try server.pin(certificate)])
            #expect(pinned.status == 0, "\(certificate): \(pinned.stderr)")
        }
        let unknown = "sha256//" + Data(repeating: 7, count: 32).base64EncodedString()
        let refused = try fetch(["--tls-ca", server.root, "--tls-pin", unknown])
        #expect(refused.status == 3)
        for certificate in [server.leaf, server.intermediate, server.root] {
            let pin = try server.pin(certificate)
            #expect(refused.stderr.contains(pin), "lists every pin of the chain: \(refused.stderr)")
        }
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", unknown, "--tls-pin", try server.pin(server.intermediate)]).status == 0)
        // Each presented certificate by subject beside its pin; the root that came from the local
        // roots (--tls-ca) is said apart from what the server sent (issue 29).
        #expect(refused.stderr.contains("CN=localhost \(try server.pin(server.leaf))"), "\(refused.stderr)")
        #expect(refused.stderr.contains("CN=Signet Test Intermediate \(try server.pin(server.intermediate))"), "\(refused.stderr)")
        #expect(refused.stderr.contains("completed from the local roots with: CN=Signet Test Root \(try server.pin(server.root))"), "\(refused.stderr)")
        // A pin may also be 64 hex characters (either case) or the certificate file itself.
        let hexPin = try SignetTestSupport.run(
            "bash",
            ["-c", "openssl x509 -in \"$0\" -pubkey -noout | openssl pkey -pubin -outform DER | openssl dgst -sha256 -r | cut -c1-64", server.intermediate]
        )
        .stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(hexPin.count == 64)
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", hexPin]).status == 0)
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", hexPin.uppercased()]).status == 0)
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", server.intermediate]).status == 0)
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", server.otherRoot]).status == 3, "a file pins its own key")
        // The 16-hex short id is not a pin: exit 2 with how to print the full one.
        let short = try fetch(["--tls-ca", server.root, "--tls-pin", String(hexPin.prefix(16))])
        #expect(short.status == 2 && short.stderr.contains("full key id") && short.stderr.contains("signet key show"), "\(short.stderr)")
        // The exact certificate.
        #expect(try fetch(["--tls-ca", server.root, "--tls-cert", server.leaf]).status == 0)
        #expect(try fetch(["--tls-ca", server.root, "--tls-cert", server.intermediate]).status == 3)
        // The leaf names localhost only: the same server as 127.0.0.1 is the wrong host (3),
        // whatever the pins say.
        let wrongHost = try CLI.run([
            "fetch", "https://127.0.0.1:\(server.port)\(server.path("file.bin"))", "--out", out, "--retries", "0", "--force",
            "--tls-ca", server.root, "--tls-pin", try server.pin(server.root)
        ])
        #expect(wrongHost.status == 3, "\(wrongHost.stderr)")
        #expect(wrongHost.stderr.contains("127.0.0.1"), "names the host: \(wrongHost.stderr)")
        // The same chain with an expired leaf: 3, and the message says so.
        let expired = try CLI.run([
            "fetch", "https://localhost:\(server.expiredPort)\(server.path("file.bin"))", "--out", out, "--retries", "0", "--force",
            "--tls-ca", server.root
        ])
        #expect(expired.status == 3, "\(expired.stderr)")
        #expect(expired.stderr.contains("expired"), "says which check failed: \(expired.stderr)")
    }

    @Test("a sealed --tls-ca directory is checked against its seal: a replaced CA file is refused")
    func sealedRoots() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: server.www + "/sealed", withIntermediateDirectories: true)
        _ = try server.directory.writeRandom("www/sealed/file.bin", count: 1000)
        let roots = work.file("roots")
        try FileManager.default.createDirectory(atPath: roots, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: server.root, toPath: roots + "/root.pem")
        let salt = try work.write("salt", Data("device salt 1234\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", roots, "--salt-file", salt]).status == 0)
        let fetch = ["fetch", server.url("sealed/file.bin"), "--out", work.file("out"), "--retries", "0", "--tls-ca", roots, "--trust-salt-file", salt]
        let sealed = try CLI.run(fetch)
        #expect(sealed.status == 0, "\(sealed.stderr)")
        // An attacker swaps the CA file for their own root: the seal no longer matches.
        try FileManager.default.removeItem(atPath: roots + "/root.pem")
        try FileManager.default.copyItem(atPath: server.otherRoot, toPath: roots + "/root.pem")
        let replaced = try CLI.run(fetch)
        #expect(replaced.status == 3, "\(replaced.stderr)")
        #expect(replaced.stderr.contains("seal"), "\(replaced.stderr)")
    }

    @Test("http:// is refused (2) unless --allow-http, which takes no TLS options; 404 is 5; a redirect to http:// is refused")
    func schemesAndErrors() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        _ = try server.directory.writeRandom("www/app.zip", count: 1000)
        let out = work.file("x")
        // Credentials in a URL would be on the command line: refused, and not echoed.
        let credentials = try CLI.run(["fetch", "https://user:s3cret@localhost:\(server.port)\(server.path("app.zip"))", "--out", out, "--tls-ca", server.root])
        #expect(credentials.status == 2, "\(credentials.stderr)")
        #expect(!credentials.stderr.contains("s3cret"), "\(credentials.stderr)")
        #expect(try server.statuses(of: "app.zip").isEmpty, "nothing was sent")
        let http = try CLI.run(["fetch", "http://localhost:\(server.port)\(server.path("app.zip"))", "--out", out])
        #expect(http.status == 2, "\(http.stderr)")
        #expect(
            try CLI.run(["fetch", "http://localhost:\(server.port)\(server.path("app.zip"))", "--out", out, "--allow-http", "--tls-ca", server.root]).status
                == 2)
        let missing = try CLI.run(["fetch", server.url("absent"), "--out", out, "--tls-ca", server.root, "--json"])
        #expect(missing.status == 5)
        #expect((try missing.json()["error"] as? [String: Any])?["code"] as? String == "network-error")
        #expect(
            (try missing.json()["error"] as? [String: Any])?["file"] as? String == server.url("absent"),
            "the URL in the error (issue 29): \(missing.stdoutText)")
        #expect(missing.stderr.contains("404"))
        #expect(try CLI.run(["fetch", server.url("to-https"), "--out", out, "--tls-ca", server.root]).status == 0, "https redirects are followed")
        let downgraded = try CLI.run(["fetch", server.url("to-http"), "--out", work.file("y"), "--tls-ca", server.root, "--retries", "0"])
        #expect(downgraded.status == 3, "\(downgraded.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.file("y")))
        // Too large.
        let big = try CLI.run(["fetch", server.url("app.zip"), "--out", work.file("z"), "--tls-ca", server.root, "--max-download-size", "100"])
        #expect(big.status == 4, "\(big.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.file("z")))
    }

    @Test("a 500 is retried after the delay and then passes; a 404 is not retried")
    func retries() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        // The first attempt is answered 500, the retry 200.
        let scripted = try ScriptedServer(script: ["app.bin": [.init(status: 500, to: 0), .init()]])
        let body = try contents(try scripted.directory.writeRandom("www/app.bin", count: 10_000))
        let started = Date()
        let second = try CLI.run([
            "fetch", scripted.url("app.bin"), "--out", work.file("b"), "--allow-http", "--retries", "2", "--retry-delay", "0.3"
        ])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(Date().timeIntervalSince(started) >= 0.3, "waited --retry-delay before trying again")
        #expect(try contents(work.file("b")) == body)
        #expect(scripted.requests == ["app.bin -", "app.bin -"])
        #expect(second.stderr.contains("HTTP 500") && second.stderr.contains("attempt 2 of 3"), "a retry is reported, even on a pipe: \(second.stderr)")
        // A 404 is final: one request, exit 5, however many retries are allowed.
        let missing = try CLI.run([
            "fetch", server.url("absent.bin"), "--out", work.file("c"), "--tls-ca", server.root,
            "--retries", "3", "--retry-delay", "5"
        ])
        #expect(missing.status == 5)
        #expect(try server.statuses(of: "absent.bin") == [404])
    }

    @Test("a server that answers a Range request with 200 gets a clean restart, byte-identical")
    func rangeIgnored() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        let body = try contents(try server.directory.writeRandom("www/norange/big.bin", count: 3_000_000))
        let out = work.file("big.bin")
        let kept = try Self.killedMidway(server, "norange/big.bin", out: out)
        #expect(kept > 0 && kept < body.count, "a partial download is on disk: \(kept) bytes")
        let again = try CLI.run(["fetch", server.url("norange/big.bin"), "--out", out, "--tls-ca", server.root, "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try again.json()["resumed_from"] as? Int == 0, "nothing kept: the server sent the whole file")
        #expect(try contents(out) == body, "the old part was thrown away, not mixed in")
        #expect(try server.statuses(of: "norange/big.bin") == [200, 200])
    }

    @Test("a progress line on a terminal (bytes, rate, time left), nothing on a pipe, with --json or --quiet")
    func progress() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        _ = try server.directory.writeRandom("www/p.bin", count: 500_000)
        // The line needs a transfer that lasts: a server (speaking as nginx does, same pins)
        // that pauses three times for 150 ms (a throttle would take seconds).
        let pausing = try ScriptedServer(
            script: ["p.bin": [.init(pauses: [100_000, 200_000, 300_000].map { .init(after: $0, milliseconds: 150) })]], tls: server.tls)
        try FileManager.default.copyItem(atPath: server.www + "/p.bin", toPath: pausing.file("p.bin"))
        func fetch(_ extra: [String], url: String) throws -> ProcessResult {
            try? FileManager.default.removeItem(atPath: work.file("p.bin"))
            let command = ([CLI.binary, "fetch", url, "--out", work.file("p.bin"), "--tls-ca", server.root] + extra)
                .map { "'" + $0 + "'" }.joined(separator: " ")
            // script(1) gives the command a pseudo-terminal and copies what it shows to stdout.
            return try run("script", ["-qec", command, "/dev/null"])
        }
        let shown = try fetch([], url: pausing.url("p.bin"))
        #expect(shown.status == 0, "\(shown.stdoutText)")
        let screen = shown.stdoutText
        #expect(screen.contains("\r\u{1B}[K"), "an updating line: \(screen.debugDescription)")
        #expect(screen.contains("downloading https://localhost") && screen.contains(" of 488.3 KiB"), "\(screen.debugDescription)")
        #expect(screen.contains("/s") && screen.contains(" left"), "rate and time left: \(screen.debugDescription)")
        // At most ten updates a second: the transfer takes about half a second.
        #expect(screen.components(separatedBy: "\r\u{1B}[K").count < 12, "throttled: \(screen.debugDescription)")
        #expect(screen.contains("downloaded "), "then the result")
        for quiet in [["--quiet"], ["--json"]] {
            let silent = try fetch(quiet, url: server.url("p.bin"))
            #expect(silent.status == 0)
            #expect(!silent.stdoutText.contains("\u{1B}[K"), "\(quiet): \(silent.stdoutText.debugDescription)")
        }
        // On a pipe (stderr not a terminal): no progress line.
        try? FileManager.default.removeItem(atPath: work.file("p.bin"))
        let piped = try CLI.run(["fetch", server.url("p.bin"), "--out", work.file("p.bin"), "--tls-ca", server.root])
        #expect(piped.status == 0)
        #expect(!piped.stderr.contains("\r"), "\(piped.stderr.debugDescription)")
    }

    @Test("unpack URL installs a verified package; a tampered one is refused (1) and DIR stays as it was")
    func unpackURL() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let tree = work.directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        _ = try work.directory.writeRandom("tree/data.bin", count: 50_000)
        try FileManager.default.createDirectory(atPath: server.www + "/install", withIntermediateDirectories: true)
        let package = server.www + "/install/app.zip"
        let packed = try CLI.run([
            "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "app", "--version", "1", "--out", package
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let dest = work.directory.file("installed")
        let installed = try CLI.run(["unpack", server.url("install/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(try contents(dest + "/data.bin") == contents(tree + "/data.bin"))
        #expect(try run("getfattr", ["-n", "user.signet.sig", dest + "/data.bin"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: work.directory.file(".installed.signet-download")), "the download is removed")
        // status says where the file came from.
        let status = try CLI.run(["status", dest + "/data.bin", "--json"])
        let entry = (try status.json()["files"] as? [[String: Any]])?.first
        #expect(entry?["source"] as? String == server.url("install/app.zip"), "\(status.stdoutText)")
        #expect(try CLI.run(["status", dest + "/data.bin"]).stdoutText.contains("from:     " + server.url("install/app.zip")))
        // The served package is rebuilt with one byte of data.bin changed, as an attacker would
        // (a valid zip, CRCs right, the signed manifest and signatures copied): refused, DIR unchanged.
        let rebuild = pythonScript("download_rebuild.py")
        let rebuilt = try run("python3", ["-c", rebuild, package])
        #expect(rebuilt.status == 0, "\(rebuilt.stderr)")
        let before = try contents(dest + "/data.bin")
        // The release DIR holds: up to date, no entry read.
        let same = try CLI.run(["unpack", server.url("install/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"])
        #expect(try same.status == 0 && same.json()["up_to_date"] as? Bool == true, "\(same.stdoutText) \(same.stderr)")
        // Reinstalled (--force) and read in place, the tampered entry is never fetched: DIR
        // already holds data.bin as the manifest signs it, and it is copied from there (hashed
        // as it is copied).
        let ranged = try CLI.run([
            "unpack", server.url("install/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--force", "--json"
        ])
        #expect(ranged.status == 0, "\(ranged.stderr)")
        #expect((try ranged.json()["transfer"] as? [String: Any])?["files_reused"] as? Int == 1, "\(ranged.stdoutText)")
        #expect(try contents(dest + "/data.bin") == before)
        // Downloaded whole, the package is read entry by entry: refused.
        let tampered = try CLI.run([
            "unpack", server.url("install/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--full-download", "--force"
        ])
        #expect(tampered.status == 1, "a file whose bytes changed fails the signed manifest: \(tampered.stderr)")
        #expect(try contents(dest + "/data.bin") == before)
        #expect(!FileManager.default.fileExists(atPath: work.directory.file(".installed.signet-download")), "a complete bad download is removed")
        // inspect URL verifies the same way.
        #expect(try CLI.run(["inspect", server.url("install/app.zip"), "--pubkey", work.publicDER, "--tls-ca", server.root]).status != 0)
        // An older release downloaded whole is refused as a rollback naming the URL the user
        // gave, not the download kept beside DIR (issue 29).
        #expect(
            try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "0",
                "--sequence", "1", "--out", server.www + "/install/old.zip"
            ]).status == 0)
        let state = work.directory.file("state.json")
        // The release on the server (tampered above) is packed again, installed with --state.
        #expect(
            try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "2",
                "--sequence", "2", "--out", package, "--force"
            ]).status == 0)
        let recorded = try CLI.run([
            "unpack", server.url("install/app.zip"), "--dest", work.directory.file("first"), "--pubkey", work.publicDER,
            "--tls-ca", server.root, "--state", state
        ])
        #expect(recorded.status == 0, "\(recorded.stderr)")
        let rollback = try CLI.run([
            "unpack", server.url("install/old.zip"), "--dest", work.directory.file("fresh"), "--pubkey", work.publicDER, "--tls-ca", server.root,
            "--full-download", "--state", state, "--json"
        ])
        #expect(rollback.status == 1, "\(rollback.stderr)")
        #expect(rollback.stderr.contains("older release") && !rollback.stderr.contains("signet-download"), "\(rollback.stderr)")
        let rollbackError = try rollback.json()["error"] as? [String: Any]
        #expect(rollbackError?["code"] as? String == "rollback")
        #expect(rollbackError?["file"] as? String == server.url("install/old.zip"), "\(rollback.stdoutText)")
    }

    @Test("a download killed mid-way continues on the next run (206 in nginx's log) and is byte-identical")
    func resume() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        let body = try contents(try server.directory.writeRandom("www/stallfirst/big.bin", count: 3_000_000))
        let out = work.file("big.bin")
        let kept = try Self.killedMidway(server, "stallfirst/big.bin", out: out)
        #expect(kept > 0 && kept < body.count, "a partial download is on disk: \(kept) bytes")
        #expect(!FileManager.default.fileExists(atPath: out), "never reported complete")
        let resumed = try CLI.run(["fetch", server.url("stallfirst/big.bin"), "--out", out, "--tls-ca", server.root, "--json"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let resumedFrom = try resumed.json()["resumed_from"] as? Int ?? 0
        #expect(resumedFrom > 0)
        #expect(try contents(out) == body)
        #expect(try server.statuses(of: "stallfirst/big.bin").contains(206), "nginx answered the range request")
    }

    @Test("fetch --signature verifies as it downloads; a bad signature leaves no file")
    func fetchSignature() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let file = try server.directory.writeRandom("www/fw.bin", count: 200_000)
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let out = work.directory.file("fw.bin")
        let good = try CLI.run([
            "fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
            "--pubkey", work.publicDER, "--tls-ca", server.root
        ])
        #expect(good.status == 0, "\(good.stderr)")
        #expect(try run("getfattr", ["-n", "user.signet.sig", out]).status == 0)
        #expect(try CLI.run(["reverify", out, "--pubkey", work.publicDER]).status == 0)
        try FileManager.default.removeItem(atPath: out)
        try Data(repeating: 1, count: 10).write(to: URL(fileURLWithPath: file), options: .atomic)
        let bad = try CLI.run([
            "fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
            "--pubkey", work.publicDER, "--tls-ca", server.root
        ])
        #expect(bad.status == 1, "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
    }
}
