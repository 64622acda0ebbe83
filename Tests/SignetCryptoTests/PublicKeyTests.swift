import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("Public keys and key ids")
struct PublicKeyTests {
    @Test(
        "every public format loads with the same key id openssl computes",
        arguments: [
            ("rsa2048-spki.der", KeyFormat.derSPKI), ("rsa2048-spki.pem", .pemSPKI),
            ("rsa2048-rsapublickey.der", .derRSAPublicKey), ("rsa2048-rsapublickey.pem", .pemRSAPublicKey),
            ("rsa2048-cert.der", .derCertificate), ("rsa2048-cert.pem", .pemCertificate)
        ])
    func loads(_ file: String, _ format: KeyFormat) throws {
        let key = try PublicKey(contentsOf: Fixtures.key(file))
        #expect(key.format == format)
        #expect(key.keyID.hex == Fixtures.rsa2048KeyID)
        #expect(key.bits == 2048)
        #expect(key.signatureLength == 256)
        #expect(key.subjectPublicKeyInfo == Array(try contents(Fixtures.key("rsa2048-spki.der"))))
        #expect((key.certificateDER != nil) == file.contains("cert"))
    }

    @Test(
        "a private key given as a trusted key is refused with advice",
        arguments: ["rsa2048-pkcs8.pem", "rsa2048-pkcs1.pem", "rsa2048-pkcs8.der", "rsa2048-pkcs8-encrypted.der", "rsa2048.p12"])
    func privateGivenAsPublic(_ file: String) {
        let error = signetError { _ = try PublicKey(contentsOf: Fixtures.key(file)) }
        #expect(error?.code == .wrongKeyKind)
        #expect(error?.reason.contains("public key or certificate") == true)
    }

    @Test("non-RSA and weak public keys")
    func refusedKeys() throws {
        let ec = signetError { _ = try PublicKey(contentsOf: Fixtures.key("ec-p256-spki.der")) }
        #expect(ec?.code == .unsupportedKeyType)
        #expect(ec?.reason.contains("unsupported key type: EC") == true)
        let weak = signetError { _ = try PublicKey(contentsOf: Fixtures.key("rsa1024-spki.der")) }
        #expect(weak?.code == .weakKey)
        #expect(try PublicKey(contentsOf: Fixtures.key("rsa1024-spki.der"), allowWeakKey: true).bits == 1024)
    }

    @Test("bad input: empty, truncated DER, garbage PEM, directory, missing")
    func badInput() throws {
        let directory = try TemporaryDirectory()
        let der = try contents(Fixtures.key("rsa2048-spki.der"))
        let cases: [(String, SignetError.Code)] = [
            (try directory.write("empty.der", Data()), .malformedKey),
            (try directory.write("short.der", der.prefix(200)), .malformedKey),
            (try directory.write("trailing.der", der + Data([0, 0])), .malformedKey),
            (try directory.write("garbage.pem", Data("-----BEGIN PUBLIC KEY-----\n@@@@\n-----END PUBLIC KEY-----\n".utf8)), .malformedKey),
            (try directory.write("random.bin", Data((0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) })), .malformedKey),
            (directory.path, .malformedInput),
            (directory.file("absent.der"), .fileNotFound)
        ]
        for (path, code) in cases {
            let error = signetError { _ = try PublicKey(contentsOf: path) }
            #expect(error?.code == code, "\(path): \(error?.description ?? "no error")")
            #expect(error?.reason.contains(path) == true)
            #expect(OpenSSLErrorQueue.isEmpty)
        }
    }

    @Test("key ids parse from hex and from sha256// pins, and print back")
    func keyIDForms() throws {
        let key = try PublicKey(contentsOf: Fixtures.key("rsa2048-spki.der"))
        let id = key.keyID
        #expect(id.hex.count == 64)
        #expect(id.short == String(id.hex.prefix(16)))
        #expect(KeyID(id.hex) == id)
        #expect(KeyID(id.hex.uppercased()) == id)
        #expect(KeyID(id.pin) == id)
        #expect(id.pin.hasPrefix("sha256//"))
        // The pin is base64 of the same digest openssl computes.
        let pinDigest = Data(base64Encoded: String(id.pin.dropFirst(8)))!
        #expect(Array(pinDigest).map { String(format: "%02x", $0) }.joined() == Fixtures.rsa2048KeyID)
        for bad in ["", "abc", String(id.hex.dropLast()), id.hex + "00", "sha256//AAAA", "g" + id.hex.dropFirst()] {
            #expect(KeyID(bad) == nil, "\(bad)")
        }
    }
}
