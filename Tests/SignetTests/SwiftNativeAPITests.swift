import Foundation
import Testing
import Signet
import SystemPackage
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

/// Issue 41, points 12-16: the library as an app developer meets it from another package (a
/// plain `import Signet`, no `@testable`): async forms with their own names, `FilePath` and
/// `URL` paths, `DataProtocol` bytes, `Date`, a described exit status, the one-key signature
/// check, and a passphrase held in memory.
@Suite("the public API as an app uses it: Swift-native forms (issue 41)")
struct SwiftNativeAPITests {
    static var publicKeyPath: FilePath { FilePath(Fixtures.key("rsa2048-spki.der")) }
    static var privateKeyPath: FilePath { FilePath(Fixtures.key("rsa2048-pkcs8-encrypted.pem")) }

    /// The DocC example (SigningAndVerifying.md), as written there.
    func signRelease(notes: Data, passphrase secret: [UInt8]) throws -> Signature {
        let key = try PrivateKey(
            contentsOf: Self.privateKeyPath,
            passphrase: .literal(Passphrase(bytes: secret)))
        return try Signer(key: key).sign(notes)
    }

    static func passphrase() throws -> [UInt8] {
        Array(try contents(Fixtures.key("passphrase.txt")).prefix { $0 != UInt8(ascii: "\n") })
    }

