import Foundation
import Testing
import SignetTestSupport

@Suite("Bad input: documented exit codes and messages that name the problem")
struct BadInputCLITests {
    struct Case: CustomTestStringConvertible, Sendable {
        let name: String
        let exit: Int32
        let words: [String]
        var testDescription: String { name }
    }

    /// Builds each broken key in a workspace and signs a file with it.
    static let keyCases: [Case] = [
        Case(name: "empty key file", exit: 4, words: ["empty.pem", "is empty"]),
        Case(name: "truncated DER key", exit: 4, words: ["truncated.der", "truncated"]),
        Case(name: "garbage PEM key", exit: 4, words: ["garbage.pem", "damaged or truncated"]),
        Case(name: "directory as key", exit: 4, words: ["is a directory"]),
        Case(name: "missing key file", exit: 5, words: ["absent.pem", "no such file"]),
        Case(name: "wrong passphrase", exit: 4, words: ["wrong passphrase", "private_key.pem"]),
        Case(name: "encrypted key, no passphrase, no terminal", exit: 4, words: ["is encrypted", "--passphrase-file"]),
        Case(name: "EC key", exit: 4, words: ["unsupported key type: EC", "(Signet signs with RSA)"]),
        Case(name: "Ed25519 key", exit: 4, words: ["unsupported key type: Ed25519", "(Signet signs with RSA)"]),
        Case(name: "1024-bit key", exit: 4, words: ["1024-bit", "below 2048 bits", "--allow-weak-key"]),
        Case(name: "public key as signing key", exit: 4, words: ["public_key.der", "signing needs the private key"])
    ]

    static let ecOptions = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    static let rsa1024Options = ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"]

