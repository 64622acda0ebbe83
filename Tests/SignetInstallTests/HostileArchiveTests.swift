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

/// Hostile packages, built from a valid one by Tests/SignetTestSupport/Hostile/hostile.py, each refused
/// by inspect/verify with the exit code FORMAT.md documents.
@Suite("Hostile archives")
struct HostileArchiveTests {
    enum Expected: Sendable, CustomStringConvertible {
        /// A thrown SignetError with this code (exit 4 for malformed input, 1 for packageInvalid).
        case error(SignetError.Code, String)
        /// A verdict with this failure.
        case verdict(PackageVerification.Failure, String)
        var description: String {
            switch self {
            case .error(let code, _): "\(code)"
            case .verdict(let failure, _): "\(failure)"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let mutation: String
        let expected: Expected
        var testDescription: String { "\(mutation) → \(expected)" }
    }

    static let cases: [Case] = [
        Case(mutation: "traversal", expected: .error(.malformedArchive, "'..'")),
        Case(mutation: "absolute", expected: .error(.malformedArchive, "absolute path")),
        Case(mutation: "backslash", expected: .error(.malformedArchive, "backslash")),
        Case(mutation: "dotdot-inside", expected: .error(.malformedArchive, "'..'")),
        Case(mutation: "nul-name", expected: .error(.malformedArchive, "NUL")),
        Case(mutation: "control-name", expected: .error(.malformedArchive, "control character")),
        Case(mutation: "invalid-utf8", expected: .error(.malformedArchive, "not valid UTF-8")),
        Case(mutation: "long-name", expected: .error(.malformedArchive, "at most 255")),
        Case(mutation: "symlink", expected: .error(.malformedArchive, "symbolic link")),
        Case(mutation: "duplicate", expected: .error(.malformedArchive, "same name")),
        Case(mutation: "duplicate-first", expected: .error(.malformedArchive, "same name")),
        Case(mutation: "nfc-twins", expected: .error(.malformedArchive, "Unicode normalisation")),
        Case(mutation: "kelvin-twin", expected: .error(.malformedArchive, "Unicode normalisation")),
        Case(mutation: "twins-neither-nfc", expected: .error(.malformedArchive, "Unicode normalisation")),
        Case(mutation: "duplicate-signature", expected: .error(.malformedArchive, "same name")),
        Case(mutation: "directory-with-data", expected: .error(.malformedArchive, "carries data")),
        Case(mutation: "encrypted", expected: .error(.malformedArchive, "is encrypted")),
        Case(mutation: "unknown-signet-entry", expected: .error(.malformedArchive, "unknown entry '.signet/extra.txt'")),
        Case(mutation: "deflate-bomb", expected: .error(.malformedArchive, "deflate bomb")),
        Case(mutation: "bad-crc", expected: .error(.malformedArchive, "corrupt")),
        Case(mutation: "truncated", expected: .error(.malformedArchive, "truncated")),
        Case(mutation: "overlapping", expected: .error(.malformedArchive, "overlaps the one before it")),
        Case(mutation: "too-many-files", expected: .error(.malformedArchive, "(--max-files)")),
        Case(mutation: "not-json", expected: .error(.malformedManifest, "not JSON")),
        Case(mutation: "wrong-format", expected: .error(.malformedManifest, "signet/2")),
        Case(mutation: "missing-manifest", expected: .error(.packageInvalid, "no .signet/manifest.json")),
        Case(mutation: "missing-manifest-signature", expected: .error(.packageInvalid, "not signed")),
        Case(mutation: "extra-resource", expected: .verdict(.extra, "smuggled.txt")),
        // Names match byte for byte: another spelling of a listed path is not that path.
        Case(mutation: "nfd-entry-nfc-manifest", expected: .verdict(.extra, "which the manifest does not list")),
        Case(mutation: "missing-resource", expected: .verdict(.missing, "does not hold it")),
        Case(mutation: "missing-signature", expected: .verdict(.missing, "has no signature")),
        Case(mutation: "modified-resource", expected: .verdict(.modified, "bytes")),
        Case(mutation: "size-lie", expected: .error(.malformedArchive, "more data than the 16 bytes its headers state")),
        Case(mutation: "modified-manifest", expected: .verdict(.badManifestSignature, "does not verify")),
        Case(mutation: "long-signature", expected: .verdict(.badSignature, "258 bytes")),
        Case(mutation: "short-signature", expected: .verdict(.badSignature, "255 bytes")),
        Case(mutation: "record-signature", expected: .verdict(.badSignature, ".signet/signatures.sig")),
        Case(mutation: "swapped-signature", expected: .verdict(.badSignature, "does not verify")),
        Case(mutation: "expired", expected: .verdict(.expired, "expired at 2021-01-01T00:00:00Z")),
        // Every field a zip states twice must agree, and the data must agree with the headers.
        Case(mutation: "cd-size-lie", expected: .error(.malformedArchive, "holds more data than the 16 bytes its headers state")),
        Case(mutation: "deflate-trailing", expected: .error(.malformedArchive, "bytes follow the end of its deflate stream")),
        Case(mutation: "cd-crc-only", expected: .error(.malformedArchive, "disagree on its CRC or sizes")),
        Case(mutation: "local-size", expected: .error(.malformedArchive, "disagree on its CRC or sizes")),
        Case(mutation: "local-method", expected: .error(.malformedArchive, "disagree on its compression method")),
        Case(mutation: "local-name", expected: .error(.malformedArchive, "names another file")),
        Case(mutation: "descriptor-crc", expected: .error(.malformedArchive, "data descriptor and the central directory")),
        Case(mutation: "descriptor-size", expected: .error(.malformedArchive, "data descriptor and the central directory")),
        Case(mutation: "stored-size", expected: .error(.malformedArchive, "stored entry")),
        Case(mutation: "prepended", expected: .error(.malformedArchive, "belong to no entry")),
        Case(mutation: "gap", expected: .error(.malformedArchive, "belong to no entry")),
        Case(mutation: "cd-trailing-bytes", expected: .error(.malformedArchive, "more than its")),
        Case(mutation: "eocd-counts", expected: .error(.malformedArchive, "entries on this disk")),
        Case(mutation: "comment-zip64-locator", expected: .error(.malformedArchive, "overflows")),
        Case(mutation: "zip64-offset-overflow", expected: .error(.malformedArchive, "overflows")),
        Case(mutation: "flag-strong-encryption", expected: .error(.malformedArchive, "general-purpose flags")),
        Case(mutation: "unicode-path-extra", expected: .error(.malformedArchive, "Unicode path field")),
        Case(mutation: "extra-damaged", expected: .error(.malformedArchive, "extra field")),
        // Signed manifests with extreme or ambiguous content.
        Case(mutation: "signed-huge-size", expected: .verdict(.modified, "18446744073709551615")),
        Case(mutation: "signed-duplicate-key", expected: .error(.malformedManifest, "appears twice"))
    ]

    /// A valid package of the fixture key, and the generator's output for `mutation`.
    static func build(_ mutation: String, in directory: TemporaryDirectory) throws -> String {
        let root = directory.file("tree")
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        try Data(String(repeating: "resource one\n", count: 100).utf8).write(to: URL(fileURLWithPath: root + "/a.txt"))
        try Data("resource two\n".utf8).write(to: URL(fileURLWithPath: root + "/sub/b.txt"))
        let valid = directory.file("valid.zip")
        _ = try PackageBuilder.pack([root], to: valid, signer: Signer(key: Fixtures.signingKey()), options: PackOptions(name: "hostile", version: "1"))
        let out = directory.file("\(mutation).zip")
        let generator = Fixtures.hostile + "/hostile.py"
        let made = try run("python3", [generator, valid, Fixtures.key("rsa2048-pkcs8.pem"), mutation, out])
        guard made.status == 0 else { throw SupportError("hostile.py \(mutation) failed: \(made.stderr)") }
        return out
    }

    @Test("the generator's unmutated output verifies (so the refusals below are about the mutation)")
    func control() throws {
        let directory = try TemporaryDirectory()
        let result = try PackageReader.verify(try Self.build("valid", in: directory), policy: Fixtures.trust("rsa2048-spki.der"))
        #expect(result.isValid, "\(result.message)")
    }

    @Test("each hostile archive is refused with its documented outcome", arguments: cases)
    func refused(_ test: Case) throws {
        let directory = try TemporaryDirectory()
        let package = try Self.build(test.mutation, in: directory)
        let policy = try Fixtures.trust("rsa2048-spki.der")
        switch test.expected {
        case .error(let code, let words):
            let error = signetError { _ = try PackageReader.verify(package, policy: policy) }
            #expect(error?.code == code, "\(test.mutation): \(error?.description ?? "accepted")")
            // The package's own name (e.g. encrypted.zip) must not satisfy the check.
            let reason = error?.reason.replacingOccurrences(of: package, with: "<package>") ?? ""
            #expect(reason.contains(words), "\(test.mutation): \(reason)")
            if code == .malformedArchive || code == .malformedManifest { #expect(error?.code.exitStatus.rawValue == 4) }
        case .verdict(let failure, let words):
            let result = try PackageReader.verify(package, policy: policy)
            #expect(result.failure == failure, "\(test.mutation): \(result.message)")
            #expect(result.message.contains(words), "\(test.mutation): \(result.message)")
            #expect(failure.exitStatus.rawValue == 1)
        }
    }

    @Test("read as over range requests (each local header checked when its entry is read), every hostile archive is refused the same way", arguments: cases)
    func refusedDeferred(_ test: Case) throws {
        let directory = try TemporaryDirectory()
        let package = try Self.build(test.mutation, in: directory)
        let policy = try Fixtures.trust("rsa2048-spki.der")
        let limits = PackageLimits()
        func verify() throws -> PackageVerification {
            let reader = try ZipReader(input: try InputFile.open(package, what: "package"), maximumEntries: limits.maximumEntries, localHeaders: .deferred)
            return try PackageReader.verify(reader: reader, policy: policy, limits: limits, now: .now, progress: nil)
        }
        switch test.expected {
        case .error(let code, _):
            let error = signetError { _ = try verify() }
            #expect(error?.code == code, "\(test.mutation): \(error?.description ?? "accepted")")
        case .verdict(let failure, _):
            #expect(try verify().failure == failure, "\(test.mutation)")
        }
    }

    /// Refusals that unpack must make as inspect does (its own reading of the data and of the
    /// record signature), with nothing written.
    static let unpackCases: [Case] = [
        Case(mutation: "deflate-trailing", expected: .error(.malformedArchive, "bytes follow the end of its deflate stream")),
        Case(mutation: "record-signature", expected: .error(.badSignature, ".signet/signatures.sig"))
    ]

    @Test("unpack refuses bytes after a deflate stream and a record signature that does not verify, and writes nothing", arguments: unpackCases)
    func unpackRefused(_ test: Case) throws {
        guard case .error(let code, let words) = test.expected else { return }
        let directory = try TemporaryDirectory()
        let package = try Self.build(test.mutation, in: directory)
        let destination = directory.file("installed")
        let error = signetError { _ = try Installer.install(package, to: destination, policy: try Fixtures.trust("rsa2048-spki.der")) }
        #expect(error?.code == code, "\(test.mutation): \(error?.description ?? "installed")")
        #expect(error?.reason.contains(words) == true, "\(test.mutation): \(error?.reason ?? "")")
        #expect(!FileManager.default.fileExists(atPath: destination))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasPrefix(".") }.isEmpty, "nothing left beside it")
    }

    @Test("a package whose entries carry data descriptors that agree with everything verifies")
    func descriptorsAccepted() throws {
        let directory = try TemporaryDirectory()
        let result = try PackageReader.verify(try Self.build("descriptor-valid", in: directory), policy: Fixtures.trust("rsa2048-spki.der"))
        #expect(result.isValid, "\(result.message)")
    }

    @Test("a flood of directory entries is refused before libzip reads it, in bounded memory")
    func directoryFlood() throws {
        let directory = try TemporaryDirectory()
        let package = try Self.build("directory-flood", in: directory)
        var limits = PackageLimits()
        limits.maxFiles = 50_000
        let error = signetError { _ = try PackageReader.verify(package, policy: try Fixtures.trust("rsa2048-spki.der"), limits: limits) }
        #expect(error?.code == .malformedArchive, "\(error?.description ?? "accepted")")
        #expect(error?.reason.contains("--max-files") == true, "\(error?.reason ?? "")")
    }

    @Test("a package signed by a key that is not trusted is untrusted (exit 3), whatever else is trusted")
    func untrusted() throws {
        let directory = try TemporaryDirectory()
        let package = try Self.build("valid", in: directory)
        let result = try PackageReader.verify(package, policy: Fixtures.trust("other3072-spki.der"))
        #expect(result.failure == .untrustedSigner)
        #expect(result.failure?.exitStatus.rawValue == 3)
        #expect(result.message.contains("not among the trusted keys"))
    }
}