    @Test("point 12: async forms have their own names, local install included; each does what the blocking form does")
    func asyncNames() async throws {
        let directory = try TemporaryDirectory()
        let (_, package) = try PackageFixture.package(directory)
        let policy = try TrustPolicy(publicKeyFiles: [Self.publicKeyPath])
        let dest = FilePath(directory.file("installed"))
        let report = try await Installer.installAsync(FilePath(package), to: dest, policy: policy)
        #expect(!report.files.isEmpty)
        let tree = try await Reverifier.verifyTreeAsync(at: dest, policy: policy)
        #expect(tree.isOK)
        let blocking = try Reverifier.verifyTree(at: dest, policy: policy)
        #expect(blocking.files.map(\.verdict) == tree.files.map(\.verdict))
        let file = await Reverifier.verifyFileAsync(at: FilePath(dest.string + "/" + tree.files[0].path), policy: policy)
        #expect(file.verdict == .ok)
        // Cancelled before it starts: CancellationError, nothing installed.
        let other = FilePath(directory.file("not-installed"))
        let task = Task { try await Installer.installAsync(FilePath(package), to: other, policy: policy) }
        task.cancel()
        if case .failure(let error) = await task.result { #expect(error is CancellationError) }
    }

    @Test("point 13: an exit status prints its number and meaning")
    func exitStatusDescription() {
        #expect("\(SignetError.ExitStatus.malformed)" == "4 (malformed input)")
        #expect(String(describing: SignetError.ExitStatus.untrusted) == "3 (untrusted signer)")
        #expect("\(SignetError.Code.badSignature.exitStatus)" == "1 (verification failed)")
        #expect("\(SignetError.ExitStatus(rawValue: 9))" == "9")
    }

    @Test("point 14: FilePath and file URL paths, Data bytes, Date times")
    func swiftNativeForms() throws {
        let fromPath = try PublicKey(contentsOf: Self.publicKeyPath)
        let fromURL = try PublicKey(contentsOf: URL(fileURLWithPath: Self.publicKeyPath.string))
        let fromData = try PublicKey(bytes: Data(try contents(Self.publicKeyPath.string)))
        #expect(fromPath.keyID == fromURL.keyID && fromPath.keyID == fromData.keyID)
        // An empty list is the String form (the FilePath one is disfavoured): a policy filled in
        // later, as the DocC article's `addTUFMetadata` sample does.
        var empty = try TrustPolicy(publicKeyFiles: [])
        #expect(throws: SignetError.self) { try empty.addTUFMetadata("/nonexistent-metadata") }
        let remote = #expect(throws: SignetError.self) { try PublicKey(contentsOf: URL(string: "https://example.com/key.der")!) }
        #expect(remote?.code == .usage && remote?.reason.contains("not a file URL") == true)

        let key = try PrivateKey(contentsOf: URL(fileURLWithPath: Self.privateKeyPath.string), passphrase: .literal(Passphrase(bytes: try Self.passphrase())))
        let data = Data("release notes\n".utf8)
        let signature = try Signer(key: key).sign(data)
        #expect(try Signer(key: key).sign(data[...]) == signature) // a slice is DataProtocol too
        #expect(try Digest.compute(data, algorithm: .sha256) == Digest.compute(Array(data), algorithm: .sha256))
        let verified = try Verifier(policy: TrustPolicy(keys: [fromPath])).verify(signature: Data(signature.bytes), bytes: data)
        #expect(verified.isValid)

        let directory = try TemporaryDirectory()
        let file = FilePath(try directory.write("release.tar", data))
        #expect(try Signer(key: key).sign(fileAt: file) == signature)
        #expect(try Digest.compute(fileAt: file, algorithm: .sha256) == Digest.compute(data, algorithm: .sha256))

        let date = Date(timeIntervalSince1970: 1_795_000_000.9)
        #expect(Timestamp(date).secondsSinceEpoch == 1_795_000_000)
        #expect(Timestamp(date).date == Date(timeIntervalSince1970: 1_795_000_000))
        #expect(Timestamp(Timestamp(rfc3339: "2027-01-01T00:00:00Z")!.date) == Timestamp(rfc3339: "2027-01-01T00:00:00Z"))
    }

    @Test(
        "point 14, every entry point with a path: key generation, a package binding, a TUF repository, client and update, and the kept release take FilePath and URL"
    )
    func filePathsEverywhere() async throws {
        let server = try HTTPSServer.site("SwiftNativeAPITests")
        let work = try TemporaryDirectory()
        let download = try PackageFixture.downloadOptions(server)

        // Key generation into a FilePath; a second write there is refused.
        let keys = FilePath(work.file("keys"))
        let written = try GeneratedKey.generate(bits: 2048).write(to: keys, passphrase: nil)
        #expect(written.paths.count == 4)
        let existing = #expect(throws: SignetError.self) { try GeneratedKey.refuseExisting(in: keys) }
        #expect(existing?.code == .fileExists)

        // Release 10 described by FilePath and installed from a URL into a FilePath, bound to
        // that description; a binding it does not match is refused before anything is written.
        let (_, v10) = try PackageFixture.package(work, sequence: 10, name: "v10.zip")
        let site = FilePath(server.www + "/native")
        try FileManager.default.createDirectory(atPath: site.string, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: v10, toPath: site.string + "/app.zip")
        let described = try PackageBinding.describing(FilePath(v10))
        let whole = try Digest.compute(fileAt: FilePath(v10), algorithm: .sha256)
        #expect(described.sequence == 10 && described.sha256 == whole.hex)
        let dest = FilePath(work.file("installed"))
        let packageURL = try #require(URL(string: server.url("native/app.zip")))
        var wrong = InstallOptions()
        wrong.expectedPackage = PackageBinding(
            name: described.name, version: described.version, sequence: described.sequence, size: described.size,
            sha256: described.sha256, manifestSHA256: String(repeating: "0", count: 64))
        let mismatch = #expect(throws: SignetError.self) {
            try Installer.install(downloading: packageURL, to: dest, policy: try PackageFixture.policy, options: wrong, download: download)
        }
        #expect(mismatch?.code == .indexMismatch && !FileManager.default.fileExists(atPath: dest.string), "\(String(describing: mismatch))")
        var bound = InstallOptions()
        bound.expectedPackage = described
        let installed = try Installer.install(downloading: packageURL, to: dest, policy: try PackageFixture.policy, options: bound, download: download)
        #expect(!installed.upToDate)

        // Release 11 through a TUF repository made, filled and read by FilePath, URL and Data.
        let key = try Fixtures.signingKey()
        let one = TUFRepository.RoleKeys(keys: [key.publicKey])
        let repository = try TUFRepository.create(at: site.appending("tuf"), root: one, targets: one, snapshot: one, timestamp: one)
        _ = try repository.sign("root", with: key, reviewed: try repository.review("root")!.digest)
        _ = try repository.sign("targets", with: key, reviewed: try repository.review("targets")!.digest)
        let (_, v11) = try PackageFixture.package(work, sequence: 11, name: "v11.zip")
        let reopened = try TUFRepository(at: site.appending("tuf"))
        #expect(try reopened.add(package: FilePath(v11), channels: ["stable"]).sequence == 11)
        _ = try reopened.sign("targets", with: key, reviewed: try reopened.review("targets")!.digest)
        _ = try reopened.refresh(snapshotKeys: [key], timestampKeys: [key])
        let metadata = FilePath(work.file("tuf-metadata"))
        try TUFClient.initialize(metadataDirectory: metadata, trustedRoot: Data(try contents(site.string + "/tuf/metadata/1.root.json")))
        var client = TUFClientOptions(metadataDirectory: metadata, metadataURL: try #require(URL(string: server.url("native/tuf/metadata"))))
        client.download = download
        let report = try await TUFUpdater.updateAsync(to: dest, options: TUFUpdateOptions(client: client, channel: "stable"))
        #expect(report.install != nil && report.release.sequence == 11)
        let targets = try #require(URL(string: server.url("native/tuf/targets")))
        // A folder that is not there: an error that names it (not a bare errno), nothing written.
        let missing = await #expect(throws: SignetError.self) {
            try await TUFClient.downloadAsync(report.release.target, options: client, from: targets, into: FilePath(work.file("none")))
        }
        #expect(missing?.path == work.file("none") && missing?.reason.contains("no such file") == true, "\(String(describing: missing))")
        try FileManager.default.createDirectory(atPath: work.file("targets"), withIntermediateDirectories: false)
        let target = try await TUFClient.downloadAsync(report.release.target, options: client, from: targets, into: FilePath(work.file("targets")))
        #expect(try contents(target.path) == contents(v11))

        // The kept release, by FilePath: 10 is kept behind 11, and rolling back brings it back.
        #expect(try Installer.status(of: dest).previous?.sequence == 10)
        #expect(try Installer.confirm(dest) == nil)
        let rolledBack = try Installer.rollback(dest)
        #expect(rolledBack.from?.sequence == 11 && rolledBack.to?.sequence == 10)
        #expect(try Installer.status(of: dest).current?.sequence == 10)
    }