    @Test("sign refuses bad keys", arguments: keyCases)
    func badKey(_ test: Case) throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 100)
        var arguments = ["sign", file, "--passphrase-file", work.passFile]
        switch test.name {
        case "empty key file": arguments += ["--key", try work.directory.write("empty.pem", Data(), mode: 0o600)]
        case "truncated DER key":
            try work.openssl(["pkcs8", "-topk8", "-nocrypt", "-in", work.privatePEM, "-passin", "file:" + work.passFile, "-outform", "DER", "-out", "full.der"])
            arguments += ["--key", try work.directory.write("truncated.der", try contents(work.directory.file("full.der")).prefix(700), mode: 0o600)]
        case "garbage PEM key":
            arguments += [
                "--key",
                try work.directory.write("garbage.pem", Data("-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n".utf8), mode: 0o600)
            ]
        case "directory as key": arguments += ["--key", work.keys]
        case "missing key file": arguments += ["--key", work.directory.file("absent.pem")]
        case "wrong passphrase":
            arguments = ["sign", file, "--key", work.privatePEM, "--passphrase-file", try work.directory.write("wrong.txt", Data("nope\n".utf8), mode: 0o600)]
        case "encrypted key, no passphrase, no terminal": arguments = ["sign", file, "--key", work.privatePEM]
        case "EC key": arguments += ["--key", try work.opensslKeyPair("ec", Self.ecOptions).privateKey]
        case "Ed25519 key": arguments += ["--key", try work.opensslKeyPair("ed", ["-algorithm", "ED25519"]).privateKey]
        case "1024-bit key": arguments += ["--key", try work.opensslKeyPair("weak", Self.rsa1024Options).privateKey]
        case "public key as signing key": arguments += ["--key", work.publicDER]
        default: Issue.record("unknown case \(test.name)")
        }
        let result = try CLI.run(arguments)
        #expect(result.status == test.exit, "\(test.name): \(result.stderr)")
        for word in test.words {
            #expect(result.stderr.contains(word), "\(test.name): stderr lacks '\(word)': \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: file + ".sig"), "nothing is written on failure")
        // The same failure as a JSON document on stdout.
        let json = try CLI.run(arguments + ["--json"])
        let error = try #require(try json.json()["error"] as? [String: Any])
        #expect(error["exit"] as? Int == Int(test.exit))
        #expect((error["message"] as? String)?.isEmpty == false)
        if test.name == "missing key file" {
            // A system failure names the call that failed and the errno it set (ENOENT).
            #expect(error["call"] as? String == "open", "\(error)")
            #expect(error["errno"] as? Int == 2, "\(error)")
        } else if test.exit != 5 {
            #expect(error["call"] is NSNull, "only system failures name a call; the field is null otherwise: \(error)")
            #expect(Set(error.keys) == ["code", "exit", "message", "file", "entry", "openssl", "call", "errno"], "every field present: \(error)")
        }
    }

    @Test("--allow-weak-key lets a 1024-bit key sign and verify")
    func allowWeakKey() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 100)
        let weak = try work.opensslKeyPair("weak", Self.rsa1024Options)
        #expect(try CLI.run(["sign", file, "--key", weak.privateKey, "--allow-weak-key"]).status == 0)
        let refused = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", weak.publicDER])
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("--allow-weak-key"))
        #expect(try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", weak.publicDER, "--allow-weak-key"]).status == 0)
    }

    @Test("files to sign: empty is fine, a directory or a missing file is not")
    func badFiles() throws {
        let work = try Workspace()
        let empty = try work.directory.write("empty.bin", Data())
        let signed = try CLI.run(["sign", empty, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(signed.status == 0, "an empty file has a signature like any other: \(signed.stderr)")
        try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", "empty.openssl.sig", empty])
        #expect(try contents(empty + ".sig") == contents(work.directory.file("empty.openssl.sig")))

        let directory = try CLI.run(["sign", work.keys, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(directory.status == 4)
        #expect(directory.stderr.contains("is a directory"))
        let missing = try CLI.run(["verify", work.directory.file("nope.bin"), "--signature", empty + ".sig", "--pubkey", work.publicDER])
        #expect(missing.status == 5)
        #expect(missing.stderr.contains("nope.bin"))
    }

    @Test("signatures with 2 extra bytes or 1 byte short are invalid (openssl dgst -verify is not this strict)")
    func signatureLength() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 1000)
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let good = try contents(file + ".sig")
        #expect(good.count == 256)
        for (name, bytes, length) in [("long.sig", good + Data([0, 0]), 258), ("short.sig", good.dropLast(), 255)] {
            let sig = try work.directory.write(name, bytes)
            let result = try CLI.run(["verify", file, "--signature", sig, "--pubkey", work.publicDER])
            #expect(result.status == 1, "\(name)")
            #expect(result.stderr.contains("\(length) bytes"), "\(result.stderr)")
            #expect(result.stderr.contains("exactly 256 bytes"))
            let json = try CLI.run(["verify", file, "--signature", sig, "--pubkey", work.publicDER, "--json"])
            #expect((try json.json()["error"] as? [String: Any])?["code"] as? String == "wrong-signature-length")
        }
        let empty = try CLI.run(["verify", file, "--signature", try work.directory.write("empty.sig", Data()), "--pubkey", work.publicDER])
        #expect(empty.status == 1)
    }

    @Test("bad trusted keys: a private key, an EC key, garbage")
    func badPublicKeys() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 10)
        let ec = try work.opensslKeyPair("ec", Self.ecOptions)
        let garbage = try work.directory.write("garbage.der", Data(repeating: 0x30, count: 50))
        for (key, words) in [(work.privatePEM, "is a private key"), (ec.publicDER, "unsupported key type: EC"), (garbage, "garbage.der")] {
            let result = try CLI.run(["verify", file, "--signature", file, "--pubkey", key])
            #expect(result.status == 4, "\(key): \(result.stderr)")
            #expect(result.stderr.contains(words), "\(result.stderr)")
        }
    }

    @Test(
        "usage errors exit 2, also as JSON",
        arguments: [
            ["sign"],
            ["sign", "x.bin"],
            ["sign", "a", "b", "--key", "k", "--out", "s"],
            ["sign", "a", "--key", "k", "--passphrase-file", "f", "--passphrase-env", "V"],
            ["sign", "a", "--key", "k", "--passphrase-env", "V=secret"],
            ["sign", "a", "--key", "k", "--algorithm", "rsa-md5"],
            ["sign", "a", "--key", "k", "--passphrase", "secret"],
            ["verify", "a", "--signature", "s"],
            ["keygen", "--out", "d", "--bits", "1024"],
            ["frobnicate"]
        ])
    func usage(_ arguments: [String]) throws {
        let result = try CLI.run(arguments)
        #expect(result.status == 2, "\(arguments): \(result.stderr)")
        #expect(!result.stderr.isEmpty)
        let json = try CLI.run(arguments + ["--json"])
        #expect(json.status == 2)
        let error = try #require(try json.json()["error"] as? [String: Any], "\(arguments): \(json.stdoutText)")
        #expect(error["code"] as? String == "usage")
        #expect(error["exit"] as? Int == 2)
    }

    @Test("legacy PKCS#12: signs through the legacy provider, and says clearly when it is not installed")
    func legacyProvider() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 10)
        try work.openssl(["x509", "-inform", "DER", "-in", work.certificate, "-out", "cert.pem"])
        try work.openssl(
            [
                "pkcs12", "-export", "-legacy", "-inkey", work.privatePEM, "-passin", "file:" + work.passFile,
                "-in", "cert.pem", "-passout", "env:P", "-out", "legacy.p12"
            ], environment: ["P": work.passphrase])
        let legacy = work.directory.file("legacy.p12")
        chmod(legacy, 0o600)
        let signed = try CLI.run(["sign", file, "--key", legacy, "--passphrase-file", work.passFile])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stderr.contains("legacy encryption"), "a legacy file is flagged: \(signed.stderr)")
        // OpenSSL looks for providers in $OPENSSL_MODULES: an empty directory is a machine without legacy.so.
        let empty = work.directory.file("no-modules")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
        let missing = try CLI.run(
            ["sign", file, "--key", legacy, "--passphrase-file", work.passFile, "--out", work.directory.file("x.sig")],
            environment: ["OPENSSL_MODULES": empty])
        #expect(missing.status == 4, "\(missing.stderr)")
        #expect(missing.stderr.contains("legacy provider"))
        #expect(missing.stderr.contains("not installed"))
        // A modern PKCS#12 does not need it.
        #expect(
            try CLI.run(
                ["sign", file, "--key", work.privateP12, "--passphrase-file", work.passFile, "--out", work.directory.file("y.sig")],
                environment: ["OPENSSL_MODULES": empty]
            ).status == 0)
    }

    @Test("a key file others can read gets a warning; a 0600 one does not")
    func permissionWarning() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 10)
        let quiet = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(quiet.status == 0)
        #expect(!quiet.stderr.contains("warning"), "\(quiet.stderr)")
        chmod(work.privatePEM, 0o644)
        let warned = try CLI.run(["sign", file, "--force", "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(warned.status == 0)
        #expect(warned.stderr.contains("warning: private key '\(work.privatePEM)' can be read by group or others"))
        #expect(warned.stderr.contains("chmod 600"))
    }

    @Test("control characters in file names are escaped on every human-readable line")
    func controlCharactersEscaped() throws {
        let work = try Workspace()
        let evil = "evil\u{1b}[2J\rfake ok\n\u{202e}txt.exe"
        let file = try work.directory.write(evil, Data("x\n".utf8))
        func isClean(_ text: String) -> Bool {
            !text.unicodeScalars.contains { $0.value == 0x1b || $0.value == 0x0d || $0.value == 0x202e }
        }
        let sign = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(sign.status == 0, "\(sign.stderr)")
        #expect(isClean(sign.stdoutText) && sign.stdoutText.contains("evil\\x1b[2J\\rfake ok\\n\\u{202e}txt.exe"), "\(sign.stdoutText.debugDescription)")
        #expect(sign.stdoutText.split(separator: "\n").count == 1, "one file, one line")
        let verify = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", work.publicDER])
        #expect(verify.status == 0 && isClean(verify.stdoutText), "\(verify.stdoutText.debugDescription)")
        let missing = try CLI.run(["verify", file + "-gone", "--signature", file + ".sig", "--pubkey", work.publicDER])
        #expect(missing.status == 5 && isClean(missing.stderr), "\(missing.stderr.debugDescription)")
        let single = try CLI.run(["reverify", file, "--pubkey", work.publicDER])
        #expect(single.status == 1 && isClean(single.stdoutText), "\(single.stdoutText.debugDescription)")

        // A file added to an installed tree under such a name.
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, out: package)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        _ = try work.directory.write("app/" + evil, Data("added\n".utf8))
        let tree = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(tree.status == 1)
        #expect(isClean(tree.stdoutText) && tree.stdoutText.contains("added"), "\(tree.stdoutText.debugDescription)")
        let json = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"])
        let files = ((try json.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]]) ?? []
        #expect(files.contains { $0["path"] as? String == evil }, "JSON keeps the real name (escaped by JSON itself)")
    }

    @Test("numbers at the extremes from the command line never trap")
    func extremeNumbers() throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try TrustCLITests.pack(work, extra: ["--expires", "9999-12-31T23:59:59Z"], out: package)
        for skew in ["86400", "0"] {
            let inspect = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--clock-skew", skew])
            #expect(inspect.status == 0, "--clock-skew \(skew): \(inspect.status) \(inspect.stderr)")
        }
        // Issue 37: a skew beyond a day would switch expiry off: refused, never wrapped.
        let beyond = try CLI.run(["inspect", package, "--pubkey", work.publicDER, "--clock-skew", "9223372036854775807"])
        #expect(beyond.status == 2 && beyond.stderr.contains("at most 86400"), "\(beyond.status) \(beyond.stderr)")
        let huge = try CLI.run([
            "inspect", package, "--pubkey", work.publicDER, "--max-total-size", "18446744073709551615", "--max-files", "9223372036854775807"
        ])
        #expect(huge.status == 0, "\(huge.status) \(huge.stderr)")
        let epoch = try CLI.run(
            [
                "pack", work.directory.file("src"), "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "e",
                "--version", "1", "--out", work.directory.file("e.zip")
            ], environment: ["SOURCE_DATE_EPOCH": "99999999999999"])
        #expect(epoch.status == 2 && epoch.stderr.contains("SOURCE_DATE_EPOCH"), "\(epoch.status) \(epoch.stderr)")
    }

}
