import Foundation
import Testing
import SignetTestSupport

@Suite("signet sign / verify / keygen, run as a binary")
struct SignVerifyCLITests {
    @Test("help and version exit 0 and teach")
    func help() throws {
        let root = try CLI.run(["--help"])
        #expect(root.status == 0)
        #expect(root.stdoutText.contains("Exit codes"))
        let sign = try CLI.run(["sign", "--help"])
        #expect(sign.status == 0)
        #expect(sign.stdoutText.contains("openssl dgst -sha256 -sign"))
        #expect(sign.stdoutText.contains("--passphrase-env"))
        let version = try CLI.run(["--version"])
        #expect(version.status == 0)
        #expect(version.stdoutText.contains("OpenSSL 3"))
        #expect(version.stdoutText.contains("libzip"))
    }

    @Test("keygen writes the set, prints the key id, and refuses to overwrite")
    func keygen() throws {
        let work = try Workspace()
        #expect(work.keyID.count == 64)
        let digest = try work.openssl(["dgst", "-sha256", "-r", work.publicDER]).stdoutText.prefix(64)
        #expect(work.keyID == String(digest))
        for name in ["private_key.pem", "private_key.p12", "public_key.der", "certificate.der"] {
            #expect(FileManager.default.fileExists(atPath: work.keys + "/" + name))
        }
        let before = try contents(work.privatePEM)
        let again = try CLI.run(["keygen", "--out", work.keys, "--bits", "2048", "--passphrase-file", work.passFile])
        #expect(again.status == 5)
        #expect(again.stderr.contains("refusing to overwrite"))
        #expect(again.stderr.contains("private_key.pem"))
        #expect(try contents(work.privatePEM) == before)

        let human = try CLI.run(["keygen", "--out", work.directory.file("plain"), "--bits", "2048"])
        #expect(human.status == 0)
        #expect(human.stdoutText.contains("key id: "))
        #expect(human.stdoutText.contains("pin:    sha256//"))
        #expect(human.stderr.contains("not encrypted"), "an unencrypted key set is called out: \(human.stderr)")
    }

