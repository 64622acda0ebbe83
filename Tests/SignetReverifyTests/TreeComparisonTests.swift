import Foundation
import Testing
import SystemPackage
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
import SignetTestSupport
import SignetCryptoTestSupport

/// A tree compared with its manifest, without a tree on disk: what is on disk and unlisted,
/// and which folders are added (the walk's decisions, FORMAT.md §6).
@Suite("Reverify: a tree's names against its manifest")
struct TreeComparisonTests {
    /// A manifest listing `paths` (each one byte; the content is not what these tests judge).
    static func manifest(listing paths: [String]) throws -> Manifest {
        Manifest(
            algorithm: .rsaPKCS1v15SHA256, created: Timestamp(rfc3339: "2026-11-22T10:00:00Z")!, expires: nil,
            files: paths.map { .init(path: $0, size: 1, sha256: String(repeating: "00", count: 32), mode: .regular) },
            keyID: try Fixtures.signingKey().keyID, name: "assets", sequence: 42, version: "1.4.2")
    }

    @Test(
        "files on disk the manifest does not list are found whether or not the manifest is in byte order",
        arguments: [
            (["a", "b/c", "b/d", "e"], ["a", "b/c", "b/d", "e"], [String]()),
            (["a", "b/c", "b/d", "e"], ["0", "a", "b/c", "b/cc", "b/d", "z"], ["0", "b/cc", "z"]),
            (["e", "b/d", "a", "b/c"], ["0", "a", "b/c", "b/cc", "b/d", "z"], ["0", "b/cc", "z"]),
            (["a", "c"], ["b"], ["b"]),
            ([String](), ["x", "y"], ["x", "y"]),
            (["caf\u{e9}"], ["cafe\u{301}", "caf\u{e9}"], ["cafe\u{301}"]) // the filesystem compares bytes
        ])
    func unlisted(_ listed: [String], _ onDisk: [String], _ expected: [String]) throws {
        let manifest = try Self.manifest(listing: listed)
        let sortedDisk = onDisk.sorted(by: ResourcePath.byteOrder)
        #expect(Reverifier.unlisted(sortedDisk, manifest).sorted(by: ResourcePath.byteOrder) == expected.sorted(by: ResourcePath.byteOrder))
    }

    @Test(
        "a folder on disk is added unless the manifest lists a file below it (or it is a listed file, reported as that file), found by binary search in a sorted manifest and by a set otherwise",
        arguments: [
            (["a", "b/c", "b-x/d", "e/f/g"], ["b", "b-x", "e", "e/f", "z", "a"], ["z/"]),
            (["e/f/g", "b-x/d", "a", "b/c"], ["b", "b-x", "e", "e/f", "z", "a"], ["z/"]),
            (["b.txt", "b0/c", "c/d"], ["b", "c"], ["b/"]),
            (["c/d", "b0/c", "b.txt"], ["b", "c"], ["b/"]),
            ([String](), ["x"], ["x/"])
        ])
    func addedFolders(_ listed: [String], _ folders: [String], _ expected: [String]) throws {
        let manifest = try Self.manifest(listing: listed)
        let reports = Reverifier.folderReports(
            folders.map { ($0, UInt32(0o755)) }, manifest: manifest, rootFD: FileDescriptor(rawValue: -1), options: ReverifyOptions())
        #expect(reports.allSatisfy { $0.verdict == .added })
        #expect(reports.map(\.path).sorted() == expected.sorted())
    }

}
