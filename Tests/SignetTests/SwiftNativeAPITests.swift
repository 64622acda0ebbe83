import Foundation
import Testing
import Signet
import SystemPackage
import SignetTestSupport

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
        let key = try PrivateKey(contentsOf: Self.privateKeyPath,
                                 passphrase: .literal(Passphrase(bytes: secret)))
        return try Signer(key: key).sign(notes)
    }

    static func passphrase() throws -> [UInt8] {
        Array(try contents(Fixtures.key("passphrase.txt")).prefix { $0 != UInt8(ascii: "\n") })
    }

    @Test("point 12: async forms have their own names, local install included; each does what the blocking form does")
    func asyncNames() async throws {
        let directory = try TemporaryDirectory()
        let (_, package) = try InstallTests.package(directory)
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
        let remote = #expect(throws: SignetError.self) { try PublicKey(contentsOf: URL(string: "https://example.com/key.der")!) }
        #expect(remote?.code == .usage && remote?.reason.contains("not a file URL") == true)

        let key = try PrivateKey(contentsOf: URL(fileURLWithPath: Self.privateKeyPath.string), passphrase: .literal(Passphrase(bytes: try Self.passphrase())))
        let data = Data("release notes\n".utf8)
        let signature = try Signer(key: key).sign(data)
        #expect(try Signer(key: key).sign(data[...]) == signature)   // a slice is DataProtocol too
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
