import Foundation
import Testing
import SignetTestSupport

/// A SoftHSM2 token made for one test in a temporary directory (its own SOFTHSM2_CONF), with
/// keys imported from openssl-made PEM files, so signatures can be compared byte for byte.
final class SoftToken {
    let work: Workspace
    let module = "/usr/lib/softhsm/libsofthsm2.so"
    let pin = "1234"
    var configuration: String { work.directory.file("softhsm2.conf") }
    var pinFile: String { work.directory.file("pin.txt") }
    var environment: [String: String?] { ["SOFTHSM2_CONF": configuration, "SIGNET_PKCS11_MODULE": nil] }

    init(label: String = "release") throws {
        guard FileManager.default.fileExists(atPath: module) else {
            throw SupportError("SoftHSM2 is not installed (\(module)); scripts/install-deps.sh installs softhsm2")
        }
        work = try Workspace()
        let tokens = work.directory.file("tokens")
        try FileManager.default.createDirectory(atPath: tokens, withIntermediateDirectories: true)
        _ = try work.directory.write("softhsm2.conf", Data("directories.tokendir = \(tokens)\nobjectstore.backend = file\nlog.level = ERROR\n".utf8))
        _ = try work.directory.write("pin.txt", Data((pin + "\n").utf8), mode: 0o600)
        try util(["--init-token", "--free", "--label", label, "--so-pin", "5678", "--pin", pin])
    }

    /// softhsm2-util with this token's configuration; fails loudly.
    @discardableResult
    func util(_ arguments: [String]) throws -> ProcessResult {
        let result = try SignetTestSupport.run("softhsm2-util", arguments, environment: environment)
        guard result.status == 0 else { throw SupportError("softhsm2-util \(arguments) failed: \(result.stderr) \(result.stdoutText)") }
        return result
    }

    /// Imports a PEM private key made by openssl under `label` and `id` (hex).
    func importKey(_ pem: String, label: String, id: String, token: String = "release") throws {
        try util(["--import", pem, "--token", token, "--label", label, "--id", id, "--pin", pin])
    }

    /// Makes a key pair with `openssl genpkey OPTIONS` and imports the private key under
    /// `label` and `id`; returns the PEM and the DER public key openssl wrote.
    @discardableResult
    func makeKey(_ name: String, _ options: [String], label: String, id: String) throws -> (pem: String, der: String) {
        let (pem, der) = try work.opensslKeyPair(name, options)
        try importKey(pem, label: label, id: id)
        return (pem, der)
    }

    /// Runs signet with this token's configuration.
    func signet(_ arguments: [String], extra: [String: String?] = [:]) throws -> ProcessResult {
        try CLI.run(arguments, environment: environment.merging(extra) { $1 }, directory: work.path)
    }
}

@Suite("Keys on a PKCS#11 token (SoftHSM2)")
struct TokenCLITests {
    static let uri = "pkcs11:token=release;object=signing-2026"

