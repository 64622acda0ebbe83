import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 48 (hardening 4): answers bounded by what was asked and by what was signed.
@Suite("Hardening 4: every answer bounded by what was asked, the signed length and --max-download-size")
struct Hardening4CLITests {
    static let examplePublicKey = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("keys-example/public_key.der").path

    /// A 128 MiB file that costs nothing to make (sparse): what a hostile server sends.
    static func bigFile(_ path: String, size: off_t = 128 << 20) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0, ftruncate(fd, size) == 0 else { throw SupportError("cannot make \(path): \(errno)") }
        close(fd)
    }

    /// Point 12: the probe asks for the last 65,557 bytes; a server answered `206 bytes
    /// 0-(N-1)/N` with 768 MiB and Signet held it all (1.09 GB peak RSS) before refusing.
    @Test("a probe answered with the whole file as one 206 part is refused at its first byte, with a flat peak RSS")
    func probeAnsweredWhole() throws {
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true, suffixFromStart: true)]])
        try Self.bigFile(server.file("app.zip"))
        let dest = try TemporaryDirectory()
        let arguments = ["unpack", server.url("app.zip"), "--dest", dest.file("app"), "--pubkey", Self.examplePublicKey,
                         "--allow-http", "--retries", "0"]
        let result = try CLI.run(arguments + ["--json"])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("last 65557 bytes"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest.file("app")))
        // 128 MiB held would show; refused at the first byte, the peak is Signet's own.
        let peak = try CLI.peakRSS(arguments, status: 5)
        #expect(peak < 64 << 10, "peak RSS \(peak) KiB")
        #expect(server.requests.count <= 2, "\(server.requests)")
    }

    /// Point 12: `--max-download-size` was never applied on the ranged path.
    @Test("--max-download-size applies on the ranged path: a package larger than it is refused after the probe's headers")
    func maximumSizeOverRanges() throws {
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true)]])
        try Self.bigFile(server.file("app.zip"))
        let dest = try TemporaryDirectory()
        let result = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest.file("app"), "--pubkey", Self.examplePublicKey,
                                  "--allow-http", "--retries", "0", "--max-download-size", "1000000", "--json"])
        #expect(result.status == 4, "\(result.status) \(result.stderr)")
        #expect((try? result.json()["error"] as? [String: Any])?["code"] as? String == "download-too-large", "\(result.stdoutText)")
        #expect(result.stderr.contains("--max-download-size"), "\(result.stderr)")
        #expect(server.requests.count == 1, "\(server.requests)")
    }
}