    @Test("point 15: one key, one signature, one line; wrong content, length or key is false")
    func oneLineCheck() throws {
        let key = try PublicKey(contentsOf: Self.publicKeyPath)
        let secret = try Self.passphrase()
        let notes = Data("release notes\n".utf8)
        let signature = try signRelease(notes: notes, passphrase: secret)
        #expect(key.isValidSignature(signature.bytes, for: notes))
        #expect(!key.isValidSignature(signature.bytes, for: Data("release notes?\n".utf8)))
        #expect(!key.isValidSignature(signature.bytes.dropLast(), for: notes))
        #expect(!key.isValidSignature(signature.bytes + [0], for: notes))
        #expect(!key.isValidSignature(signature.bytes, for: notes, algorithm: .rsaPSSSHA256))
        let other = try PublicKey(contentsOf: FilePath(Fixtures.key("other3072-spki.der")))
        #expect(!other.isValidSignature(signature.bytes, for: notes))

        let directory = try TemporaryDirectory()
        let file = FilePath(try directory.write("notes.txt", notes))
        #expect(try key.isValidSignature(signature.bytes, forFileAt: file))
        #expect(try !key.isValidSignature(Data(repeating: 0, count: 256), forFileAt: file))
        #expect(throws: SignetError.self) { try key.isValidSignature(signature.bytes, forFileAt: FilePath(directory.file("missing"))) }
        // The same answer as openssl's: its signature over the same bytes is valid here.
        let made = try SignetTestSupport.run("openssl", ["dgst", "-sha256", "-sign", Fixtures.key("rsa2048-pkcs8.pem"), file.string])
        #expect(made.status == 0)
        #expect(key.isValidSignature(made.stdout, for: notes))
    }

    @Test("point 16: a passphrase held in memory, as the DocC example gives it")
    func passphraseInMemory() throws {
        let signature = try signRelease(notes: Data("x".utf8), passphrase: try Self.passphrase())
        #expect(try PublicKey(contentsOf: Self.publicKeyPath).isValidSignature(signature.bytes, for: Data("x".utf8)))
        let wrong = #expect(throws: SignetError.self) { try signRelease(notes: Data("x".utf8), passphrase: Array("wrong".utf8)) }
        #expect(wrong?.code == .wrongPassphrase)
    }
}