    @Test(
        "token signatures are byte-identical to openssl dgst -sign with the same key; PSS verifies with openssl",
        arguments: [
            "rsa-pkcs1v15-sha256", "rsa-pkcs1v15-sha384", "rsa-pkcs1v15-sha512", "rsa-pss-sha256"
        ])
    func byteIdentical(_ algorithm: String) throws {
        let token = try SoftToken()
        let (pem, der) = try token.makeKey("tokenkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], label: "signing-2026", id: "01")
        let file = try token.work.directory.writeRandom("data.bin", count: 300_000)
        let signed = try token.signet([
            "sign", file, "--key", Self.uri, "--pkcs11-module", token.module,
            "--passphrase-file", token.pinFile, "--algorithm", algorithm
        ])
        #expect(signed.status == 0, "\(signed.stderr)")
        if algorithm.hasPrefix("rsa-pss") {
            let pub = token.work.directory.file("tokenkey.pub.pem")
            try token.work.openssl(["pkey", "-pubin", "-inform", "DER", "-in", der, "-out", pub])
            let verified = try token.work.openssl(["dgst"] + opensslDigestArguments(algorithm) + ["-verify", pub, "-signature", file + ".sig", file])
            #expect(verified.stdoutText.contains("Verified OK"))
        } else {
            let reference = token.work.directory.file("reference.sig")
            try token.work.openssl(["dgst"] + opensslDigestArguments(algorithm) + ["-sign", pem, "-out", reference, file])
            #expect(try contents(file + ".sig") == contents(reference))
        }
        // And Signet's own verify accepts it with the public key openssl wrote.
        let verify = try token.signet(["verify", file, "--signature", file + ".sig", "--pubkey", der, "--algorithm", algorithm])
        #expect(verify.status == 0, "\(verify.stderr)")
    }

    @Test("a package signed on the token verifies, installs and re-verifies like any other; the PIN from pin-source= or the environment")
    func packInstallReverify() throws {
        let token = try SoftToken()
        let (pem, der) = try token.makeKey("tokenkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], label: "signing-2026", id: "a1b2")
        let root = token.work.directory.file("tree")
        for index in 0..<40 {
            try FileManager.default.createDirectory(atPath: root + "/d\(index % 4)", withIntermediateDirectories: true)
            try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: root + "/d\(index % 4)/f\(index).txt"))
        }
        let package = token.work.directory.file("app.zip")
        // By id, PIN from the URI's pin-source.
        let uri = "pkcs11:token=release;id=%a1%b2?pin-source=file:\(token.pinFile)"
        let packed = try token.signet([
            "pack", root, "--key", uri, "--pkcs11-module", token.module,
            "--name", "app", "--version", "1", "--sequence", "1", "--out", package
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let inspected = try token.signet(["inspect", package, "--pubkey", der, "--json"])
        #expect(try inspected.json()["verdict"] as? String == "valid", "\(inspected.stderr)")
        let installed = token.work.directory.file("installed")
        let unpacked = try token.signet(["unpack", package, "--dest", installed, "--pubkey", der])
        #expect(unpacked.status == 0, "\(unpacked.stderr)")
        let reverified = try token.signet(["reverify", installed, "--pubkey", der])
        #expect(reverified.status == 0, "\(reverified.stderr)")
        // Every resource signature in the package is byte-identical to openssl's.
        let sig = try SignetTestSupport.run("unzip", ["-p", package, ".signet/sigs/d1/f5.txt.sig"])
        let reference = token.work.directory.file("f5.sig")
        try token.work.openssl(["dgst", "-sha256", "-sign", pem, "-out", reference, root + "/d1/f5.txt"])
        #expect(sig.stdout == (try contents(reference)))
        // The module from SIGNET_PKCS11_MODULE, the PIN from an environment variable.
        let again = try token.signet(
            [
                "sign", root + "/d0/f0.txt", "--key", "pkcs11:token=release;object=signing-2026;id=%a1%b2",
                "--passphrase-env", "TOKEN_PIN"
            ],
            extra: ["SIGNET_PKCS11_MODULE": token.module, "TOKEN_PIN": token.pin])
        #expect(again.status == 0, "\(again.stderr)")

        // trust seal signs the seal on the token; a device that requires that seal key accepts it.
        let trust = token.work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: der, toPath: trust + "/release.der")
        let sealed = try token.signet(["trust", "seal", trust, "--key", Self.uri, "--pkcs11-module", token.module, "--passphrase-file", token.pinFile])
        #expect(sealed.status == 0, "\(sealed.stderr)")
        let checked = try token.signet(["inspect", package, "--trust-dir", trust, "--trust-seal-key", der, "--json"])
        #expect(try checked.json()["verdict"] as? String == "valid", "\(checked.stderr)")
    }

    @Test("the PIN typed at a terminal prompt logs in and is not echoed")
    func promptedPIN() throws {
        let token = try SoftToken()
        let (pem, _) = try token.makeKey("tokenkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], label: "signing-2026", id: "01")
        let file = try token.work.directory.write("f.txt", Data("prompted\n".utf8))
        let script = ptyAnswer
        let result = try SignetTestSupport.run(
            "python3", ["-c", script, CLI.binary, "sign", file, "--key", Self.uri, "--pkcs11-module", token.module],
            input: Data((token.pin + "\n").utf8), environment: token.environment, timeout: 60)
        #expect(result.status == 0, "\(result.stdoutText) \(result.stderr)")
        #expect(result.stdoutText.contains("token 'release'"), "\(result.stdoutText)")
        #expect(!result.stdoutText.contains(token.pin + "\r"), "the PIN was echoed: \(result.stdoutText)")
        let reference = token.work.directory.file("reference.sig")
        try token.work.openssl(["dgst", "-sha256", "-sign", pem, "-out", reference, file])
        #expect(try contents(file + ".sig") == contents(reference))
    }

    @Test("key show prints the key id and pin and writes the DER public key openssl derives from the PEM")
    func keyShow() throws {
        let token = try SoftToken()
        let (pem, der) = try token.makeKey("tokenkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072"], label: "signing-2026", id: "01")
        let out = token.work.directory.file("from-token.der")
        let shown = try token.signet([
            "key", "show", Self.uri, "--pkcs11-module", token.module, "--passphrase-file", token.pinFile,
            "--pubout", out, "--json"
        ])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(try contents(out) == contents(der))
        let fromFile = try token.signet(["key", "show", der, "--json"])
        #expect(try shown.json()["key_id"] as? String == fromFile.json()["key_id"] as? String)
        #expect(try shown.json()["bits"] as? Int == 3072)
        #expect((try shown.json()["pin"] as? String)?.hasPrefix("sha256//") == true)
        // Refuses to replace the file without --force.
        let again = try token.signet(["key", "show", Self.uri, "--pkcs11-module", token.module, "--passphrase-file", token.pinFile, "--pubout", out])
        #expect(again.status == 5, "\(again.stderr)")
        // Never over the key file or the PIN file it read, even with --force.
        let overKey = try token.signet(["key", "show", pem, "--pubout", pem, "--force"])
        #expect(overKey.status == 2, "\(overKey.stderr)")
        #expect(try String(decoding: contents(pem), as: UTF8.self).contains("PRIVATE KEY"))
        let overPIN = try token.signet([
            "key", "show", Self.uri, "--pkcs11-module", token.module, "--passphrase-file", token.pinFile,
            "--pubout", token.pinFile, "--force"
        ])
        #expect(overPIN.status == 2, "\(overPIN.stderr)")
        // The module named by the URI's module-path=, which comes before SIGNET_PKCS11_MODULE.
        let fromURI = try token.signet(
            ["key", "show", Self.uri + "?module-path=\(token.module)", "--passphrase-file", token.pinFile, "--json"],
            extra: ["SIGNET_PKCS11_MODULE": token.work.directory.file("no-such-module.so")])
        #expect(try fromURI.json()["key_id"] as? String == shown.json()["key_id"] as? String, "\(fromURI.stderr)")
        // No module named anywhere: p11-kit's proxy, which loads SoftHSM2 through its p11-kit entry.
        let proxied = try token.signet(["key", "show", Self.uri, "--passphrase-file", token.pinFile, "--json"])
        #expect(try proxied.json()["key_id"] as? String == shown.json()["key_id"] as? String, "\(proxied.stderr)")
        // The token chosen by its serial number (as key show's source names it) instead of its label.
        let source = try shown.json()["source"] as? String ?? ""
        let serial = source.components(separatedBy: "serial ").last?.trimmingCharacters(in: CharacterSet(charactersIn: ")")) ?? ""
        #expect(!serial.isEmpty, "\(source)")
        let bySerial = try token.signet([
            "key", "show", "pkcs11:serial=\(serial);object=signing-2026", "--pkcs11-module", token.module,
            "--passphrase-file", token.pinFile, "--json"
        ])
        #expect(try bySerial.json()["key_id"] as? String == shown.json()["key_id"] as? String, "\(bySerial.stderr)")

        // A URI naming only the token lists its keys (issue 29), each with the URI for --key.
        let (_, backupDER) = try token.makeKey("backup", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], label: "backup key", id: "02")
        let listed = try token.signet(["key", "show", "pkcs11:token=release", "--pkcs11-module", token.module, "--passphrase-file", token.pinFile, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let keys = try #require(try listed.json()["keys"] as? [[String: Any]], "\(listed.stdoutText)")
        try JSONSchemaCLITests.check([("key show (token)", listed.stdout), ("key show", shown.stdout)])
        #expect(keys.map { $0["label"] as? String } == ["backup key", "signing-2026"])
        #expect(keys.map { $0["bits"] as? Int } == [2048, 3072])
        #expect(keys.last?["key_id"] as? String == (try shown.json()["key_id"] as? String))
        let backupID = try token.signet(["key", "show", backupDER, "--json"]).json()["key_id"] as? String
        #expect(keys.first?["key_id"] as? String == backupID)
        for key in keys {
            let uri = try #require(key["uri"] as? String)
            let one = try token.signet(["key", "show", uri, "--pkcs11-module", token.module, "--passphrase-file", token.pinFile, "--json"])
            #expect(try one.json()["key_id"] as? String == key["key_id"] as? String, "the listed URI names that key: \(uri) \(one.stderr)")
        }
        #expect(keys.first?["uri"] as? String == "pkcs11:token=release;object=backup%20key;id=%02")
        let human = try token.signet(["key", "show", "pkcs11:token=release", "--pkcs11-module", token.module, "--passphrase-file", token.pinFile])
        #expect(human.status == 0 && human.stdoutText.contains("2 private keys") && human.stdoutText.contains("3072-bit RSA"), "\(human.stdoutText)")
        let withPubout = try token.signet([
            "key", "show", "pkcs11:token=release", "--pkcs11-module", token.module, "--passphrase-file", token.pinFile,
            "--pubout", token.work.directory.file("x.der")
        ])
        #expect(withPubout.status == 2, "\(withPubout.stderr)")
        // Signing with a URI that names no key points at the listing.
        let file = try token.work.directory.write("f.bin", Data("f".utf8))
        let noKey = try token.signet(["sign", file, "--key", "pkcs11:token=release", "--pkcs11-module", token.module, "--passphrase-file", token.pinFile])
        #expect(noKey.status == 2 && noKey.stderr.contains("signet key show 'pkcs11:token=release' lists the token's keys"), "\(noKey.stderr)")
    }

    @Test(
        "errors: no token or key (4, listing what exists), wrong PIN (4, tried once: the right PIN still works), no PIN (4), module missing (5), pin-value (2), not RSA or weak (4)"
    )
    func errors() throws {
        let token = try SoftToken()
        try token.makeKey("tokenkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], label: "signing-2026", id: "01")
        try token.makeKey("eckey", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], label: "ec-key", id: "02")
        try token.makeKey("weakkey", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"], label: "weak-key", id: "03")
        let file = try token.work.directory.write("f.txt", Data("hello\n".utf8))
        func sign(_ uri: String, _ extra: [String] = ["--passphrase-file", token.pinFile], module: String? = nil) throws -> ProcessResult {
            try token.signet(["sign", file, "--out", token.work.directory.file("f.sig"), "--key", uri, "--pkcs11-module", module ?? token.module] + extra)
        }
        let noObject = try sign("pkcs11:token=release;object=nope")
        #expect(noObject.status == 4)
        #expect(noObject.stderr.contains("object=signing-2026;id=%01"), "\(noObject.stderr)")
        let noToken = try sign("pkcs11:token=nope;object=signing-2026")
        #expect(noToken.status == 4)
        #expect(noToken.stderr.contains("'release'"), "\(noToken.stderr)")

        let wrong = try token.work.directory.write("wrong.txt", Data("9999\n".utf8), mode: 0o600)
        for _ in 0..<3 {
            let refused = try sign(Self.uri, ["--passphrase-file", wrong])
            #expect(refused.status == 4)
            #expect(refused.stderr.contains("wrong") && refused.stderr.contains("release"), "\(refused.stderr)")
        }
        // Three wrong attempts (each tried once) did not lock the token: SoftHSM locks after more.
        #expect(try sign(Self.uri).status == 0)
        let noPIN = try sign(Self.uri, [])
        #expect(noPIN.status == 4)
        #expect(noPIN.stderr.contains("PIN"), "\(noPIN.stderr)")

        let missing = try sign(Self.uri, module: token.work.directory.file("no-such-module.so"))
        #expect(missing.status == 5, "\(missing.stderr)")
        let notModule = try sign(Self.uri, module: file)
        #expect(notModule.status == 5, "\(notModule.stderr)")
        let pinValue = try sign(Self.uri + "?pin-value=1234", [])
        #expect(pinValue.status == 2)
        #expect(!pinValue.stderr.contains("1234"), "the PIN was echoed: \(pinValue.stderr)")
        let unknown = try sign("pkcs11:token=release;objcet=signing-2026")
        #expect(unknown.status == 2, "\(unknown.stderr)")

        let notRSA = try sign("pkcs11:token=release;object=ec-key")
        #expect(notRSA.status == 4)
        #expect(notRSA.stderr.contains("not an RSA key"), "\(notRSA.stderr)")
        let weakKey = try sign("pkcs11:token=release;object=weak-key")
        #expect(weakKey.status == 4)
        #expect(weakKey.stderr.contains("1024"), "\(weakKey.stderr)")
    }
}
