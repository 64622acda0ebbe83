import Foundation
import Testing
import SignetTestSupport

/// Issue 26, first part: `inspect URL` reads the package with HTTP range requests.
@Suite("Range requests: inspect URL without a copy of the package; wrong range answers refused", .serialized)
struct RangeCLITests {
    /// A signed package of `count` files of 8 KiB of random bytes (stored: several MiB, more
    /// than the first range request reads).
    static func package(_ work: Workspace, files count: Int, out: String) throws {
        var files: [String: Data] = [:]
        for index in 0..<count { files[String(format: "d%02d/f%04d.bin", index % 10, index)] = CLIHelpers.randomData(8 * 1024) }
        try CLIHelpers.pack(work, files, out: out)
    }

    @Test(
        "inspect URL verifies through range requests only (206s in nginx's log, nothing in TMPDIR); a server without ranges gets a full download; a tampered package fails"
    )
    func inspectThroughRanges() throws {
        let server = try HTTPSServer.site("RangeCLITests")
        let work = try Workspace()
        try Self.package(work, files: 600, out: server.www + "/app.zip")
        let tmp = work.directory.file("tmp")
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        let inspected = try CLI.run(
            ["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"], environment: ["TMPDIR": tmp])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect((try inspected.json()["verified"] as? Bool) == true)
        let statuses = try server.statuses(of: "app.zip")
        #expect(!statuses.isEmpty && statuses.allSatisfy { $0 == 206 }, "range requests only: \(statuses)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp).isEmpty, "no copy of the package")
        // Without keys: the manifest from a few ranges (not the whole package).
        let listed = try CLI.run(["inspect", server.url("app.zip"), "--tls-ca", server.root])
        #expect(listed.status == 0 && listed.stdoutText.contains("files:     600"), "\(listed.stderr)")

        // max_ranges 0: nginx answers 200; the package is downloaded whole, then removed.
        try FileManager.default.copyItem(atPath: server.www + "/app.zip", toPath: server.www + "/norange/app.zip")
        let full = try CLI.run(["inspect", server.url("norange/app.zip"), "--pubkey", work.publicDER, "--tls-ca", server.root], environment: ["TMPDIR": tmp])
        #expect(full.status == 0, "\(full.stderr)")
        #expect(try server.statuses(of: "norange/app.zip").contains(200))
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp).isEmpty)

        // A resource changed by one byte (CRC right, signatures copied): fails over ranges too.
        let rebuild = pythonScript("range_rebuild.py")
        #expect(try run("python3", ["-c", rebuild, server.www + "/app.zip"]).status == 0)
        let tampered = try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(tampered.status == 1, "\(tampered.stderr)")
    }

    @Test(
        "wrong range answers are refused: another Content-Range, a 200 mid-way (the package replaced), a body longer than asked; no validator means a full download"
    )
    func wrongAnswers() throws {
        let work = try Workspace()
        let staging = try TemporaryDirectory()
        let package = staging.file("app.zip")
        try Self.package(work, files: 400, out: package)
        let etag = ["ETag": "\"v1\""]
        let cases: [(String, [ScriptedServer.Answer], String)] = [
            ("shifted", [.init(headers: etag, honourRange: true), .init(headers: etag, honourRange: true, shiftRange: 1)], "Content-Range"),
            ("replaced", [.init(headers: etag, honourRange: true), .init(headers: etag)], "HTTP 200"),
            ("longer", [.init(headers: etag, honourRange: true), .init(headers: etag, honourRange: true, extraBytes: 10)], "more bytes")
        ]
        for (name, answers, words) in cases {
            let server = try ScriptedServer(script: ["app.zip": answers])
            try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
            let result = try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--allow-http", "--retries", "0"])
            #expect(result.status == 5 && result.stderr.contains(words), "\(name): \(result.status) \(result.stderr)")
        }
        // No ETag or Last-Modified: ranges cannot be pinned to one file; the whole package is read.
        let plain = try ScriptedServer(script: ["app.zip": [.init(honourRange: true)]])
        try FileManager.default.copyItem(atPath: package, toPath: plain.file("app.zip"))
        let whole = try CLI.run(["inspect", plain.url("app.zip"), "--pubkey", work.publicDER, "--allow-http"])
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(plain.requests.contains { $0 == "app.zip -" }, "a request without Range: \(plain.requests)")
    }
}
