import Foundation
import SignetTestSupport
import Testing

/// Encrypted packages end to end (FORMAT.md §8): pack --encrypt-to, inspect without a key,
/// unpack with each device's key and refusals for the others, re-sealing, an envelope made by
/// openssl cms, and altered payloads, with DIR as it was after every refusal.
@Suite("Encrypted packages: sealed to devices, installed by each, re-sealed, refused when altered")
struct EncryptionCLITests {
    static let rsaCert = Fixtures.key("rsa2048-cert.pem"), rsaKey = Fixtures.key("rsa2048-pkcs8.pem")
    static let ecCert = Fixtures.key("ec-p256-cert.pem"), ecKey = Fixtures.key("ec-p256-pkcs8.pem")
    static let otherCert = Fixtures.key("other3072-cert.pem"), otherKey = Fixtures.key("other3072-pkcs8.pem")

    static func files() -> [String: Data] {
        [
            "model/weights.bin": CLIHelpers.randomData(100_000), "bin/app": Data("#!/bin/sh\necho licensed\n".utf8),
            "calibration.json": Data("{\"gain\": 3}".utf8)
        ]
    }

    /// Unzipped entry names of a zip (unzip -Z1).
    static func names(_ zip: String) throws -> [String] {
        try run("unzip", ["-Z1", zip]).stdoutText.split(separator: "\n").map(String.init)
    }

    /// An encrypted package's zip rebuilt by Python's zipfile (stored entries, payload first).
    static func rebuild(payload: String, envelope: String, out: String) throws {
        let zipped = try run(
            "python3",
            [
                "-c",
                "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_STORED)\nz.writestr('signet-encrypted/payload', open(sys.argv[2], 'rb').read())\nz.writestr('signet-encrypted/envelope.der', open(sys.argv[3], 'rb').read())\nz.close()",
                out, payload, envelope
            ])
        guard zipped.status == 0 else { throw SupportError(zipped.stderr) }
    }

