import Foundation
import SignetCore
import SignetCryptoTestSupport
import SignetTestSupport
import Testing

@testable import SignetCrypto

/// The envelope a package's manifest is sealed in (FORMAT.md §8), against `openssl cms` both
/// ways: RSA-OAEP, RSA PKCS#1 v1.5 and P-256 recipients, AES-256-GCM and AES-256-CBC.
@Suite("CMS envelopes: sealed to many devices, opened by each, openssl cms both ways")
struct CMSEnvelopeTests {
    /// Three devices: RSA-2048, RSA-3072, EC P-256 (key files without their certificates, and
    /// PEM files holding key and certificate).
    struct Device {
        let key: String
        let certificate: String
        let keyType: String
    }
    static let devices = [
        Device(key: Fixtures.key("rsa2048-pkcs8.pem"), certificate: Fixtures.key("rsa2048-cert.pem"), keyType: "RSA"),
        Device(key: Fixtures.key("other3072-pkcs8.pem"), certificate: Fixtures.key("other3072-cert.pem"), keyType: "RSA"),
        Device(key: Fixtures.key("ec-p256-pkcs8.pem"), certificate: Fixtures.key("ec-p256-cert.pem"), keyType: "EC P-256")
    ]
    static let content = Array("{\"manifest\": \"a signed manifest and its signatures\"}".utf8) + [0, 1, 2, 255]

    static func withCertificate(_ device: Device, in work: TemporaryDirectory) throws -> DecryptionKey {
        let both = try contents(device.key) + contents(device.certificate)
        return try DecryptionKey(contentsOf: try work.write(URL(fileURLWithPath: device.key).lastPathComponent + ".both", both))
    }

    @Test("sealed to three devices (GCM and CBC; OAEP and PKCS#1 v1.5): each opens it with or without its certificate; so does openssl cms")
    func sealAndOpen() throws {
        let work = try TemporaryDirectory()
        let certificates = try Self.devices.map { try RecipientCertificate(contentsOf: $0.certificate) }
        #expect(certificates.map(\.keyType) == Self.devices.map(\.keyType))
        for (cipher, padding) in [(CMSEnvelope.Cipher.aes256GCM, CMSEnvelope.RSAPadding.oaep), (.aes256CBC, .pkcs1), (.aes256GCM, .pkcs1)] {
            let envelope = try CMSEnvelope.seal(Self.content, to: certificates, cipher: cipher, rsaPadding: padding)
            let summary = try CMSEnvelope.summary(of: envelope, name: "e")
            #expect(summary.kind == (cipher == .aes256GCM ? "AuthEnvelopedData" : "EnvelopedData"))
            #expect(summary.recipients == certificates.map(\.identifier), "\(summary.recipients)")
            let path = try work.write("envelope-\(cipher.rawValue)-\(padding.rawValue).der", Data(envelope))
            for device in Self.devices {
                #expect(try CMSEnvelope.open(envelope, with: DecryptionKey(contentsOf: device.key), name: "e") == Self.content)
                #expect(try CMSEnvelope.open(envelope, with: Self.withCertificate(device, in: work), name: "e") == Self.content)
                // openssl cms recovers the same bytes with each recipient's key.
                let out = work.file("out")
                let decrypted = try run(
                    "openssl", ["cms", "-decrypt", "-binary", "-inform", "DER", "-in", path, "-recip", device.certificate, "-inkey", device.key, "-out", out])
                #expect(decrypted.status == 0, "\(cipher) \(padding) \(device.key): \(decrypted.stderr)")
                #expect(try [UInt8](contents(out)) == Self.content)
            }
        }
        // RSA-OAEP with RFC 8017's default parameters (absent), the recipient named by its
        // subject key identifier (what openssl cms -cmsout -print shows).
        let oaep = try CMSEnvelope.seal(Self.content, to: [certificates[0]])
        let printed = try run(
            "openssl", ["cms", "-cmsout", "-print", "-inform", "DER", "-in", try work.write("oaep.der", Data(oaep))])
        #expect(printed.stdoutText.contains("rsaesOaep") && !printed.stdoutText.contains("sha256"), "\(printed.stdoutText)")
        #expect(printed.stdoutText.contains("subjectKeyIdentifier"), "\(printed.stdoutText)")
    }

