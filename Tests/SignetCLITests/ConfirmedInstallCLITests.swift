import Foundation
import SignetTestSupport
import Testing

/// Installs bound to the release someone confirmed (`--require-manifest-sha256`): update --check
/// reports the manifest SHA-256 of the release it would install, and an install given it takes
/// that release and no other, even one correctly signed.
@Suite("Installs bound to what was confirmed: --require-manifest-sha256", .serialized)
struct ConfirmedInstallCLITests {
    /// The SHA-256 of a package's signed manifest, read apart from Signet (unzip, Python's hashlib).
    static func manifestSHA256(_ package: String) throws -> String {
        let manifest = try run("unzip", ["-p", package, ".signet/manifest.json"]).stdout
        let hashed = try run("python3", ["-c", "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"], input: manifest)
        return hashed.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(
        "unpack: the confirmed release installs; another correctly signed one is exit 1 not-confirmed naming both digests, DIR unchanged; a digest that is not hex is exit 2"
    )
    func unpack() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try CLIHelpers.pack(work, ["a.txt": Data("two\n".utf8)], sequence: 2, out: v2)
        let (first, second) = (try Self.manifestSHA256(v1), try Self.manifestSHA256(v2))
        let dest = work.directory.file("app")
        func unpack(_ package: String, _ hash: String) throws -> ProcessResult {
            try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--require-manifest-sha256", hash, "--json"])
        }
        #expect(try unpack(v1, first).status == 0)
        let other = try unpack(v2, first)
        #expect(other.status == 1 && CLIHelpers.errorCode(other) == "not-confirmed", "\(other.stderr)")
        #expect(other.stderr.contains(first) && other.stderr.contains(second), "both digests named: \(other.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "one\n", "DIR unchanged")
        #expect(try unpack(v2, second.uppercased()).status == 0, "hex in either case")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "two\n")
        let malformed = try unpack(v2, "abc")
        #expect(malformed.status == 2 && malformed.stderr.contains("64 digits"), "\(malformed.stderr)")
    }

    @Test(
        "update --check reports the manifest SHA-256 a device would install; update bound to it installs that release; a confirmation gone stale (a newer release published) is exit 1 with nothing fetched"
    )
    func update() throws {
        let p = try UpdateCLITests.Publisher("confirmed")
        try p.release(1)
        func update(_ extra: [String]) throws -> ProcessResult {
            try CLI.run(
                [
                    "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest,
                    "--tls-ca", p.server.root, "--state", p.state, "--json"
                ] + extra)
        }
        func checked() throws -> String {
            let check = try update(["--check"])
            #expect(check.status == 0, "\(check.stderr)")
            return try #require((try check.json()["available"] as? [String: Any])?["manifest_sha256"] as? String, "\(check.stdoutText)")
        }
        let one = try checked()
        #expect(one == (try Self.manifestSHA256(p.work.directory.file("app-1.zip"))), "the digest of the package's own manifest")
        #expect(try update(["--require-manifest-sha256", one]).status == 0 && p.installedText() == "release 1\n")

        try p.release(2)
        let offset = p.server.accessLogSize
        let stale = try update(["--require-manifest-sha256", one])
        #expect(stale.status == 1 && CLIHelpers.errorCode(stale) == "not-confirmed", "\(stale.stderr)")
        #expect(p.installedText() == "release 1\n")
        // This repository's lines only: the server is shared with tests running beside this one.
        let log = String(decoding: try contents(p.server.accessLog).dropFirst(offset), as: UTF8.self).split(separator: "\n")
            .filter { $0.contains("/\(p.name)/") }.joined(separator: "\n")
        #expect(!log.contains("/targets/"), "no package fetched: \(log)")
        let two = try checked()
        #expect(two != one)
        #expect(try update(["--require-manifest-sha256", two]).status == 0 && p.installedText() == "release 2\n")
    }

    @Test("README's block: check, confirm the digest, install exactly it with events; the last event is the result")
    func readme() throws {
        let p = try UpdateCLITests.Publisher("confirmed-readme")
        try p.release(1)
        let config = try p.work.directory.write("app.conf", Data(p.configLines.utf8), mode: 0o600)
        let block = try UpdateCLITests.readmeBlock("agent").replacingOccurrences(of: "/etc/signet/update.d/app.conf", with: config)
        let scratch = try TemporaryDirectory()
        let ran = try ReadmeBlocksTests.runBlock(block, in: scratch.path, environment: ReadmeBlocksTests.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(p.installedText() == "release 1\n")
        let last = try #require(ran.stdoutText.split(separator: "\n").last.map { Data($0.utf8) })
        let result = try #require(try JSONSerialization.jsonObject(with: last) as? [String: Any], "\(ran.stdoutText)")
        #expect(result["updated"] as? Bool == true && (result["available"] as? [String: Any])?["sequence"] as? Int == 1, "\(result)")
    }
}
