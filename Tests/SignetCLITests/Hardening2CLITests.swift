import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 25: attacks on the device side that once passed.
@Suite("Hardening 2: retried downloads, planted partials, Unicode twins, relabelled trees, other products")
struct Hardening2CLITests {
    /// Packs `files` (name → bytes) as package `name` `sequence` into `out`.
    static func pack(_ work: Workspace, _ files: [String: Data], name: String = "app", sequence: Int = 1, out: String, extra: [String] = []) throws {
        let tree = try TemporaryDirectory()
        for (path, data) in files {
            let full = tree.file(path)
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: full))
        }
        let packed = try CLI.run(["pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", name, "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out] + extra)
        guard packed.status == 0 else { throw SupportError("pack failed: \(packed.stderr)") }
    }

    static func randomData(_ count: Int) -> Data { Data((0..<count).map { _ in UInt8.random(in: 0...255) }) }

    // MARK: Point 7: a retried download restarts its hash

    @Test("fetch --signature: a retry that starts over hashes only the new attempt (hostile suffix refused, honest retry verified)")
    func retriedFetchHash() throws {
        let work = try Workspace()
        let body = Self.randomData(300_000)
        let cut = 100_000
        // Hostile: the first K bytes, a cut; the retry is answered with 200 and only the rest.
        let hostile = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init(from: cut)]])
        try body.write(to: URL(fileURLWithPath: hostile.file("fw.bin")))
        #expect(try CLI.run(["sign", hostile.file("fw.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let out = work.directory.file("fw.bin")
        let refused = try CLI.run(["fetch", hostile.url("fw.bin"), "--out", out, "--signature", hostile.url("fw.bin.sig"),
                                   "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
        #expect(refused.status == 1, "a suffix of the signed file must not verify: \(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out), "nothing renamed into place")
        #expect(hostile.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(hostile.requests)")

        // Honest: the connection drops once, the retry sends the whole file again.
        let honest = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init()]])
        try body.write(to: URL(fileURLWithPath: honest.file("fw.bin")))
        try FileManager.default.copyItem(atPath: hostile.file("fw.bin.sig"), toPath: honest.file("fw.bin.sig"))
        let verified = try CLI.run(["fetch", honest.url("fw.bin"), "--out", out, "--signature", honest.url("fw.bin.sig"),
                                    "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
        #expect(verified.status == 0, "a genuine file after one dropped connection verifies: \(verified.stderr)")
        #expect(try contents(out) == body)
        #expect(honest.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(honest.requests)")
    }

    @Test("unpack URL and inspect URL after a dropped connection: the honest retry installs, the hostile suffix is refused")
    func retriedPackageDownloads() throws {
        let work = try Workspace()
        let staging = try TemporaryDirectory()
        let package = staging.file("app.zip")
        try Self.pack(work, ["a.bin": Self.randomData(150_000), "b.bin": Self.randomData(150_000)], out: package)
        let size = try contents(package).count
        let cut = size / 3
        for (honest, name) in [(true, "honest"), (false, "hostile")] {
            let retry: ScriptedServer.Answer = honest ? .init() : .init(from: cut)
            let server = try ScriptedServer(script: ["app.zip": [.init(length: size, cutAfter: cut), retry,
                                                                  .init(length: size, cutAfter: cut), retry]])
            try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
            let dest = work.directory.file("dest-" + name)
            let unpack = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            let inspect = try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            if honest {
                #expect(unpack.status == 0, "\(unpack.stderr)")
                #expect(inspect.status == 0, "\(inspect.stderr)")
            } else {
                #expect(unpack.status != 0 && !FileManager.default.fileExists(atPath: dest), "\(unpack.status) \(unpack.stderr)")
                #expect(inspect.status != 0, "\(inspect.stderr)")
            }
            // Nothing beside DIR: no download, and no lock beside a DIR that was never made.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: work.directory.path)
                .filter { $0.contains("signet-") && !(honest && $0 == ".dest-honest.signet-lock") }
            #expect(leftovers.isEmpty, "\(leftovers)")
        }
    }
}
