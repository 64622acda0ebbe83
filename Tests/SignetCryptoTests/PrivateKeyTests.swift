import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Private keys: every format, detected from content")
struct PrivateKeyTests {
    struct Case: CustomTestStringConvertible, Sendable {
        let file: String
        let format: KeyFormat
        let encrypted: Bool
        var testDescription: String { file }
    }

    static let formats: [Case] = [
        Case(file: "rsa2048-pkcs1.pem", format: .pemPKCS1, encrypted: false),
        Case(file: "rsa2048-pkcs1-encrypted.pem", format: .pemPKCS1Encrypted, encrypted: true),
        Case(file: "rsa2048-pkcs8.pem", format: .pemPKCS8, encrypted: false),
        Case(file: "rsa2048-pkcs8-encrypted.pem", format: .pemPKCS8Encrypted, encrypted: true),
        Case(file: "rsa2048-pkcs8.der", format: .derPKCS8, encrypted: false),
        Case(file: "rsa2048-pkcs8-encrypted.der", format: .derPKCS8Encrypted, encrypted: true),
        Case(file: "rsa2048-pkcs1.der", format: .derPKCS1, encrypted: false),
        Case(file: "rsa2048.p12", format: .pkcs12, encrypted: true),
        Case(file: "rsa2048-legacy.p12", format: .pkcs12Legacy, encrypted: true),
        Case(file: "rsa2048-nopass.p12", format: .pkcs12, encrypted: false)
    ]
    static let encrypted = formats.filter(\.encrypted)

    @Test("loads, with the key id openssl computes", arguments: formats)
    func loads(_ fixture: Case) throws {
        let key = try PrivateKey(contentsOf: Fixtures.key(fixture.file), passphrase: fixture.encrypted ? Fixtures.passphrase : nil)
        #expect(key.format == fixture.format)
        #expect(key.bits == 2048)
        #expect(key.keyID.hex == Fixtures.rsa2048KeyID)
    }

    @Test("format comes from the content, not the file name", arguments: formats)
    func misleadingName(_ fixture: Case) throws {
        let directory = try TemporaryDirectory()
        let copy = try directory.write("key.txt", contents(Fixtures.key(fixture.file)), mode: 0o600)
        let key = try PrivateKey(contentsOf: copy, passphrase: fixture.encrypted ? Fixtures.passphrase : nil)
        #expect(key.format == fixture.format)
    }

    @Test("wrong passphrase is reported as such", arguments: encrypted)
    func wrongPassphrase(_ fixture: Case) {
        let error = signetError {
            _ = try PrivateKey(contentsOf: Fixtures.key(fixture.file), passphrase: .literal(Passphrase("not the passphrase")))
        }
        #expect(error?.code == .wrongPassphrase)
        #expect(error?.reason.contains("wrong passphrase") == true)
        #expect(error?.reason.contains(fixture.file) == true)
        #expect(error?.code.exitStatus.rawValue == 4)
        #expect(OpenSSLErrorQueue.isEmpty)
    }

    @Test("an encrypted key without a passphrase source says how to give one", arguments: encrypted)
    func passphraseRequired(_ fixture: Case) {
        let error = signetError { _ = try PrivateKey(contentsOf: Fixtures.key(fixture.file)) }
        #expect(error?.code == .passphraseRequired)
        #expect(error?.reason.contains("--passphrase-file") == true)
        #expect(error?.code.exitStatus.rawValue == 4)
    }

    @Test("the passphrase is asked for only when needed, and only once")
    func passphraseAskedLazily() throws {
        final class Counter: @unchecked Sendable { var calls = 0 }
        let counter = Counter()
        let source = PassphraseSource(description: "counter") { _ in
            counter.calls += 1
            return Passphrase("correct horse battery staple")
        }
        _ = try PrivateKey(contentsOf: Fixtures.key("rsa2048-pkcs8.pem"), passphrase: source)
        #expect(counter.calls == 0)
        for file in ["rsa2048-pkcs8-encrypted.pem", "rsa2048-pkcs1-encrypted.pem", "rsa2048-pkcs8-encrypted.der", "rsa2048.p12"] {
            counter.calls = 0
            _ = try PrivateKey(contentsOf: Fixtures.key(file), passphrase: source)
            #expect(counter.calls == 1, "\(file)")
        }
    }

