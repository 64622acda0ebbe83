import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A salt or seal key demands a seal, a binary salt is used whole, Unicode twins of sealed
/// names are caught, and a secret given where its source belongs is never repeated.
@Suite("Seals, salts and secrets: protections an absent file cannot switch off")
struct SealsAndSecretsCLITests {
    @Test("a salt or seal key demands a seal: deleting or replacing the seal does not disable it")
    func sealRequired() throws {
        let work = try Workspace(), attacker = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let attackerPackage = attacker.directory.file("evil.zip")
        try TrustCLITests.pack(attacker, out: attackerPackage)
        let salt = try work.directory.write("salt", Data("device secret\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", salt]).status == 0)

        // The attacker adds their key and deletes the seal.
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: trust + "/added.der")
        try FileManager.default.removeItem(atPath: trust + "/.signet-trust")
        let deleted = try CLI.run(["unpack", attackerPackage, "--dest", work.directory.file("app"), "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(deleted.status == 3, "\(deleted.stderr)")
        #expect((try deleted.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        #expect(deleted.stderr.contains("has no seal"))
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("app")))

        // Or writes a new seal of their own, without the salt they do not know.
        #expect(try CLI.run(["trust", "seal", trust]).status == 0)
        let unsalted = try CLI.run(["inspect", attackerPackage, "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(unsalted.status == 3, "\(unsalted.stderr)")
        #expect(unsalted.stderr.contains("without a salt"))

        // The same with a seal key: the seal must be there.
        let sealer = try Workspace()
        try FileManager.default.removeItem(atPath: trust + "/.signet-trust")
        let noSeal = try CLI.run(["inspect", attackerPackage, "--trust-dir", trust, "--trust-seal-key", sealer.publicDER])
        #expect(noSeal.status == 3)
        #expect(noSeal.stderr.contains("--trust-seal-key requires one"))

        // An empty salt protects nothing: refused on both sides (exit 4).
        let empty = try work.directory.write("empty-salt", Data("\n".utf8), mode: 0o600)
        let sealEmpty = try CLI.run(["trust", "seal", trust, "--salt-file", empty, "--json"])
        #expect(sealEmpty.status == 4, "\(sealEmpty.stderr)")
        #expect((try sealEmpty.json()["error"] as? [String: Any])?["code"] as? String == "empty-passphrase")
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", empty]).status == 4)
    }

    /// README's device walk-through makes its salt with `head -c 32 /dev/urandom`: one time in
    /// 256 that starts with a newline, and most such salts hold one. Every byte must count.
    @Test("a binary salt is used whole: a leading or inner newline neither empties nor shortens it")
    func binarySalt() throws {
        let work = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let random = try randomBytes(32)
        let salt = [0x0A] + random.prefix(10) + [0x0D, 0x0A] + random.suffix(20)
        let saltFile = try work.directory.write("salt", Data(salt), mode: 0o600)
        let sealed = try CLI.run(["trust", "seal", trust, "--salt-file", saltFile])
        #expect(sealed.status == 0, "a salt that starts with a newline is not empty: \(sealed.stderr)")
        #expect(try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", saltFile]).status == 0)
        // A salt that differs only after the first newline is another salt.
        var other = salt
        other[other.count - 1] ^= 0x01
        let otherFile = try work.directory.write("other-salt", Data(other), mode: 0o600)
        let wrong = try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", otherFile, "--json"])
        #expect(wrong.status == 3, "\(wrong.stderr)")
        #expect((try wrong.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        // A text salt salts the same with or without its final line ending.
        let text = try work.directory.write("text-salt", Data("device secret\n".utf8), mode: 0o600)
        let bare = try work.directory.write("bare-salt", Data("device secret".utf8), mode: 0o600)
        let crlf = try work.directory.write("crlf-salt", Data("device secret\r\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", text]).status == 0)
        for file in [text, bare, crlf] {
            let result = try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", file])
            #expect(result.status == 0, "\(file): \(result.stderr)")
        }
        let twoLines = try work.directory.write("two-lines", Data("device secret\nmore\n".utf8), mode: 0o600)
        #expect(
            try CLI.run(["inspect", package, "--trust-dir", trust, "--trust-salt-file", twoLines]).status == 3,
            "a second line is part of the salt")
    }

    @Test("a passphrase source that is given but empty is exit 4, and nothing is written")
    func emptyPassphrase() throws {
        let directory = try TemporaryDirectory()
        let empty = try directory.write("empty.txt", Data(), mode: 0o600)
        let blankLine = try directory.write("blank.txt", Data("\nsecond line\n".utf8), mode: 0o600)
        for (options, environment) in [
            (["--passphrase-file", empty], [String: String?]()), (["--passphrase-file", blankLine], [:]),
            (["--passphrase-env", "SIGNET_EMPTY"], ["SIGNET_EMPTY": ""])
        ] {
            let out = directory.file("keys-\(options[1].count)")
            let result = try CLI.run(["keygen", "--out", out, "--bits", "2048", "--json"] + options, environment: environment)
            #expect(result.status == 4, "\(options): \(result.status) \(result.stderr)")
            #expect((try result.json()["error"] as? [String: Any])?["code"] as? String == "empty-passphrase")
            #expect(!FileManager.default.fileExists(atPath: out + "/private_key.pem"))
        }
        let days = try CLI.run(["keygen", "--out", directory.file("k"), "--days", "9223372036854775807"])
        #expect(days.status == 2, "an absurd validity is a usage error, not a trap: \(days.status) \(days.stderr)")
    }

    // MARK: Point 8: sealed names compared as bytes

    @Test("a sealed trust directory: a key added under the KELVIN SIGN twin of a sealed name is caught (exit 3)")
    func sealTwins() throws {
        let work = try Workspace(), attacker = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/Key.der")
        let salt = try work.directory.write("salt", Data("device secret\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        let evil = attacker.directory.file("evil.zip")
        try TrustCLITests.pack(attacker, out: evil)
        // The attacker's key under "\u{212A}ey.der": canonically equal to "Key.der", another file.
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: trust + "/\u{212A}ey.der")
        #expect(try FileManager.default.contentsOfDirectory(atPath: trust).filter { $0.hasSuffix(".der") }.count == 2)
        let dest = work.directory.file("app")
        let refused = try CLI.run(["unpack", evil, "--dest", dest, "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect((try? refused.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        #expect(refused.stderr.contains("was added"), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest))
        // inspect reads the trust directory the same way.
        let inspect = try CLI.run(["inspect", evil, "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(inspect.status == 3, "\(inspect.stderr)")
    }

    // MARK: Point 2: secrets never echoed

    @Test("a secret given where its source belongs is never repeated: --passphrase-env, --passphrase-file, PKCS#11 URIs, salt files")
    func secretsNeverEchoed() throws {
        let work = try Workspace()
        let file = try work.directory.write("f.txt", Data("payload\n".utf8))
        let secret = "correct horse battery staple"
        let pin = "918273645"
        let runs: [[String]] = [
            ["sign", file, "--key", work.privatePEM, "--passphrase-env", secret],
            ["sign", file, "--key", work.privatePEM, "--passphrase-env", secret, "--json"],
            ["sign", file, "--key", work.privatePEM, "--passphrase-file", secret],
            ["sign", file, "--key", work.privatePEM, "--passphrase-file", secret, "--json"],
            ["keygen", "--out", work.directory.file("k2"), "--passphrase-env", secret],
            ["sign", file, "--key", "pkcs11:token=release;object=k;pin-value=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-value=\(pin)", "--json"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;x-unknown=\(pin);bogus=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-source=file:/nonexistent/\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k?pin-source=\(pin)&bogus=\(pin)"],
            ["sign", file, "--key", "pkcs11:token=release;object=k;pin-source=\(pin)"],
            ["trust", "seal", work.directory.path, "--salt-file", secret],
            ["inspect", file, "--pubkey", work.publicDER, "--trust-salt-file", secret]
        ]
        for arguments in runs {
            let result = try CLI.run(arguments, environment: ["SIGNET_PKCS11_MODULE": "/nonexistent/module.so"])
            #expect(result.status != 0, "\(arguments)")
            let output = result.stdoutText + result.stderr
            #expect(!output.contains(secret) && !output.contains(pin), "\(arguments): \(output)")
        }
        // The refusal says what to do.
        let named = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-env", secret])
        #expect(named.status == 2 && named.stderr.contains("not a valid variable name"), "\(named.stderr)")
        let missing = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", secret, "--json"])
        #expect(missing.status == 5 && missing.stderr.contains("does not exist"), "\(missing.stderr)")
    }

    @Test("point 1: a mistyped --trust-dir with --trust-salt-file is a wrong path (exit 5), not a broken seal")
    func mistypedTrustDirectoryWithSalt() throws {
        let work = try Workspace()
        let package = try CLIHelpers.package(work)
        let salt = try work.directory.write("salt", Data(repeating: 7, count: 32), mode: 0o600)
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
        #expect(try CLI.run(["trust", "seal", trust, "--salt-file", salt]).status == 0)
        let installed = try CLI.run(["unpack", package, "--dest", work.directory.file("app"), "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(installed.status == 0, "\(installed.stderr)")

        let typo = try CLI.run(["unpack", package, "--dest", work.directory.file("app2"), "--trust-dir", trust + "s", "--trust-salt-file", salt])
        #expect(typo.status == 5, "\(typo.stderr)")
        #expect(typo.stderr.contains("no such file; check the path") && typo.stderr.contains(trust + "s"), "\(typo.stderr)")
        #expect(!typo.stderr.contains("seal"), "a typo is not tampering: \(typo.stderr)")
        // A real directory that lost its seal is still refused as a broken seal (exit 3).
        try FileManager.default.removeItem(atPath: trust + "/.signet-trust")
        let unsealed = try CLI.run(["unpack", package, "--dest", work.directory.file("app3"), "--trust-dir", trust, "--trust-salt-file", salt])
        #expect(unsealed.status == 3 && unsealed.stderr.contains("no seal"), "\(unsealed.stderr)")
    }

    @Test("point 4: an unknown option is said first, and a secret given to it is never repeated")
    func unknownOptionFirst() throws {
        let work = try Workspace()
        let file = try work.directory.write("app.tar", Data("bytes\n".utf8))
        let secret = "correct horse 4711"
        let cases: [[String]] = [
            ["sign", file, "--key", work.privatePEM, "--passphrase", secret, "--out", work.directory.file("x.sig")],
            ["sign", "--passphrase", secret, file, "--key", work.privatePEM],
            ["sign", file, "--key", work.privatePEM, "--passphrase=" + secret, "--out", work.directory.file("x.sig")],
            ["verify", file, "--password", secret, "--pubkey", work.publicDER],
            ["pack", work.path, "--key", work.privatePEM, "--pin-value", secret, "--name", "a", "--version", "1"]
        ]
        for arguments in cases {
            for json in [false, true] {
                let result = try CLI.run(arguments + (json ? ["--json"] : []))
                #expect(result.status == 2, "\(arguments): \(result.stderr)")
                let said = result.stderr + result.stdoutText
                #expect(said.contains("unknown option '--"), "\(arguments): \(said)")
                #expect(said.contains("--passphrase-file"), "\(arguments): \(said)")
                #expect(!said.contains(secret), "\(arguments): the secret is repeated: \(said)")
            }
        }
        // A mistyped option with a value: named, with the option it meant.
        let typo = try CLI.run(["sign", file, "--key", work.privatePEM, "--pasphrase-file", work.passFile, "--out", work.directory.file("x.sig")])
        #expect(typo.status == 2 && typo.stderr.contains("unknown option '--pasphrase-file'; did you mean --passphrase-file"), "\(typo.stderr)")
        // The rule itself still holds when every option is known.
        let rule = try CLI.run(["sign", file, file, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--out", work.directory.file("x.sig")])
        #expect(rule.status == 2 && rule.stderr.contains("--out names one signature file"), "\(rule.stderr)")
    }

}