    @Test("envelopes made by openssl cms -encrypt (GCM and CBC; OAEP, PKCS#1 v1.5 and P-256) open")
    func openOpenSSLs() throws {
        let work = try TemporaryDirectory()
        let content = try work.write("content", Data(Self.content))
        for cipher in ["-aes-256-gcm", "-aes-256-cbc"] {
            for oaep in [true, false] {
                var arguments = ["cms", "-encrypt", "-binary", "-outform", "DER", "-in", content, "-out", work.file("e.der"), cipher]
                for device in Self.devices {
                    arguments += ["-recip", device.certificate]
                    if oaep && device.keyType == "RSA" { arguments += ["-keyopt", "rsa_padding_mode:oaep"] }
                }
                let made = try run("openssl", arguments)
                #expect(made.status == 0, "\(arguments): \(made.stderr)")
                let envelope = try [UInt8](contents(work.file("e.der")))
                for device in Self.devices {
                    #expect(try CMSEnvelope.open(envelope, with: DecryptionKey(contentsOf: device.key), name: "e") == Self.content, "\(cipher) \(oaep)")
                    #expect(try CMSEnvelope.open(envelope, with: Self.withCertificate(device, in: work), name: "e") == Self.content)
                }
            }
        }
    }

    @Test("a key that is not a recipient is refused (exit 3, not-a-recipient), named; an altered or oversized envelope is refused")
    func refusals() throws {
        let work = try TemporaryDirectory()
        let envelope = try CMSEnvelope.seal(Self.content, to: [try RecipientCertificate(contentsOf: Self.devices[0].certificate)])
        for device in Self.devices.dropFirst() {
            for key in [try DecryptionKey(contentsOf: device.key), try Self.withCertificate(device, in: work)] {
                let error = signetError { _ = try CMSEnvelope.open(envelope, with: key, name: "e") }
                #expect(error?.code == .notARecipient && error?.code.exitStatus.rawValue == 3, "\(String(describing: error))")
                #expect(error?.reason.contains("1 recipient") == true && error?.reason.contains(key.source) == true, "\(String(describing: error))")
            }
        }
        // A bit flipped in the encrypted content (its last bytes: GCM's tag follows them).
        let owner = try Self.withCertificate(Self.devices[0], in: work)
        var flipped = envelope
        flipped[flipped.count - 40] ^= 0x01
        let altered = signetError { _ = try CMSEnvelope.open(flipped, with: owner, name: "e") }
        #expect(altered != nil && altered?.code.exitStatus.rawValue != 0, "\(String(describing: altered))")
        // Cut short, trailing bytes, not DER, too large: malformed (exit 4) before any decryption.
        for (bytes, what) in [
            (Array(envelope.dropLast(10)), "cut"), (envelope + [0], "trailing"), (Array(repeating: 0x30, count: 100), "junk"),
            ([UInt8](repeating: 0, count: CMSEnvelope.maximumSize + 1), "oversized")
        ] {
            let error = signetError { _ = try CMSEnvelope.open(bytes, with: owner, name: "e") }
            #expect(error?.code == .malformedArchive, "\(what): \(String(describing: error))")
        }
        // Certificates that cannot receive a package.
        #expect(signetError { _ = try RecipientCertificate(contentsOf: Fixtures.key("rsa2048-spki.der")) }?.code == .malformedInput)
    }

    @Test("sizes: 1,000 RSA-3072 recipients add at most 460 KB, a P-256 recipient at most 300 bytes; more than 20,000 are refused when read")
    func sizes() throws {
        let rsa = try RecipientCertificate(contentsOf: Self.devices[1].certificate)
        let ec = try RecipientCertificate(contentsOf: Self.devices[2].certificate)
        let one = try CMSEnvelope.seal(Self.content, to: [rsa]).count
        let thousand = try CMSEnvelope.seal(Self.content, to: Array(repeating: rsa, count: 1_000)).count
        #expect(thousand <= 460_000, "1,000 RSA-3072 recipients: \(thousand) bytes")
        #expect((thousand - one) / 999 <= 460, "\((thousand - one) / 999) bytes per RSA-3072 recipient")
        let ecOne = try CMSEnvelope.seal(Self.content, to: [ec]).count
        let ecHundred = try CMSEnvelope.seal(Self.content, to: Array(repeating: ec, count: 100)).count
        #expect((ecHundred - ecOne) / 99 <= 300, "\((ecHundred - ecOne) / 99) bytes per P-256 recipient")
        // An envelope naming more recipients than a reader takes: refused before any decryption.
        let rsa2048 = try RecipientCertificate(contentsOf: Self.devices[0].certificate)
        let crowded = try CMSEnvelope.seal(
            Self.content, to: Array(repeating: rsa2048, count: CMSEnvelope.maximumRecipients + 1), recipientLimit: .max)
        let key = try DecryptionKey(contentsOf: Self.devices[0].key)
        for error in [
            signetError { _ = try CMSEnvelope.open(crowded, with: key, name: "e") },
            signetError { _ = try CMSEnvelope.summary(of: crowded, name: "e") }
        ] {
            #expect(error?.code == .malformedArchive && error?.reason.contains("20000") == true, "\(String(describing: error))")
        }
    }
}
