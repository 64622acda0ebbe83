import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetArchive
@testable import SignetPackage
import SignetTestSupport

/// The one-pass sealing writer of `pack --encrypt-to` (FORMAT.md §8), driven as libzip drives
/// it: bytes appended, a local header rewritten after its entry, a return to the end.
@Suite("SealingOutput: a package sealed as libzip writes it")
struct SealingOutputTests {
    /// A writer into a new file in `directory`, and the file's descriptor (kept open).
    static func writer(_ directory: TemporaryDirectory) throws -> (SealingOutput, Int32, String, [UInt8]) {
        let path = directory.file("sealed.zip")
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        let key = try ChunkedEncryption.randomKey()
        return (try SealingOutput(file: fd, path: path, key: key), fd, path, key)
    }

    @Test("entries written and their headers rewritten, over chunk edges: the payload opens to exactly the bytes, unzip -t checks the CRC-32")
    func rewrites() throws {
        let directory = try TemporaryDirectory()
        let (output, fd, path, key) = try Self.writer(directory)
        defer { close(fd) }
        var expected = [UInt8]()
        // Three "entries": a 40-byte header, data, then the header rewritten; sizes that cross
        // chunk edges (16 KiB) at the header and in the data.
        try output.resumed(at: 0)
        for (index, size) in [70_000, 16_384 - 40 - 70_000 % 16_384, 1, 200_000].enumerated() {
            let start = UInt64(expected.count)
            let header = [UInt8](repeating: UInt8(index), count: 40)
            let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
            try header.withUnsafeBytes { try output.write($0, at: start) }
            try data.withUnsafeBytes { try output.write($0, at: start + 40) }
            let rewritten = [UInt8](repeating: UInt8(100 + index), count: 40)
            try rewritten.withUnsafeBytes { try output.write($0, at: start) }
            expected += rewritten + data
            try output.resumed(at: UInt64(expected.count))
        }
        _ = try output.finish(envelope: Array("not an envelope".utf8))
        let unzip = try run("unzip", ["-tq", path])
        #expect(unzip.status == 0, "\(unzip.stdoutText) \(unzip.stderr)")
        let input = try DecryptingInput(try EncryptedPackage.parts(of: path), packageKey: key, name: path)
        var read = [UInt8](repeating: 0, count: expected.count + 10)
        let count = try read.withUnsafeMutableBytes { try input.read(fullyAt: 0, into: $0) }
        #expect(count == expected.count && Array(read[0..<count]) == expected)
    }

    @Test("a rewrite of bytes already sealed, or a gap, is refused (the package is not written), never sealed twice")
    func refusals() throws {
        let directory = try TemporaryDirectory()
        let (output, fd, _, _) = try Self.writer(directory)
        defer { close(fd) }
        try output.resumed(at: 0)
        let data = [UInt8](repeating: 7, count: 100_000)
        try data.withUnsafeBytes { try output.write($0, at: 0) }
        try output.resumed(at: 100_000)
        // Back to byte 0 after the return to the end: chunk 0 is sealed.
        #expect(throws: SignetError.self) { try data.withUnsafeBytes { try output.write(UnsafeRawBufferPointer(rebasing: $0[0..<30]), at: 0) } }
        #expect(throws: SignetError.self) { try data.withUnsafeBytes { try output.write(UnsafeRawBufferPointer(rebasing: $0[0..<30]), at: 200_000) } }
    }
}
