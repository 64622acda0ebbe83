import Foundation
import Testing
import SignetTestSupport

/// A small PKI made with the openssl CLI: root -> intermediate -> leaves for the workspace's key.
struct TestPKI {
    let work: Workspace
    var root: String { work.directory.file("pki/root.der") }
    var otherRoot: String { work.directory.file("pki/other-root.der") }
    var intermediate: String { work.directory.file("pki/int.der") }
    func leaf(_ name: String) -> String { work.directory.file("pki/\(name).der") }

    init(_ work: Workspace) throws {
        self.work = work
        let dir = work.directory.file("pki")
        try FileManager.default.createDirectory(atPath: dir + "/newcerts", withIntermediateDirectories: true)
        try work.directory.write("pki/index.txt", Data())
        try work.directory.write("pki/serial", Data("1000\n".utf8))
        try work.directory.write(
            "pki/ca.cnf",
            Data(
                """
                [ca]
                default_ca = CA_default
                [CA_default]
                dir = .
                database = index.txt
                new_certs_dir = newcerts
                serial = serial
                default_md = sha256
                policy = policy_any
                unique_subject = no
                [policy_any]
                commonName = supplied
                organizationName = optional
                [ca_ext]
                basicConstraints = critical,CA:TRUE
                keyUsage = critical,keyCertSign,cRLSign
                [code_ext]
                basicConstraints = CA:FALSE
                keyUsage = critical,digitalSignature
                extendedKeyUsage = codeSigning
                [server_ext]
                basicConstraints = CA:FALSE
                keyUsage = critical,digitalSignature
                extendedKeyUsage = serverAuth

                """.utf8))
        func openssl(_ arguments: [String]) throws {
            let result = try SignetTestSupport.run("openssl", arguments, directory: dir)
            guard result.status == 0 else { throw SupportError("openssl \(arguments.prefix(3)) failed: \(result.stderr)") }
        }
        for (name, subject) in [("root", "/CN=Signet Test Root"), ("other-root", "/CN=Unrelated Root")] {
            try openssl([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "\(name).key", "-subj", subject, "-days", "3650",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "\(name).pem"
            ])
            try openssl(["x509", "-in", "\(name).pem", "-outform", "DER", "-out", "\(name).der"])
        }
        try openssl(["req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "int.key", "-subj", "/CN=Signet Test Intermediate", "-out", "int.csr"])
        try openssl([
            "ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "root.pem", "-keyfile", "root.key", "-extensions", "ca_ext",
            "-days", "3650", "-in", "int.csr", "-out", "int.pem"
        ])
        try openssl(["x509", "-in", "int.pem", "-outform", "DER", "-out", "int.der"])
        try openssl(["req", "-new", "-key", work.privatePEM, "-passin", "file:" + work.passFile, "-subj", "/CN=Release signer/O=Example", "-out", "leaf.csr"])
        for (name, extensions, dates) in [
            ("leaf", "code_ext", ["-days", "365"]), ("server-leaf", "server_ext", ["-days", "365"]),
            ("expired-leaf", "code_ext", ["-startdate", "20200101000000Z", "-enddate", "20210101000000Z"])
        ] {
            try openssl(
                [
                    "ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "int.pem", "-keyfile", "int.key", "-extensions", extensions,
                    "-in", "leaf.csr", "-out", "\(name).pem"
                ] + dates)
            try openssl(["x509", "-in", "\(name).pem", "-outform", "DER", "-out", "\(name).der"])
        }
    }
}

@Suite("Trust policy: certificates, pins, revocation, channels, seals, freshness")
struct TrustCLITests {
    static func pack(_ work: Workspace, name: String = "app", sequence: Int = 5, extra: [String] = [], out: String, environment: [String: String?] = [:]) throws
    {
        let root = work.directory.file("src")
        if !FileManager.default.fileExists(atPath: root) {
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try work.directory.write("src/app.conf", Data("setting = 1\n".utf8))
        }
        let result = try CLI.run(
            [
                "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", name, "--version", "v\(sequence)",
                "--sequence", "\(sequence)", "--out", out
            ] + extra, environment: environment)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("certificate mode: chain to the root, not to another; expiry, EKU and subject rules")
    func certificates() throws {
        let work = try Workspace()
        let pki = try TestPKI(work)
        let good = work.directory.file("good.zip")
        try Self.pack(work, extra: ["--cert", pki.leaf("leaf"), "--chain", pki.intermediate], out: good)
        let ok = try CLI.run(["inspect", good, "--ca", pki.root, "--json"])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(try ok.json()["signer"] as? String == work.keyID)
        #expect(try CLI.run(["unpack", good, "--dest", work.directory.file("app"), "--ca", pki.root]).status == 0)
        #expect(try CLI.run(["reverify", work.directory.file("app"), "--ca", pki.root]).status == 0, "installed trees keep their certificates")

        let otherRoot = try CLI.run(["inspect", good, "--ca", pki.otherRoot])
        #expect(otherRoot.status == 3)
        #expect(otherRoot.stderr.contains("does not chain to a trusted root"))
        #expect(try CLI.run(["inspect", good, "--ca", pki.root, "--expect-subject", "CN=Release signer"]).status == 0)
        let subject = try CLI.run(["inspect", good, "--ca", pki.root, "--expect-subject", "CN=Someone else"])
        #expect(subject.status == 3)
        #expect(subject.stderr.contains("lacks CN=Someone else"))

        let expired = work.directory.file("expired.zip")
        try Self.pack(work, extra: ["--cert", pki.leaf("expired-leaf"), "--chain", pki.intermediate], out: expired)
        let refused = try CLI.run(["inspect", expired, "--ca", pki.root])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("expired") && refused.stderr.contains("--allow-expired-cert"))
        #expect(try CLI.run(["inspect", expired, "--ca", pki.root, "--allow-expired-cert"]).status == 0)

        let server = work.directory.file("server.zip")
        try Self.pack(work, extra: ["--cert", pki.leaf("server-leaf"), "--chain", pki.intermediate], out: server)
        let eku = try CLI.run(["inspect", server, "--ca", pki.root])
        #expect(eku.status == 3)
        #expect(eku.stderr.contains("codeSigning"))

        // Without the intermediate the chain is incomplete.
        let noChain = work.directory.file("nochain.zip")
        try Self.pack(work, extra: ["--cert", pki.leaf("leaf")], out: noChain)
        #expect(try CLI.run(["inspect", noChain, "--ca", pki.root]).status == 3)
        // A certificate for another key is refused at pack time.
        let other = try Workspace()
        let wrong = try CLI.run([
            "pack", work.directory.file("src"), "--key", other.privatePEM, "--passphrase-file", other.passFile,
            "--name", "x", "--version", "1", "--out", work.directory.file("w.zip"), "--cert", pki.leaf("leaf")
        ])
        #expect(wrong.status == 2)
        #expect(wrong.stderr.contains("not a certificate for the signing key"))
    }

    @Test("rotation, pins and revocation")
    func pinsAndRevocation() throws {
        let work = try Workspace(), old = try Workspace()
        let new = work.directory.file("new.zip"), previous = work.directory.file("old.zip")
        try Self.pack(work, out: new)
        try Self.pack(old, out: previous)
        // Rotation: trust old and new at once; the report names the key that matched.
        for (package, key) in [(new, work.keyID), (previous, old.keyID)] {
            let result = try CLI.run(["inspect", package, "--pubkey", old.publicDER, "--pubkey", work.publicDER, "--json"])
            #expect(result.status == 0)
            #expect(try result.json()["signer"] as? String == key)
        }
        // Pins: only the pinned key (hex or sha256// form).
        let pinHex = ["--pubkey", old.publicDER, "--pubkey", work.publicDER, "--pin", work.keyID]
        #expect(try CLI.run(["inspect", new] + pinHex).status == 0)
        let unpinned = try CLI.run(["inspect", previous] + pinHex)
        #expect(unpinned.status == 3)
        #expect(unpinned.stderr.contains("not pinned"))
        let pinForm = try #require(try CLI.run(["keygen", "--out", work.directory.file("unused"), "--bits", "2048", "--json"]).json()["pin"] as? String)
        #expect(try CLI.run(["inspect", new, "--pubkey", work.publicDER, "--pin", pinForm]).status == 3, "a pin for another key")
        // Revocation.
        let revoked = try work.directory.write("revoked.txt", Data("# compromised 2026-11\n\(old.keyID)  # old laptop\n".utf8))
        let result = try CLI.run(["inspect", previous, "--pubkey", old.publicDER, "--pubkey", work.publicDER, "--revoked", revoked, "--json"])
        #expect(result.status == 3)
        #expect(((try result.json()["error"] as? [String: Any])?["message"] as? String)?.contains("revoked") == true)
        #expect(try CLI.run(["inspect", new, "--pubkey", old.publicDER, "--pubkey", work.publicDER, "--revoked", revoked]).status == 0)
        // Plain verify honours revocation too.
        let file = try work.directory.writeRandom("f.bin", count: 100)
        #expect(try CLI.run(["sign", file, "--key", old.privatePEM, "--passphrase-file", old.passFile]).status == 0)
        #expect(try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", old.publicDER, "--revoked", revoked]).status == 3)
    }

    @Test("channels from a trust directory, and a sealed trust directory that was tampered with")
    func channelsAndSeal() throws {
        let work = try Workspace(), beta = try Workspace()
        let trust = work.directory.file("trust")
        try FileManager.default.createDirectory(atPath: trust + "/release", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: trust + "/beta", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release/release.der")
        try FileManager.default.copyItem(atPath: beta.publicDER, toPath: trust + "/beta/beta.der")
        let release = work.directory.file("release.zip"), betaPackage = work.directory.file("beta.zip")
        try Self.pack(work, out: release)
        try Self.pack(beta, out: betaPackage)

        let inChannel = try CLI.run(["unpack", release, "--dest", work.directory.file("app"), "--trust-dir", trust, "--channel", "release", "--json"])
        #expect(inChannel.status == 0, "\(inChannel.stderr)")
        #expect(try inChannel.json()["channel"] as? String == "release")
        let status = try CLI.run(["status", work.directory.file("app/app.conf"), "--trust-dir", trust, "--json"])
        #expect((try status.json()["files"] as? [[String: Any]])?.first?["channel"] as? String == "release")
        let wrongChannel = try CLI.run(["inspect", betaPackage, "--trust-dir", trust, "--channel", "release"])
        #expect(wrongChannel.status == 3)
        #expect(wrongChannel.stderr.contains("'beta' channel"))
        #expect(try CLI.run(["inspect", betaPackage, "--trust-dir", trust]).status == 0, "without --channel any channel is trusted")

        let salt = try work.directory.write("salt", Data("device secret\n".utf8), mode: 0o600)
        let sealed = try CLI.run(["trust", "seal", trust, "--salt-file", salt])
        #expect(sealed.status == 0, "\(sealed.stderr)")
        #expect(try CLI.run(["inspect", release, "--trust-dir", trust, "--trust-salt-file", salt]).status == 0)
        let noSalt = try CLI.run(["inspect", release, "--trust-dir", trust])
        #expect(noSalt.status == 3)
        #expect(noSalt.stderr.contains("--trust-salt-file"))
        // The wrong salt file (issue 29): every digest differs, and the message says the salt is
        // the likely cause rather than pointing at one key as if it had been swapped.
        let otherSalt = try work.directory.write("other-salt", Data("another secret\n".utf8), mode: 0o600)
        let wrongSalt = try CLI.run(["inspect", release, "--trust-dir", trust, "--trust-salt-file", otherSalt])
        #expect(wrongSalt.status == 3)
        #expect(
            wrongSalt.stderr.contains("does not match its seal with this salt") && wrongSalt.stderr.contains("--trust-salt-file is not the salt"),
            "\(wrongSalt.stderr)")
        #expect(!wrongSalt.stderr.contains("was changed ("), "\(wrongSalt.stderr)")
        // An attacker swaps the beta key for their own.
        let attacker = try Workspace()
        try FileManager.default.removeItem(atPath: trust + "/beta/beta.der")
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: trust + "/beta/beta.der")
        let broken = try CLI.run(["inspect", release, "--trust-dir", trust, "--trust-salt-file", salt, "--json"])
        #expect(broken.status == 3)
        #expect((try broken.json()["error"] as? [String: Any])?["code"] as? String == "broken-trust-seal")
        #expect(broken.stderr.contains("'beta/beta.der' was changed (the other files match with this salt, so the salt is right)"), "\(broken.stderr)")

        // A signed seal, checked against a key kept outside the directory.
        let sealer = try Workspace()
        let signedTrust = work.directory.file("signed-trust")
        try FileManager.default.createDirectory(atPath: signedTrust + "/release", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: signedTrust + "/release/release.der")
        let unsealed = try CLI.run(["inspect", release, "--trust-dir", signedTrust, "--trust-seal-key", sealer.publicDER])
        #expect(unsealed.status == 3, "an unsealed directory is refused when a seal key is required")
        #expect(try CLI.run(["trust", "seal", signedTrust, "--key", sealer.privatePEM, "--passphrase-file", sealer.passFile]).status == 0)
        #expect(try CLI.run(["inspect", release, "--trust-dir", signedTrust, "--trust-seal-key", sealer.publicDER]).status == 0)
        // The attacker swaps the key and re-seals without the sealing key: the signature is gone.
        try FileManager.default.removeItem(atPath: signedTrust + "/release/release.der")
        try FileManager.default.copyItem(atPath: attacker.publicDER, toPath: signedTrust + "/release/release.der")
        #expect(try CLI.run(["trust", "seal", signedTrust]).status == 0)
        let resealed = try CLI.run(["inspect", release, "--trust-dir", signedTrust, "--trust-seal-key", sealer.publicDER])
        #expect(resealed.status == 3)
        #expect(resealed.stderr.contains("not signed"))
        // Or re-seals signed with their own key.
        #expect(try CLI.run(["trust", "seal", signedTrust, "--key", attacker.privatePEM, "--passphrase-file", attacker.passFile]).status == 0)
        let forged = try CLI.run(["inspect", release, "--trust-dir", signedTrust, "--trust-seal-key", sealer.publicDER])
        #expect(forged.status == 3)
        #expect(forged.stderr.contains("does not verify"))
    }

    @Test("freshness: expiry with clock skew, and rollback across destinations through one state file")
    func freshness() throws {
        let work = try Workspace()
        let now = Int(Date().timeIntervalSince1970)
        let stale = work.directory.file("stale.zip")
        let expires = Date(timeIntervalSince1970: TimeInterval(now - 100))
        let formatter = ISO8601DateFormatter()
        try Self.pack(work, extra: ["--expires", formatter.string(from: expires)], out: stale, environment: ["SOURCE_DATE_EPOCH": "\(now - 1000)"])
        #expect(try CLI.run(["inspect", stale, "--pubkey", work.publicDER]).status == 0, "within the default 300 s of clock skew")
        let expired = try CLI.run(["inspect", stale, "--pubkey", work.publicDER, "--clock-skew", "0", "--json"])
        #expect(expired.status == 1)
        #expect((try expired.json()["error"] as? [String: Any])?["code"] as? String == "expired")

        let v2 = work.directory.file("v2.zip"), v1 = work.directory.file("v1.zip")
        try Self.pack(work, sequence: 2, out: v2)
        try Self.pack(work, sequence: 1, out: v1)
        let state = work.directory.file("state.json")
        #expect(try CLI.run(["unpack", v2, "--dest", work.directory.file("a"), "--pubkey", work.publicDER, "--state", state]).status == 0)
        let rollback = try CLI.run(["unpack", v1, "--dest", work.directory.file("b"), "--pubkey", work.publicDER, "--state", state, "--json"])
        #expect(rollback.status == 1)
        #expect((try rollback.json()["error"] as? [String: Any])?["code"] as? String == "rollback")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("b")))
        #expect(try (JSONSerialization.jsonObject(with: contents(state)) as? [String: Any])?["packages"] as? [String: Int] == ["app": 2])
        #expect(try CLI.run(["unpack", v1, "--dest", work.directory.file("b"), "--pubkey", work.publicDER, "--state", state, "--allow-downgrade"]).status == 0)
        #expect(
            try (JSONSerialization.jsonObject(with: contents(state)) as? [String: Any])?["packages"] as? [String: Int] == ["app": 2],
            "a downgrade does not lower the record")
    }

    @Test("one verdict, one exit code: a bare package signed by a revoked key is exit 3 in unpack as in verify")
    func bareRevokedKey() throws {
        let work = try Workspace()
        let file = try work.directory.write("a.txt", Data("payload\n".utf8))
        try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", "a.txt.sig", "a.txt"])
        let zipped = try run("zip", ["-q", "bare.zip", "a.txt", "a.txt.sig"], directory: work.path)
        #expect(zipped.status == 0, "\(zipped.stderr)")
        let revoked = try work.directory.write("revoked.txt", Data("\(work.keyID)\n".utf8))
        let verify = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", work.publicDER, "--revoked", revoked])
        #expect(verify.status == 3, "\(verify.stderr)")
        let unpack = try CLI.run([
            "unpack", work.directory.file("bare.zip"), "--bare", "--dest", work.directory.file("app"),
            "--pubkey", work.publicDER, "--revoked", revoked, "--json"
        ])
        #expect(unpack.status == 3, "\(unpack.stderr)")
        #expect((try unpack.json()["error"] as? [String: Any])?["code"] as? String == "untrusted-signer")
    }
}
