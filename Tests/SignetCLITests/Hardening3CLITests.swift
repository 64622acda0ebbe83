import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 36: the update loop against damaged large entries, flaky links, other servers and
/// other users.
@Suite("Hardening 3: large damaged entries, flaky links, other users' files", .serialized)
struct Hardening3CLITests {
    /// One nginx for the suite.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer() }

    /// 9 MiB of random bytes (stored: random data does not deflate) or of words (deflated).
    static func largeResource(deflated: Bool) -> Data {
        let size = 9 << 20
        if !deflated {
            var generator = SystemRandomNumberGenerator()
            return Data((0..<(size / 8)).flatMap { _ in withUnsafeBytes(of: generator.next() as UInt64) { Array($0) } })
        }
        let words = ["alpha ", "beta ", "gamma ", "delta ", "signet ", "package ", "omega\n"].map { Data($0.utf8) }
        var text = Data(capacity: size)
        var state: UInt32 = 12345
        while text.count < size {
            state = state &* 1_103_515_245 &+ 12345
            text.append(words[Int(state >> 16) % words.count])
        }
        return text
    }

    /// The package at `package` with one byte of `entry`'s data flipped, at `position` (0, 0.5
    /// or 1: start, middle, end) of that data, written to `out`. Python's zipfile finds the data.
    static func damage(_ package: String, entry: String, at position: Double, out: String) throws {
        let script = """
        import struct, sys, zipfile
        path, name, where, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
        info = zipfile.ZipFile(path).getinfo(name)
        data = bytearray(open(path, 'rb').read())
        n, e = struct.unpack('<HH', data[info.header_offset + 26:info.header_offset + 30])
        start = info.header_offset + 30 + n + e
        offset = start + min(info.compress_size - 1, max(0, int(info.compress_size * where) - 16 if where > 0 else 16))
        data[offset] ^= 0x5a
        open(out, 'wb').write(data)
        print(info.compress_type)
        """
        let result = try run("python3", ["-c", script, package, entry, "\(position)", out])
        guard result.status == 0 else { throw SupportError("damaging the package failed: \(result.stderr)") }
    }

    /// A run refused the usual way: exit 1, 4 or 5 with signet's own message, never a signal
    /// or a backtrace.
    static func expectRefused(_ result: ProcessResult, _ what: String) {
        #expect([1, 4, 5].contains(result.status), "\(what): exit \(result.status) \(result.stderr.suffix(600))")
        #expect(!result.stderr.contains("Backtrace") && !result.stderr.contains("Fatal error") && result.stderr.contains("signet: error:"),
                "\(what): \(result.stderr.suffix(600))")
    }

    // MARK: Point 0: no crash, whatever breaks inside a large entry

    @Test("a large stored or deflated resource damaged at its start, middle or end: unpack (new DIR and over an installed tree), inspect and unpack URL refuse it, leaving nothing")
    func damagedLargeEntries() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        for deflated in [false, true] {
            let kind = deflated ? "deflated" : "stored"
            let package = work.directory.file("\(kind).zip")
            let big = Self.largeResource(deflated: deflated)
            try Hardening2CLITests.pack(work, ["big.bin": big, "small.txt": Data("small\n".utf8)], sequence: 2, out: package)
            // Installed: release 1, whose big.bin differs, so that every path must read the damaged entry.
            let older = work.directory.file("\(kind)-1.zip")
            try Hardening2CLITests.pack(work, ["big.bin": big.prefix(big.count - 4096), "small.txt": Data("small\n".utf8)], sequence: 1, out: older)
            let method = try run("python3", ["-c", "import zipfile,sys; print(zipfile.ZipFile(sys.argv[1]).getinfo('big.bin').compress_type)", package])
            #expect(method.stdoutText.hasPrefix(deflated ? "8" : "0"), "\(kind): compression method \(method.stdoutText)")
            let installed = work.directory.file("installed-\(kind)")
            let first = try CLI.run(["unpack", older, "--dest", installed, "--pubkey", work.publicDER])
            try #require(first.status == 0, "\(first.stderr)")
            for position in [0.0, 0.5, 1.0] {
                let what = "\(kind) damaged at \(position)"
                let bad = work.directory.file("bad-\(kind)-\(position).zip")
                try Self.damage(package, entry: "big.bin", at: position, out: bad)
                let fresh = work.directory.file("fresh-\(kind)-\(position)")
                Self.expectRefused(try CLI.run(["unpack", bad, "--dest", fresh, "--pubkey", work.publicDER]), what + ", unpack into a new DIR")
                #expect(!FileManager.default.fileExists(atPath: fresh), "\(what): no DIR")
                Self.expectRefused(try CLI.run(["unpack", bad, "--dest", installed, "--pubkey", work.publicDER, "--force"]), what + ", unpack over DIR")
                #expect(try CLI.run(["reverify", installed, "--pubkey", work.publicDER]).status == 0, "\(what): the installed tree unchanged")
                Self.expectRefused(try CLI.run(["inspect", bad, "--pubkey", work.publicDER]), what + ", inspect")
                try? FileManager.default.removeItem(atPath: server.www + "/damaged.zip")
                try FileManager.default.copyItem(atPath: bad, toPath: server.www + "/damaged.zip")
                let viaURL = work.directory.file("url-\(kind)-\(position)")
                Self.expectRefused(try CLI.run(["unpack", server.url("damaged.zip"), "--dest", viaURL, "--pubkey", work.publicDER, "--tls-ca", server.root]),
                                   what + ", unpack URL")
                let overURL = try CLI.run(["unpack", server.url("damaged.zip"), "--dest", installed, "--pubkey", work.publicDER, "--tls-ca", server.root, "--force"])
                Self.expectRefused(overURL, what + ", unpack URL over DIR")
                #expect(try CLI.run(["reverify", installed, "--pubkey", work.publicDER]).status == 0, "\(what): the installed tree unchanged")
                // The lock of the installed DIR stays (it is how the next run waits); nothing else.
                let beside = try FileManager.default.contentsOfDirectory(atPath: work.directory.path)
                    .filter { $0.contains(".signet-") && !$0.hasPrefix(".installed-") || $0.contains("-staging") || $0.contains("-download") }
                #expect(beside.isEmpty, "\(what): staging, downloads and locks of new DIRs removed: \(beside)")
            }
        }
    }
}
