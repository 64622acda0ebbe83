import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetInstall
import SignetTestSupport
import SignetCryptoTestSupport

/// Resource signatures are verified on a second thread while the next files are read
/// (``SignatureChecks``). The outcome must be the one a check in turn gives: every bad signature
/// found, before anything is installed, and the first failure in manifest order reported,
/// whichever kind it is and however many checks are still pending.
@Suite("Signature checks beside the reading thread")
struct SignatureChecksTests {
    static let count = 3 * SignatureChecks.window

    /// A package of `count` files, rewritten by Python's zipfile with some signature entries
    /// swapped for another file's (valid length, wrong content), some cut one byte short, and
    /// some resources changed.
    static func package(in directory: TemporaryDirectory, badSignatures: [Int], modified: [Int], truncated: [Int] = []) throws -> String {
        let tree = directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        for index in 0..<count {
            _ = try directory.write("tree/f\(String(format: "%04d", index)).txt", Data("file \(index)\n".utf8))
        }
        let good = directory.file("good.zip")
        _ = try PackageBuilder.pack([tree], to: good, signer: Signer(key: Fixtures.signingKey()), options: PackOptions(name: "checks", version: "1"))
        let bad = directory.file("bad.zip")
        let script = pythonScript("signature_checks_script.py")
        let result = try run(
            "/usr/bin/env",
            [
                "python3", "-c", script, good, bad,
                badSignatures.map(String.init).joined(separator: ","), modified.map(String.init).joined(separator: ","),
                truncated.map(String.init).joined(separator: ",")
            ])
        try #require(result.status == 0, "\(result.stderr)")
        return bad
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let badSignatures: [Int]
        let modified: [Int]
        var truncated: [Int] = []
        /// The file the refusal must name, and how.
        let first: Int
        let failure: PackageVerification.Failure
        var testDescription: String { "bad signatures \(badSignatures), modified \(modified), truncated \(truncated) → \(failure) of \(first)" }
    }

    static let cases: [Case] = [
        // Several bad signatures, the later one far past the window of pending checks.
        Case(badSignatures: [count - 5, 40], modified: [], first: 40, failure: .badSignature),
        // A bad signature still pending when a later file's content is found modified.
        Case(badSignatures: [40], modified: [300], first: 40, failure: .badSignature),
        // A modified file before a bad signature.
        Case(badSignatures: [300], modified: [40], first: 40, failure: .modified),
        // The last file's signature: checked after the loop.
        Case(badSignatures: [count - 1], modified: [], first: count - 1, failure: .badSignature),
        // A signature of the wrong length fails without being queued, still in manifest order.
        Case(badSignatures: [40], modified: [], truncated: [300], first: 40, failure: .badSignature),
        Case(badSignatures: [300], modified: [], truncated: [40], first: 40, failure: .badSignature)
    ]

    @Test("inspect reports the first failure in manifest order", arguments: cases)
    func inspect(_ test: Case) throws {
        let directory = try TemporaryDirectory()
        let package = try Self.package(in: directory, badSignatures: test.badSignatures, modified: test.modified, truncated: test.truncated)
        let result = try PackageReader.verify(package, policy: try Fixtures.trust("rsa2048-spki.der"))
        #expect(!result.isValid)
        #expect(result.failure == test.failure)
        let name = String(format: "f%04d.txt", test.first)
        #expect(result.message.contains("'\(name)'"), "\(result.message)")
    }

    @Test("unpack installs nothing and names the first failure in manifest order", arguments: cases)
    func unpack(_ test: Case) throws {
        let directory = try TemporaryDirectory()
        let package = try Self.package(in: directory, badSignatures: test.badSignatures, modified: test.modified, truncated: test.truncated)
        let dest = directory.file("dest")
        let error = signetError { _ = try Installer.install(package, to: dest, policy: try Fixtures.trust("rsa2048-spki.der")) }
        let name = String(format: "f%04d.txt", test.first)
        #expect(error?.code == SignetError.Code(test.failure))
        #expect(error?.reason.contains("'\(name)'") == true, "\(error?.reason ?? "installed")")
        #expect(!FileManager.default.fileExists(atPath: dest))
        // No staging left beside the destination (the documented lock file stays).
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !isKeptBesideDestination($0) }.sorted()
        #expect(left == ["bad.zip", "good.zip", "tree"], "\(left)")
    }

    @Test("an untouched package of the same files verifies and installs")
    func untouched() throws {
        let directory = try TemporaryDirectory()
        let package = try Self.package(in: directory, badSignatures: [], modified: [])
        #expect(try PackageReader.verify(package, policy: try Fixtures.trust("rsa2048-spki.der")).isValid)
        let report = try Installer.install(package, to: directory.file("dest"), policy: try Fixtures.trust("rsa2048-spki.der"))
        #expect(report.files.count == Self.count)
    }
}
