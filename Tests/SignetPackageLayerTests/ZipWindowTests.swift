import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
import SignetTestSupport
import SignetCryptoTestSupport

/// libzip sees an archive a window of records at a time (``ZipReader``, ``WindowSource``), so its
/// memory does not grow with the number of entries. These archives span several windows and are
/// made by Python's zipfile (another writer than Signet's): per-entry comments and extra fields,
/// stored and deflated entries, and, when streamed, data descriptors after every entry.
@Suite("libzip windows")
struct ZipWindowTests {
    static let count = 3 * ZipReader.windowSize + 17

    static func name(_ index: Int) -> String { "d\(index % 7)/entry-\(index).txt" }

    static func content(_ index: Int) -> [UInt8] {
        Array(String(repeating: "entry \(index) ", count: index % 50 + 1).utf8)
    }

    /// Writes the archive with Python; `streamed` hides `tell` and `seek`, so every entry gets a
    /// data descriptor instead of sizes in its local header.
    static func build(in directory: TemporaryDirectory, streamed: Bool) throws -> String {
        let path = directory.file(streamed ? "streamed.zip" : "seekable.zip")
        let script = pythonScript("zip_window_script.py")
        let result = try run("/usr/bin/env", ["python3", "-c", script, path, String(count), streamed ? "1" : "0"])
        try #require(result.status == 0, "\(result.stderr)")
        return path
    }

    @Test("entries across several windows read back exactly, in archive, reverse and shuffled order", arguments: [false, true])
    func readsInAnyOrder(streamed: Bool) throws {
        let directory = try TemporaryDirectory()
        let path = try Self.build(in: directory, streamed: streamed)
        let reader = try ZipReader(path: path)
        #expect(reader.count == Self.count)
        // Streamed: every entry has a data descriptor (flag bit 3); seekable: none has.
        #expect(reader.directory.allSatisfy { ($0.flags & 0x8 != 0) == streamed })
        // Opening checked every window with libzip, keeping only the last few.
        #expect(reader.openWindows.count <= ZipReader.cachedWindows)
        // Each record's offset in the file is where its central-directory signature is.
        let bytes = [UInt8](try contents(path))
        for position in 0..<reader.count {
            let at = Int(reader.directory.fileOffset(ofRecord: position))
            #expect(bytes[at..<at + 4].elementsEqual([0x50, 0x4b, 1, 2]), "record \(position)")
        }
        #expect(reader.directory.fileOffset(ofRecord: reader.count) == reader.directory.offset + reader.directory.size)

        var generator = SystemRandomNumberGenerator()
        let orders = [Array(0..<Self.count), Array((0..<Self.count).reversed()), Array(0..<Self.count).shuffled(using: &generator)]
        for order in orders {
            for position in order {
                let entry = reader.entry(at: position)
                #expect(String(decoding: reader.rawName(of: entry), as: UTF8.self) == Self.name(position))
                let read = try reader.readAll(entry, limit: 1 << 20, name: Self.name(position))
                #expect(read == Self.content(position), "entry \(position)")
                #expect(reader.openWindows.count <= ZipReader.cachedWindows)
                #expect(reader.openWindows.last?.contains(position) == true)
            }
        }
    }

    @Test("an archive of no entries opens (one empty window) and lists nothing")
    func emptyArchive() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("empty.zip")
        let result = try run("/usr/bin/env", ["python3", "-c", "import zipfile, sys; zipfile.ZipFile(sys.argv[1], 'w').close()", path])
        try #require(result.status == 0, "\(result.stderr)")
        let reader = try ZipReader(path: path)
        #expect(reader.count == 0)
        #expect(reader.openWindows == [0..<0])
    }

    @Test("a package of more entries than three windows verifies, and a damaged entry in a late window is still found")
    func packageAcrossWindows() throws {
        let directory = try TemporaryDirectory()
        let tree = directory.file("tree")
        for index in 0..<(2 * ZipReader.windowSize) {
            try FileManager.default.createDirectory(atPath: tree + "/f\(index % 3)", withIntermediateDirectories: true)
            _ = try directory.write("tree/f\(index % 3)/file-\(index).txt", Data("file \(index)\n".utf8))
        }
        let package = directory.file("p.zip")
        _ = try PackageBuilder.pack(
            [tree], to: package, signer: Signer(key: Fixtures.signingKey()),
            options: PackOptions(name: "windows", version: "1"))
        let policy = try Fixtures.trust("rsa2048-spki.der")
        let verified = try PackageReader.verify(package, policy: policy)
        #expect(verified.isValid, "\(verified.message)")

        // Flip one byte of the last stored resource's data (CRC and hash then disagree).
        let reader = try ZipReader(path: package)
        let last = try #require(
            (0..<reader.count).last { position in
                String(decoding: reader.rawName(of: reader.entry(at: position)), as: UTF8.self).hasPrefix("f2/")
            })
        #expect(last >= ZipReader.windowSize)
        let record = reader.directory[last]
        var bytes = [UInt8](try contents(package))
        let nameLength = Int(bytes[Int(record.localHeaderOffset) + 26]) | Int(bytes[Int(record.localHeaderOffset) + 27]) << 8
        let extraLength = Int(bytes[Int(record.localHeaderOffset) + 28]) | Int(bytes[Int(record.localHeaderOffset) + 29]) << 8
        bytes[Int(record.localHeaderOffset) + 30 + nameLength + extraLength] ^= 0x20
        try Data(bytes).write(to: URL(fileURLWithPath: package))
        #expect {
            _ = try PackageReader.verify(package, policy: policy)
        } throws: { error in
            (error as? SignetError)?.code == .malformedArchive && "\(error)".contains("corrupt")
        }
    }
}
