import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
import SignetTestSupport
import SignetCryptoTestSupport

@Suite("keygen output, checked with the openssl CLI")
struct KeyGenerationTests {
    @Test("an encrypted key set that openssl reads, with a codeSigning certificate")
    func encryptedSet() throws {
        let directory = try TemporaryDirectory()
        let passFile = try directory.write("pass.txt", Data("s3cret phrase\n".utf8), mode: 0o600)
        let generated = try GeneratedKey.generate(bits: 2048, commonName: "Test signer")
        let out = directory.file("keys")
        let written = try generated.write(to: out, passphrase: Passphrase("s3cret phrase"))
        #expect(written.encrypted)
        #expect(written.paths == GeneratedKey.fileNames.map { out + "/" + $0 })

        // Permissions: private files 0600, public 0644.
        for (name, mode) in [("private_key.pem", 0o600), ("private_key.p12", 0o600), ("public_key.der", 0o644), ("certificate.der", 0o644)] {
            let attributes = try FileManager.default.attributesOfItem(atPath: out + "/" + name)
            #expect((attributes[.posixPermissions] as? Int) == mode, "\(name)")
        }

        let pem = String(decoding: try contents(out + "/private_key.pem"), as: UTF8.self)
        #expect(pem.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        #expect(try run("openssl", ["pkey", "-in", out + "/private_key.pem", "-passin", "file:" + passFile, "-noout"]).status == 0)
        #expect(try run("openssl", ["pkey", "-in", out + "/private_key.pem", "-passin", "pass:wrong", "-noout"]).status != 0)
        let p12 = try run("openssl", ["pkcs12", "-in", out + "/private_key.p12", "-passin", "file:" + passFile, "-info", "-noout"])
        #expect(p12.status == 0, "\(p12.stderr)")
        #expect(p12.stderr.contains("AES-256-CBC"), "OpenSSL 3 default PKCS#12 encryption: \(p12.stderr)")

        let text = try run("openssl", ["x509", "-inform", "DER", "-in", out + "/certificate.der", "-noout", "-text"]).stdoutText
        #expect(text.contains("Code Signing"))
        #expect(text.contains("CA:FALSE"))
        #expect(text.contains("CN = Test signer"))

        // public_key.der is the certificate's key, and the key id is openssl's SHA-256 of it.
        let certKey = try run("openssl", ["x509", "-inform", "DER", "-in", out + "/certificate.der", "-noout", "-pubkey"]).stdout
        let certKeyDER = try run("openssl", ["pkey", "-pubin", "-outform", "DER"], input: certKey).stdout
        #expect(certKeyDER == (try contents(out + "/public_key.der")))
        let digest = try run("openssl", ["dgst", "-sha256", "-r", out + "/public_key.der"]).stdoutText.prefix(64)
        #expect(generated.privateKey.keyID.hex == String(digest))

        // Signet reads all of it back.
        let source = PassphraseSource.file(passFile)
        #expect(try PrivateKey(contentsOf: out + "/private_key.pem", passphrase: source).keyID == generated.privateKey.keyID)
        let fromP12 = try PrivateKey(contentsOf: out + "/private_key.p12", passphrase: source)
        #expect(fromP12.keyID == generated.privateKey.keyID)
        #expect(fromP12.certificateDER == generated.certificateDER)
        #expect(try PublicKey(contentsOf: out + "/certificate.der").keyID == generated.privateKey.keyID)
    }

    @Test("without a passphrase: plain PKCS#8, and a PKCS#12 Signet opens without asking")
    func unencryptedSet() throws {
        let directory = try TemporaryDirectory()
        let generated = try GeneratedKey.generate(bits: 2048)
        let written = try generated.write(to: directory.path, passphrase: nil)
        #expect(!written.encrypted)
        let pem = String(decoding: try contents(directory.file("private_key.pem")), as: UTF8.self)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(try PrivateKey(contentsOf: directory.file("private_key.p12")).keyID == generated.privateKey.keyID)
        #expect(try run("openssl", ["pkcs12", "-in", directory.file("private_key.p12"), "-passin", "pass:", "-noout"]).status == 0)
    }

    @Test("never overwrites: an existing file stops it before anything is written")
    func refusesOverwrite() throws {
        let directory = try TemporaryDirectory()
        try directory.write("certificate.der", Data("precious".utf8))
        let error = signetError { _ = try GeneratedKey.generate(bits: 2048).write(to: directory.path, passphrase: nil) }
        #expect(error?.code == .fileExists)
        #expect(error?.code.exitStatus.rawValue == 5)
        #expect(error?.reason.contains("certificate.der") == true)
        #expect(try contents(directory.file("certificate.der")) == Data("precious".utf8))
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(names == ["certificate.der"], "nothing else was written: \(names)")
    }

    @Test("bit sizes outside 2048...16384 are refused", arguments: [1024, 2047, 16385])
    func bits(_ bits: Int) {
        #expect(signetError { _ = try GeneratedKey.generate(bits: bits) }?.code == .usage)
    }
}