    @Test("sign is byte-identical to openssl dgst -sha256 -sign, and openssl verifies it")
    func signMatchesOpenSSL() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("release.bin", count: 1_000_003)
        let signed = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stdoutText.contains("release.bin.sig"))
        try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", "openssl.sig", file])
        #expect(try contents(file + ".sig") == contents(work.directory.file("openssl.sig")))
        let verified = try work.openssl(["dgst", "-sha256", "-verify", work.publicPEM(), "-signature", file + ".sig", file])
        #expect(verified.stdoutText.contains("Verified OK"))
    }

    @Test(
        "every algorithm round-trips through signet verify and openssl",
        arguments: ["rsa-pkcs1v15-sha256", "rsa-pkcs1v15-sha384", "rsa-pkcs1v15-sha512", "rsa-pss-sha256"])
    func algorithms(_ algorithm: String) throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 70_000)
        let signed = try CLI.run(
            [
                "sign", file, "--key", work.privateP12, "--passphrase-env", "SIGNET_TEST_PASS",
                "--algorithm", algorithm, "--out", work.directory.file("r.sig"), "--json"
            ],
            environment: ["SIGNET_TEST_PASS": work.passphrase])
        #expect(signed.status == 0, "\(signed.stderr)")
        let entry = try #require((try signed.json()["files"] as? [[String: Any]])?.first)
        #expect(entry["path"] as? String == file)
        #expect(entry["signature"] as? String == work.directory.file("r.sig"))
        #expect(entry["algorithm"] as? String == algorithm)
        #expect(entry["key_id"] as? String == work.keyID)
        let verified = try CLI.run(["verify", file, "--signature", work.directory.file("r.sig"), "--pubkey", work.certificate, "--algorithm", algorithm])
        #expect(verified.status == 0, "\(verified.stderr)")
        try work.openssl(["dgst"] + opensslDigestArguments(algorithm) + ["-verify", work.publicPEM(), "-signature", "r.sig", file])
        // And openssl's own signature verifies with signet.
        try work.openssl(["dgst"] + opensslDigestArguments(algorithm) + ["-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", "o.sig", file])
        #expect(try CLI.run(["verify", file, "--signature", work.directory.file("o.sig"), "--pubkey", work.publicDER, "--algorithm", algorithm]).status == 0)
    }

    @Test("several files in one call: each gets FILE.sig; one bad input writes none")
    func severalFiles() throws {
        let work = try Workspace()
        let files = try (0..<6).map { try work.directory.writeRandom("f\($0).bin", count: 50_000 + $0) }
        let signed = try CLI.run(["sign"] + files + ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--json"])
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect((try signed.json()["files"] as? [Any])?.count == files.count)
        let pem = try work.publicPEM()
        for file in files {
            #expect(try work.openssl(["dgst", "-sha256", "-verify", pem, "-signature", file + ".sig", file]).status == 0)
        }
        let fresh = try (0..<3).map { try work.directory.writeRandom("g\($0).bin", count: 100) }
        let failed = try CLI.run(["sign"] + fresh + [work.directory.file("missing.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(failed.status == 5)
        #expect(failed.stderr.contains("missing.bin"))
        for file in fresh { #expect(!FileManager.default.fileExists(atPath: file + ".sig"), "\(file).sig must not exist") }
    }

    @Test("verify: valid, tampered, wrong key, and --json documents")
    func verify() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 4096)
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let ok = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", work.publicDER, "--json"])
        #expect(ok.status == 0)
        let document = try ok.json()
        #expect(document["verdict"] as? String == "valid")
        #expect(document["key_id"] as? String == work.keyID)
        #expect(document["algorithm"] as? String == "rsa-pkcs1v15-sha256")

        let original = try contents(file)
        var bytes = Array(original)
        bytes[100] ^= 1
        try work.directory.write("r.bin", Data(bytes))
        let tampered = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", work.publicDER, "--json"])
        #expect(tampered.status == 1)
        let failure = try tampered.json()
        #expect(failure["verdict"] as? String == "invalid")
        let error = try #require(failure["error"] as? [String: Any])
        #expect(error["code"] as? String == "bad-signature")
        #expect(error["exit"] as? Int == 1)
        #expect(error["file"] as? String == file)
        #expect(tampered.stderr.contains("does not verify"))

        // A second, unrelated key set: its key does not verify our signature; rotation: both trusted, ours matches.
        let other = try Workspace()
        try work.directory.write("r.bin", original)
        #expect(try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", other.publicDER]).status == 1)
        let rotated = try CLI.run(["verify", file, "--signature", file + ".sig", "--pubkey", other.publicDER, "--pubkey", work.certificate, "--json"])
        #expect(rotated.status == 0)
        #expect(try rotated.json()["key_id"] as? String == work.keyID)
    }

    @Test("passphrases from a file, an environment variable, or a pipe (<(...)), never argv")
    func passphraseSources() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 10)
        #expect(try CLI.run(["sign", file, "--key", work.privateP12, "--passphrase-file", work.passFile]).status == 0)
        // Signed again each time: --force replaces the signature the run before wrote.
        #expect(try CLI.run(["sign", file, "--force", "--key", work.privateP12, "--passphrase-env", "P"], environment: ["P": work.passphrase]).status == 0)
        let piped = try SignetTestSupport.run(
            "bash",
            [
                "-c", "\"$0\" sign --force \"$1\" --key \"$2\" --passphrase-file <(printf '%s\\n' \"$3\")",
                CLI.binary, file, work.privatePEM, work.passphrase
            ])
        #expect(piped.status == 0, "\(piped.stderr)")
        let unset = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-env", "SIGNET_UNSET_VAR"], environment: ["SIGNET_UNSET_VAR": nil])
        #expect(unset.status == 4)
        #expect(unset.stderr.contains("SIGNET_UNSET_VAR"))
        let directory = try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.keys])
        #expect(directory.status == 4)
        #expect(directory.stderr.contains("is a directory"))
    }

    @Test("a passphrase typed at a terminal prompt is not echoed")
    func promptWithoutEcho() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 100)
        // python3's pty gives signet a real terminal on stdin; it answers the prompt.
        let script = ptyAnswer
        let result = try SignetTestSupport.run(
            "python3", ["-c", script, CLI.binary, "sign", file, "--key", work.privatePEM],
            input: Data((work.passphrase + "\n").utf8), timeout: 60)
        #expect(result.status == 0, "\(result.stdoutText) \(result.stderr)")
        #expect(result.stdoutText.contains("Passphrase for \(work.privatePEM)"))
        #expect(!result.stdoutText.contains(work.passphrase), "the passphrase was echoed: \(result.stdoutText)")
        #expect(FileManager.default.fileExists(atPath: file + ".sig"))
    }

    @Test("Ctrl-C at the prompt leaves the terminal with echo on")
    func interruptRestoresEcho() throws {
        let work = try Workspace()
        let file = try work.directory.writeRandom("r.bin", count: 10)
        let script =
            ptyPrelude + """
                echo_during = bool(termios.tcgetattr(fd)[3] & termios.ECHO)
                os.write(fd, b"\\x03")
                _, status = os.waitpid(pid, 0)
                echo_after = bool(termios.tcgetattr(fd)[3] & termios.ECHO)
                print(f"during={echo_during} after={echo_after} signaled={os.WIFSIGNALED(status)}")
                """
        let result = try SignetTestSupport.run("python3", ["-c", script, CLI.binary, "sign", file, "--key", work.privatePEM], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdoutText.contains("during=False after=True signaled=True"), "\(result.stdoutText)")
        #expect(!FileManager.default.fileExists(atPath: file + ".sig"))
    }

    @Test("signing a file over 1 GiB streams: small peak RSS, same bytes as openssl")
    func largeFile() throws {
        let work = try Workspace()
        let big = work.directory.file("big.img")
        // Sparse: 1.1 GiB of mostly holes with a few written regions, so every chunk is hashed.
        let handle = try #require(FileHandle(forWritingAtPath: try work.directory.write("big.img", Data())))
        for offset in stride(from: UInt64(0), to: 1_181_116_006, by: 97 * 1024 * 1024) {
            try handle.seek(toOffset: offset)
            try handle.write(contentsOf: Data("signet \(offset)".utf8))
        }
        try handle.truncate(atOffset: 1_181_116_006)
        try handle.close()
        // Memory must not grow with the file: compare the peak RSS of signing 1.1 GiB with that of
        // signing 10 bytes (the difference also holds under AddressSanitizer, which inflates both).
        let tiny = try work.directory.writeRandom("tiny.bin", count: 10)
        let baseline = try CLI.peakRSS(["sign", tiny, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        let peak = try CLI.peakRSS(["sign", big, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        print("signet sign peak RSS: \(peak) KiB for \(1_181_116_006 >> 20) MiB, \(baseline) KiB for 10 bytes")
        #expect(peak - baseline < 8 * 1024, "peak RSS grew by \(peak - baseline) KiB with the file size: signing must stream")
        try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", "big.openssl.sig", big])
        #expect(try contents(big + ".sig") == contents(work.directory.file("big.openssl.sig")))
    }

    @Test("sign writes all signatures or none: a target that cannot be written stops every one")
    func signAllOrNothing() throws {
        let work = try Workspace()
        let a = try work.directory.write("a.txt", Data("a\n".utf8)), b = try work.directory.write("b.txt", Data("b\n".utf8))
        try work.directory.write("a.txt.sig", Data("old signature\n".utf8))
        try FileManager.default.createDirectory(atPath: b + ".sig", withIntermediateDirectories: true)
        let result = try CLI.run(["sign", a, b, "--key", work.privatePEM, "--passphrase-file", work.passFile])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(try contents(a + ".sig") == Data("old signature\n".utf8), "a.txt.sig untouched")
        let strays = try FileManager.default.contentsOfDirectory(atPath: work.path).filter { $0.hasPrefix(".") }
        #expect(strays.isEmpty, "no staged files left: \(strays)")
    }

}
