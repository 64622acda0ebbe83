import Testing
@testable import SignetCore
@testable import SignetCrypto

@Suite("PKCS#11 URIs (RFC 7512)")
struct PKCS11URITests {
    @Test("attributes, percent-encoding, id bytes, pin-source and module-path")
    func parses() throws {
        let uri = try PKCS11URI(
            "pkcs11:token=My%20Token;object=signing-2026;id=%01%FF;serial=abc;slot-id=7;type=private;x-vendor=1?pin-source=file:///run/pin&module-path=/usr/lib/m.so"
        )
        #expect(uri.token == "My Token")
        #expect(uri.object == "signing-2026")
        #expect(uri.id == [0x01, 0xff])
        #expect(uri.serial == "abc")
        #expect(uri.slotID == 7)
        #expect(uri.pinSource == "/run/pin")
        #expect(uri.modulePath == "/usr/lib/m.so")
        #expect(try PKCS11URI("pkcs11:object=k?pin-source=/etc/pin").pinSource == "/etc/pin")
    }

    @Test(
        "refused: not pkcs11:, unknown or repeated attributes, bad escapes, pin-value, no key named, type other than private",
        arguments: [
            ("file:/k.pem", "pkcs11:"), ("pkcs11:token=a;objcet=k", "objcet"), ("pkcs11:object=a;object=b", "twice"),
            ("pkcs11:object=%4", "percent"), ("pkcs11:object=%zz", "percent"), ("pkcs11:object=k?pin-value=1234", "pin-value"),
            ("pkcs11:token=a", "names no key"), ("pkcs11:object=k;type=cert", "type=cert"), ("pkcs11:object=k;slot-id=x", "slot-id"),
            ("pkcs11:object=k?module-name=softhsm2", "module-path"), ("pkcs11:object=%ff", "UTF-8"), ("pkcs11:object", "without '='")
        ])
    func refused(_ text: String, _ words: String) {
        do {
            _ = try PKCS11URI(text)
            Issue.record("accepted \(text)")
        } catch let error as SignetError {
            #expect(error.code == .usage)
            #expect(error.reason.contains(words), "\(error.reason)")
            #expect(!error.reason.contains("1234"), "a PIN was echoed: \(error.reason)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test("the DigestInfo OpenSSL encodes is RFC 8017's prefix followed by the digest")
    func digestInfo() throws {
        let digest = try Digest.compute(Array("abc".utf8), algorithm: .sha256)
        let prefix: [UInt8] = [0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20]
        #expect(try TokenKey.digestInfo(digest) == prefix + digest.bytes)
        let sha512 = try Digest.compute(Array("abc".utf8), algorithm: .sha512)
        #expect(try TokenKey.digestInfo(sha512).count == 19 + 64)
    }
}