    @Test("passphrase from a file (first line) and from the environment")
    func passphraseSources() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("pass", Data("correct horse battery staple\r\nsecond line ignored\n".utf8), mode: 0o600)
        #expect(try PrivateKey(contentsOf: Fixtures.key("rsa2048.p12"), passphrase: .file(file)).format == .pkcs12)
        setenv("SIGNET_TEST_PASSPHRASE", "correct horse battery staple", 1)
        #expect(
            try PrivateKey(contentsOf: Fixtures.key("rsa2048-pkcs8-encrypted.pem"), passphrase: .environment("SIGNET_TEST_PASSPHRASE")).format
                == .pemPKCS8Encrypted)
        let missing = signetError {
            _ = try PrivateKey(contentsOf: Fixtures.key("rsa2048-pkcs8-encrypted.pem"), passphrase: .environment("SIGNET_TEST_UNSET_VARIABLE"))
        }
        #expect(missing?.code == .passphraseRequired)
        #expect(missing?.reason.contains("SIGNET_TEST_UNSET_VARIABLE") == true)
    }

    @Test(
        "non-RSA keys are refused by type",
        arguments: [
            ("ec-p256-pkcs8.pem", "EC"), ("ec-p256-traditional.pem", "EC"), ("ed25519-pkcs8.pem", "Ed25519"), ("dsa-pkcs8.pem", "DSA")
        ])
    func unsupportedType(_ file: String, _ type: String) {
        let error = signetError { _ = try PrivateKey(contentsOf: Fixtures.key(file)) }
        #expect(error?.code == .unsupportedKeyType)
        #expect(error?.reason.contains("unsupported key type: \(type) in private key") == true)
        #expect(error?.reason.contains("(Signet signs with RSA)") == true)
        #expect(error?.code.exitStatus.rawValue == 4)
    }

    @Test("RSA below 2048 bits is refused unless allowed")
    func weakKey() throws {
        let error = signetError { _ = try PrivateKey(contentsOf: Fixtures.key("rsa1024-pkcs8.pem")) }
        #expect(error?.code == .weakKey)
        #expect(error?.reason.contains("1024-bit") == true)
        #expect(error?.reason.contains("--allow-weak-key") == true)
        #expect(try PrivateKey(contentsOf: Fixtures.key("rsa1024-pkcs8.pem"), allowWeakKey: true).bits == 1024)
    }

    @Test(
        "a public key or certificate given as the signing key is named as such",
        arguments: ["rsa2048-spki.der", "rsa2048-spki.pem", "rsa2048-cert.der", "rsa2048-cert.pem", "rsa2048-rsapublickey.pem"])
    func publicGivenAsPrivate(_ file: String) {
        let error = signetError { _ = try PrivateKey(contentsOf: Fixtures.key(file)) }
        #expect(error?.code == .wrongKeyKind)
        #expect(error?.reason.contains("signing needs the private key") == true)
    }

    @Test("bad input: empty, truncated DER, garbage PEM, directory, missing file")
    func badInput() throws {
        let directory = try TemporaryDirectory()
        let empty = try directory.write("empty.pem", Data())
        let der = try contents(Fixtures.key("rsa2048-pkcs8.der"))
        let truncated = try directory.write("truncated.der", der.prefix(der.count / 2))
        let garbage = try directory.write("garbage.pem", Data("-----BEGIN PRIVATE KEY-----\nthis is not base64 at all!!\n-----END PRIVATE KEY-----\n".utf8))
        let truncatedP12 = try directory.write("truncated.p12", try contents(Fixtures.key("rsa2048.p12")).prefix(1000))

        let cases: [(String, SignetError.Code, String, Int32)] = [
            (empty, .malformedKey, "is empty", 4),
            (truncated, .malformedKey, "not in any format Signet reads", 4),
            (truncatedP12, .malformedKey, "not in any format Signet reads", 4),
            (garbage, .malformedKey, "damaged or truncated", 4),
            (directory.path, .malformedInput, "is a directory", 4),
            (directory.file("missing.pem"), .fileNotFound, "no such file", 5)
        ]
        for (path, code, words, exit) in cases {
            let error = signetError { _ = try PrivateKey(contentsOf: path, passphrase: Fixtures.passphrase) }
            #expect(error?.code == code, "\(path)")
            #expect(error?.reason.contains(words) == true, "\(path): \(error?.reason ?? "no error")")
            #expect(error?.reason.contains(path) == true, "the message names the file: \(error?.reason ?? "")")
            #expect(error?.code.exitStatus.rawValue == exit)
            #expect(OpenSSLErrorQueue.isEmpty, "the error queue is drained after \(path)")
        }
    }

    @Test("OpenSSL's error queue is drained into the error")
    func openSSLErrorsCarried() throws {
        let directory = try TemporaryDirectory()
        let garbage = try directory.write("garbage.pem", Data("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n".utf8))
        let error = signetError { _ = try PrivateKey(contentsOf: garbage) }
        #expect(error?.code == .malformedKey)
        #expect(error?.openSSLErrors.isEmpty == false)
        #expect(OpenSSLErrorQueue.isEmpty)
    }

    @Test("a key file others can read gets a warning; a private one does not")
    func permissionWarning() throws {
        let directory = try TemporaryDirectory()
        let pem = try contents(Fixtures.key("rsa2048-pkcs8.pem"))
        let open = try directory.write("open.pem", pem, mode: 0o644)
        let closed = try directory.write("closed.pem", pem, mode: 0o600)
        let warnings = try PrivateKey(contentsOf: open).warnings
        #expect(warnings.count == 1)
        #expect(warnings.first?.contains("chmod 600 '\(open)'") == true)
        #expect(try PrivateKey(contentsOf: closed).warnings.isEmpty)
    }

    @Test("legacy PKCS#12 works through the legacy provider and is flagged")
    func legacyPKCS12() throws {
        let key = try PrivateKey(contentsOf: Fixtures.key("rsa2048-legacy.p12"), passphrase: Fixtures.passphrase)
        #expect(key.format == .pkcs12Legacy)
        #expect(key.warnings.contains { $0.contains("legacy encryption") })
        // The certificate in the file comes along.
        #expect(key.certificateDER == Array(try contents(Fixtures.key("rsa2048-cert.der"))))
    }
}
