import Foundation
import Signet // not @testable: the README example must work with the public API alone
import SignetTestSupport
import SignetCryptoTestSupport
import Testing

@Suite("README library example")
struct ReadmeExampleTests {
    @Test("the README example compiles against the public API and behaves as it says")
    func example() throws {
        let directory = try TemporaryDirectory()
        let release = try directory.writeRandom("release.tar", count: 20_000)
        setenv("SIGNET_PASSPHRASE", "correct horse battery staple", 1)

        // As in README.md, with paths from the fixtures.
        let key = try PrivateKey(
            contentsOf: Fixtures.key("rsa2048.p12"),
            passphrase: .environment("SIGNET_PASSPHRASE"))
        let signature = try Signer(key: key).sign(fileAt: release)
        try SignatureFiles.write([signature], to: [release + ".sig"])

        let verifier = Verifier(policy: try TrustPolicy(publicKeyFiles: [Fixtures.key("rsa2048-spki.der")]))
        let result = try verifier.verify(signature: try SignatureFiles.read(release + ".sig"), fileAt: release)
        #expect(result.isValid)
        #expect(result.signer?.keyID.short == String(Fixtures.rsa2048KeyID.prefix(16)))

        try directory.write("release.tar", Data("tampered".utf8))
        let tampered = try verifier.verify(signature: try SignatureFiles.read(release + ".sig"), fileAt: release)
        #expect(!tampered.isValid)
        #expect(tampered.failure == .badSignature)
    }
}