    @Test("pack --encrypt-to: names hidden, inspect counts the devices, each device's key installs it, any other key or none is exit 3 with DIR untouched")
    func packAndInstall() throws {
        let work = try Workspace()
        let files = Self.files()
        let package = work.directory.file("app.enc.zip")
        try CLIHelpers.pack(work, files, sequence: 5, out: package, extra: ["--encrypt-to", Self.rsaCert, "--encrypt-to", Self.ecCert])
        #expect(try Self.names(package) == ["signet-encrypted/payload", "signet-encrypted/envelope.der"], "only the payload and the envelope are named")
        let raw = try contents(package)
        #expect(raw.range(of: Data("model/weights.bin".utf8)) == nil && raw.range(of: Data("manifest".utf8)) == nil, "no resource name in the clear")

        let described = try CLI.run(["inspect", package])
        #expect(described.status == 0, "\(described.stderr)")
        // Each recipient by its subject key identifier, as openssl reads it from the certificate.
        let ski =
            try run("openssl", ["x509", "-in", Self.ecCert, "-noout", "-ext", "subjectKeyIdentifier"]).stdoutText
            .split(separator: "\n").last.map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: ":", with: "").lowercased() } ?? "?"
        #expect(described.stdoutText.contains("sealed to 2 devices") && described.stdoutText.contains("key id " + ski), "\(ski) \(described.stdoutText)")
        let refusedInspect = try CLI.run(["inspect", package, "--pubkey", work.publicDER])
        #expect(refusedInspect.status == 3, "\(refusedInspect.stderr)")
        let verified = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--decryption-key", Self.ecKey])
        #expect(verified.status == 0 && verified.stdoutText.contains("weights.bin"), "\(verified.stdoutText) \(verified.stderr)")

        for key in [Self.rsaKey, Self.ecKey] {
            let dest = work.directory.file("dest-\(URL(fileURLWithPath: key).lastPathComponent)")
            let installed = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", key])
            #expect(installed.status == 0, "\(key): \(installed.stderr)")
            for (path, data) in files { #expect(try contents(dest + "/" + path) == data, "\(path) is plaintext once installed") }
            #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0, "signatures in xattrs as for any package")
            let beside = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter { $0.contains("decrypted") }
            #expect(beside.isEmpty, "the decrypted copy is gone: \(beside)")
        }
        // Not a recipient, or no key at all: exit 3, nothing written.
        let dest = work.directory.file("refused")
        let other = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", Self.otherKey, "--json"])
        #expect(other.status == 3 && other.stderr.contains(Self.otherKey), "\(other.stderr)")
        #expect(CLIHelpers.errorCode(other) == "not-a-recipient", "\(other.stdoutText)")
        let none = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER])
        #expect(none.status == 3 && none.stderr.contains("--decryption-key") && none.stderr.contains("2 recipients"), "\(none.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest))
    }

    @Test(
        "pack --encrypt-to seals as it writes: many small files, a stored zip (a local header's signature inside a resource), deflated text and a chunked image install byte for byte; unzip -t and Python's zipfile read the encrypted package"
    )
    func shapes() throws {
        let work = try Workspace()
        var files: [String: Data] = [:]
        for index in 0..<300 { files["small/\(index).txt"] = Data(String(repeating: "line \(index)\n", count: index % 7 + 1).utf8) }
        files["inner.zip"] = Data([0x50, 0x4b, 3, 4] + [UInt8](repeating: 9, count: 40_000))
        files["text.txt"] = Data(String(repeating: "compressible text, line after line\n", count: 60_000).utf8)
        files["image.bin"] = CLIHelpers.randomData(6 << 20)
        let package = work.directory.file("app.enc.zip")
        try CLIHelpers.pack(work, files, sequence: 2, out: package, extra: ["--encrypt-to", Self.ecCert])
        #expect(try run("unzip", ["-tq", package]).status == 0)
        let python = try run(
            "python3", ["-c", "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nprint(len(z.infolist()))", package])
        #expect(python.stdoutText.hasPrefix("2"), "\(python.stderr)")
        let dest = work.directory.file("app")
        let installed = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", Self.ecKey])
        #expect(installed.status == 0, "\(installed.stderr)")
        for (path, data) in files { #expect(try contents(dest + "/" + path) == data, "\(path)") }
    }

    @Test("signet encrypt re-seals to other devices with the payload byte for byte; openssl cms opens the envelope and makes one that installs")
    func resealAndOpenSSL() throws {
        let work = try Workspace()
        let files = Self.files()
        let plain = work.directory.file("app.zip"), sealed = work.directory.file("app.enc.zip"), batch = work.directory.file("app.batch.zip")
        try CLIHelpers.pack(work, files, sequence: 3, out: plain)
        let encrypted = try CLI.run(["encrypt", plain, "--to", Self.rsaCert, "--out", sealed])
        #expect(encrypted.status == 0, "\(encrypted.stderr)")
        let resealed = try CLI.run(["encrypt", sealed, "--decryption-key", Self.rsaKey, "--to", Self.otherCert, "--to", Self.ecCert, "--out", batch])
        #expect(resealed.status == 0, "\(resealed.stderr)")
        let payload = try run("unzip", ["-p", sealed, "signet-encrypted/payload"]).stdout
        #expect(try run("unzip", ["-p", batch, "signet-encrypted/payload"]).stdout == payload, "the payload is copied byte for byte")
        #expect(payload.count > 100_000)
        let other = try CLI.run(["unpack", batch, "--dest", work.directory.file("d1"), "--pubkey", work.publicDER, "--decryption-key", Self.otherKey])
        #expect(other.status == 0, "\(other.stderr)")
        let formerDevice = try CLI.run(["unpack", batch, "--dest", work.directory.file("d2"), "--pubkey", work.publicDER, "--decryption-key", Self.rsaKey])
        #expect(formerDevice.status == 3, "the first set's device is not in the new envelope: \(formerDevice.stderr)")

        // openssl cms recovers the sealed document with the device's key...
        let envelope = try work.directory.write("envelope.der", try run("unzip", ["-p", sealed, "signet-encrypted/envelope.der"]).stdout)
        let document = work.directory.file("sealed.json")
        let opened = try run(
            "openssl", ["cms", "-decrypt", "-binary", "-inform", "DER", "-in", envelope, "-recip", Self.rsaCert, "-inkey", Self.rsaKey, "-out", document])
        #expect(opened.status == 0, "\(opened.stderr)")
        let json = try JSONSerialization.jsonObject(with: try contents(document)) as? [String: Any]
        #expect(json?["format"] as? String == "signet-sealed/1" && (json?["key"] as? String)?.count == 44, "\(String(describing: json))")
        // ... and an envelope it makes (CBC, to the EC device) with the same payload installs.
        let theirs = work.directory.file("theirs.der")
        let made = try run("openssl", ["cms", "-encrypt", "-binary", "-outform", "DER", "-aes-256-cbc", "-in", document, "-out", theirs, "-recip", Self.ecCert])
        #expect(made.status == 0, "\(made.stderr)")
        let rebuilt = work.directory.file("rebuilt.zip")
        try Self.rebuild(payload: try work.directory.write("payload", payload), envelope: theirs, out: rebuilt)
        let installed = try CLI.run(["unpack", rebuilt, "--dest", work.directory.file("d3"), "--pubkey", work.publicDER, "--decryption-key", Self.ecKey])
        #expect(installed.status == 0, "\(installed.stderr)")
        for (path, data) in files { #expect(try contents(work.directory.file("d3/" + path)) == data) }
    }

    @Test("an altered payload (a bit flipped, a record cut, records swapped) or envelope is refused before the swap: DIR stays as it was")
    func altered() throws {
        let work = try Workspace()
        let v1 = work.directory.file("v1.zip"), v2 = work.directory.file("v2.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: v1)
        try CLIHelpers.pack(work, Self.files(), sequence: 2, out: v2, extra: ["--encrypt-to", Self.ecCert])
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", v1, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let payload = [UInt8](try run("unzip", ["-p", v2, "signet-encrypted/payload"]).stdout)
        let envelope = try run("unzip", ["-p", v2, "signet-encrypted/envelope.der"]).stdout
        let record = 16_384 + 16
        func rebuilt(_ payload: [UInt8], _ envelope: Data, _ name: String) throws -> String {
            let out = work.directory.file(name)
            try Self.rebuild(
                payload: try work.directory.write(name + ".payload", Data(payload)), envelope: try work.directory.write(name + ".envelope", envelope),
                out: out)
            return out
        }
        var flipped = payload
        flipped[56 + record + 100] ^= 0x04
        let swapped =
            Array(payload[0..<56]) + Array(payload[(56 + record)..<(56 + 2 * record)]) + Array(payload[56..<(56 + record)])
            + Array(payload[(56 + 2 * record)...])
        var badEnvelope = [UInt8](envelope)
        badEnvelope[badEnvelope.count - 30] ^= 0x01
        let cases: [(String, [UInt8], Data)] = [
            ("flipped", flipped, envelope), ("cut", Array(payload.dropLast(10)), envelope), ("swapped", swapped, envelope),
            ("one-record-short", Array(payload.dropLast(payload.count - 56 - 2 * record)), envelope), ("envelope", payload, Data(badEnvelope))
        ]
        for (name, bytes, env) in cases {
            let package = try rebuilt(bytes, env, name + ".zip")
            let result = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", Self.ecKey])
            #expect(result.status == 1, "\(name): \(result.status) \(result.stderr)")
            #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "one\n", "\(name): DIR as it was")
            #expect(!FileManager.default.fileExists(atPath: dest + "/calibration.json"))
        }
        let beside = try FileManager.default.contentsOfDirectory(atPath: work.directory.path).filter { $0.contains("decrypted") }
        #expect(beside.isEmpty, "\(beside)")
        // The same rebuilding, unaltered, installs (what was refused above was the alteration).
        let intact = try CLI.run([
            "unpack", try rebuilt(payload, envelope, "intact.zip"), "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", Self.ecKey
        ])
        #expect(intact.status == 0, "\(intact.stderr)")
        #expect(FileManager.default.fileExists(atPath: dest + "/calibration.json"))
    }

    @Test(
        "a device key on a SoftHSM2 token opens packages sealed with RSA-OAEP and with --rsa-pkcs1 (the key never leaves the token); a token key that is not a recipient, or a wrong PIN, is refused with DIR untouched"
    )
    func tokenKey() throws {
        let token = try SoftToken(label: "device")
        try token.importKey(Self.rsaKey, label: "fleet-key", id: "01", token: "device")
        try token.importKey(Self.otherKey, label: "spare", id: "02", token: "device")
        let work = token.work
        let uri = "pkcs11:token=device;object=fleet-key"
        let module = ["SIGNET_PKCS11_MODULE": token.module]
        let files = Self.files()
        for (name, extra) in [("oaep", [String]()), ("pkcs1", ["--rsa-pkcs1"])] {
            let package = work.directory.file("\(name).zip")
            try CLIHelpers.pack(work, files, sequence: 4, out: package, extra: ["--encrypt-to", Self.ecCert, "--encrypt-to", Self.rsaCert] + extra)
            let dest = work.directory.file("dest-\(name)")
            let installed = try token.signet(
                ["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--decryption-key", uri, "--decryption-passphrase-file", token.pinFile],
                extra: module)
            #expect(installed.status == 0, "\(name): \(installed.stderr)")
            for (path, data) in files { #expect(try contents(dest + "/" + path) == data, "\(name): \(path)") }
            let spare = try token.signet(
                [
                    "unpack", package, "--dest", work.directory.file("spare-\(name)"), "--pubkey", work.publicDER, "--decryption-key",
                    "pkcs11:token=device;object=spare", "--decryption-passphrase-file", token.pinFile
                ], extra: module)
            #expect(spare.status == 3 && spare.stderr.contains("token 'device'"), "\(name): \(spare.stderr)")
            #expect(!FileManager.default.fileExists(atPath: work.directory.file("spare-\(name)")))
        }
        let wrongPIN = try work.directory.write("wrong-pin.txt", Data("0000\n".utf8), mode: 0o600)
        let refused = try token.signet(
            [
                "unpack", work.directory.file("oaep.zip"), "--dest", work.directory.file("never"), "--pubkey", work.publicDER, "--decryption-key", uri,
                "--decryption-passphrase-file", wrongPIN
            ], extra: module)
        #expect(refused.status == 4 && refused.stderr.contains("PIN"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("never")))
    }

    @Test("README's block: pack to a fleet list, inspect, re-seal for a new batch, a device with its key on a token installs and reverifies")
    func readme() throws {
        let token = try SoftToken(label: "device")
        try token.importKey(Self.rsaKey, label: "fleet-key", id: "01", token: "device")
        let work = try TemporaryDirectory()
        let d = work.path
        // Fixture keys, not generated: the signing key, the fleet's device (its key on the
        // token), the publisher's own recipient key, a new batch of one device (EC).
        let setup = """
            set -e
            mkdir -p dist keys devices publisher etc/signet
            printf 'weights' > dist/model.bin
            cp '\(Fixtures.key("rsa2048-pkcs8.pem"))' keys/private_key.pem
            cp '\(Fixtures.key("rsa2048-spki.der"))' keys/public_key.der
            cp '\(Self.rsaCert)' devices/device-1.pem
            cp '\(token.pinFile)' etc/signet/device-pin
            cp '\(Self.otherCert)' publisher/cert.pem
            cat '\(Self.otherKey)' '\(Self.otherCert)' > publisher/key-and-cert.pem
            cp '\(Self.ecCert)' batch-7.pem
            chmod 600 keys/private_key.pem etc/signet/device-pin publisher/key-and-cert.pem
            """
        #expect(try run("bash", ["-c", setup], directory: d).status == 0)
        let text = try ReadmeBlocksTests.block("encryption").replacingOccurrences(of: "/opt/", with: d + "/opt/").replacingOccurrences(
            of: "/etc/signet/", with: d + "/etc/signet/")
        var environment = ReadmeBlocksTests.environment()
        environment["SOFTHSM2_CONF"] = token.configuration
        environment["SIGNET_PKCS11_MODULE"] = token.module
        let ran = try ReadmeBlocksTests.runBlock(text, in: d, environment: environment)
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("sealed to 2 devices"), "\(ran.stdoutText)")
        #expect(try String(contentsOfFile: d + "/opt/app/model.bin", encoding: .utf8) == "weights")
        // The batch's device opens the re-sealed package; the fleet's device does not.
        let batch = try CLI.run([
            "unpack", d + "/app-1.4.2-batch-7.zip", "--dest", d + "/b", "--pubkey", d + "/keys/public_key.der", "--decryption-key", Self.ecKey
        ])
        #expect(batch.status == 0, "\(batch.stderr)")
        let fleet = try CLI.run([
            "unpack", d + "/app-1.4.2-batch-7.zip", "--dest", d + "/c", "--pubkey", d + "/keys/public_key.der", "--decryption-key", Self.rsaKey
        ])
        #expect(fleet.status == 3, "\(fleet.stderr)")
    }
}
