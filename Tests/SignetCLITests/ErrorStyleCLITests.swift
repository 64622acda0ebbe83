import Foundation
import Testing
import SignetTestSupport

/// Issue 17, points 2 and 3: one error style, the README's exit codes, messages that say what is
/// wrong, and JSON documents of one shape.
@Suite("Error style and exit codes, run as a binary")
struct ErrorStyleCLITests {
    @Test(
        "exit codes that match the README table, and every error line in one style",
        arguments: [
            (["keygen", "--out", "K", "--common-name", ""], Int32(2), "--common-name must be 1 to 64 characters"),
            (["keygen", "--out", "K", "--days", "-5"], 2, "--days must be 1 to"),
            (["keygen", "--out", "K", "--bits", "-1"], 2, "not -1"),
            (["unpack", "P", "--dest", "D", "--pubkey", "PUB", "--wait", "-3"], 2, "--wait takes 0 to 86400 seconds, not -3"),
            (["inspect", "P", "--ca", "PUB", "--clock-skew", "-1"], 2, "--clock-skew takes seconds from 0 up, not -1"),
            (["inspect", "P", "--ca", "PUB", "--expect-subject", "Release signer"], 2, "--expect-subject takes comma-separated TYPE=VALUE pairs"),
            (["inspect", "P", "--ca", "PUB", "--expect-subject", "CN="], 2, "--expect-subject takes"),
            (["help", "NOSUCH"], 2, "there is no command 'NOSUCH'"),
            (["help", "trust", "nosuch"], 2, "there is no command 'nosuch'"),
            (["reverify", "NOSUCH", "--pubkey", "PUB"], 5, "no such file"),
            (["status", "NOSUCH"], 5, "no such file"),
            (["status", "DIR"], 1, "holds no release installed by Signet"),
            (["sign", "NOSUCH", "--key", "KEY"], 5, "no such file"),
            (["sign"], 2, "signet: error: missing --key <key>"),
            (["status", "DIR", "--no-such-flag"], 2, "signet: error: unknown option '--no-such-flag'"),
            // Issue 29: ArgumentParser's refusals in Signet's words.
            (["verify", "F", "--sig", "S", "--pubkey", "PUB"], 2, "signet: error: unknown option '--sig'; did you mean --signature?"),
            (["sign", "F", "--key", "KEY", "--passphrase", "pass.txt"], 2, "did you mean --passphrase-file FILE or --passphrase-env VAR"),
            (
                ["pack", "DIR", "--key", "KEY", "--name", "a", "--version", "1", "--out", "O", "--sequence", "-1"], 2,
                "signet: error: --sequence '-1' is out of range"
            ),
            (
                ["pack", "DIR", "--key", "KEY", "--name", "a", "--version", "1", "--out", "O", "--sequence", "x1"], 2,
                "signet: error: --sequence 'x1' is not a whole number"
            ),
            (["pack", "DIR", "--key", "KEY", "--name", "a", "--version", "1", "--out"], 2, "signet: error: --out <pkg.zip> needs a value"),
            (["reverify", "DIR", "--pubkey", "PUB", "--exlude", "x"], 2, "did you mean --exclude?")
        ])
    func exitCodes(_ arguments: [String], _ exit: Int32, _ said: String) throws {
        let work = try Workspace()
        let dir = work.directory.file("dir")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let substituted = arguments.map { argument -> String in
            switch argument {
            case "K": return work.directory.file("newkeys")
            case "P": return work.directory.file("absent.zip")
            case "D": return work.directory.file("dest")
            case "PUB": return work.publicDER
            case "KEY": return work.privatePEM
            case "DIR": return dir
            case "F": return work.directory.file("f.bin")
            case "S": return work.directory.file("f.bin.sig")
            case "O": return work.directory.file("o.zip")
            case "NOSUCH" where arguments.first != "help": return work.directory.file("NOSUCH")
            default: return argument
            }
        }
        let result = try CLI.run(
            substituted + (["keygen", "sign"].contains(arguments.first) && arguments.count > 1 ? ["--passphrase-file", work.passFile] : []))
        #expect(result.status == exit, "\(arguments): \(result.status) \(result.stderr)")
        let first = result.stderr.split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.hasPrefix("signet: error: "), "\(arguments): \(result.stderr)")
        #expect(result.stderr.contains(said), "\(arguments): \(result.stderr)")
        #expect(!result.stderr.contains("Error:"), "one style: \(result.stderr)")
        // With --json the same failure is the documented object, every field present.
        if arguments.first != "help" {
            let json = try CLI.run(
                substituted + ["--json"] + (["keygen", "sign"].contains(arguments.first) && arguments.count > 1 ? ["--passphrase-file", work.passFile] : []))
            // reverify and status report per file: the error object is in the file's entry.
            let document = try json.json()
            let entry = (document["files"] as? [[String: Any]])?.first
            let error = try #require((entry?["error"] ?? document["error"]) as? [String: Any], "\(arguments): \(json.stdoutText)")
            #expect(error["exit"] as? Int == Int(exit))
            #expect(Set(error.keys) == ["code", "exit", "message", "file", "entry", "openssl", "call", "errno"], "\(error)")
        }
    }

    @Test("messages say what is wrong: another key's signature, a path given twice, a folder that may not be written")
    func messages() throws {
        let work = try Workspace()
        let file = try work.directory.write("a.txt", Data("hello\n".utf8))
        // A signature by a 3072-bit key checked with the 2048-bit workspace key.
        let (other, _) = try work.opensslKeyPair("big", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072"])
        #expect(try CLI.run(["sign", file, "--key", other, "--out", work.directory.file("a.sig")]).status == 0)
        let wrongKey = try CLI.run(["verify", file, "--signature", work.directory.file("a.sig"), "--pubkey", work.publicDER])
        #expect(wrongKey.status == 1)
        #expect(wrongKey.stderr.contains("384 bytes is what a 3072-bit key signs, so another key than the trusted one made it"), "\(wrongKey.stderr)")
        // A signature file with a byte too many.
        var bytes = try contents(work.directory.file("a.sig"))
        bytes.append(0x0A)
        try bytes.write(to: URL(fileURLWithPath: work.directory.file("b.sig")))
        let trailing = try CLI.run(["verify", file, "--signature", work.directory.file("b.sig"), "--pubkey", work.publicDER])
        #expect(trailing.stderr.contains("truncated, have trailing bytes"), "\(trailing.stderr)")

        let twice = try CLI.run([
            "pack", file, file, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "a", "--version", "1",
            "--out", work.directory.file("p.zip")
        ])
        #expect(twice.status == 2)
        #expect(twice.stderr.contains("is given twice"), "\(twice.stderr)")
        #expect(!twice.stderr.contains("normalisation"), "\(twice.stderr)")

        // An unprivileged user packing into a folder it may not write: the target and its folder
        // are named, and the hint is about writing.
        let readOnly = work.directory.file("ro")
        try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: true)
        chmod(readOnly, 0o555)
        chmod(work.path, 0o755)
        let key = try work.directory.write("nobody.pem", try contents(work.privatePEM), mode: 0o600)
        let pass = work.passFile
        chown(key, 65534, 65534)
        chown(pass, 65534, 65534)
        chmod(file, 0o644)
        let denied = try SignetTestSupport.run(
            "setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary, "pack", file, "--key", key,
                "--passphrase-file", pass, "--name", "a", "--version", "1", "--out", readOnly + "/p.zip"
            ])
        #expect(denied.status == 5, "\(denied.stderr)")
        #expect(denied.stderr.contains(readOnly + "/p.zip") && denied.stderr.contains("may write in '\(readOnly)'"), "\(denied.stderr)")
    }

    @Test("reverify of several trees: one that cannot be checked is an error object in its place, the others are still checked")
    func severalTrees() throws {
        let work = try Workspace()
        let app = try ReverifyCLITests.install(work)
        let plain = work.directory.file("plain")
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: true)
        let result = try CLI.run(["reverify", plain, app, "--pubkey", work.publicDER, "--json"])
        #expect(result.status == 2, "the most severe status: the tree that is not an installed tree is a usage error")
        let trees = try #require(try result.json()["trees"] as? [[String: Any]])
        #expect(trees.count == 2)
        let failed = try #require(trees.first { $0["root"] as? String == plain })
        let error = try #require(failed["error"] as? [String: Any])
        #expect(error["code"] as? String == "usage")
        #expect(error["exit"] as? Int == 2)
        #expect(failed["name"] is NSNull && failed["sequence"] is NSNull, "absent fields are null: \(failed)")
        let checked = try #require(trees.first { $0["root"] as? String == app })
        #expect(checked["ok"] as? Bool == true)
        #expect(checked["error"] is NSNull)
        // Without --json the failing tree is one error line, the other tree its usual lines.
        let human = try CLI.run(["reverify", plain, app, "--pubkey", work.publicDER])
        #expect(human.stderr.hasPrefix("signet: error: '\(plain)' is not a tree installed by signet unpack"), "\(human.stderr)")
        #expect(human.stdoutText.contains("OK \(app)"))
        // inspect --json: "expires" is present (null) when the package never expires.
        let package = work.directory.file("app.zip")
        let inspected = try CLI.run(["inspect", package, "--json"])
        #expect(try inspected.json()["expires"] is NSNull, "\(inspected.stdoutText)")
    }

    @Test("verify FILE defaults to FILE.sig (what sign writes); a missing one and a package get a pointer to what to do")
    func verifyDefaultSignature() throws {
        let work = try Workspace()
        let file = try work.directory.write("app.tar", Data("release bytes\n".utf8))
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let verified = try CLI.run(["verify", file, "--pubkey", work.publicDER])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdoutText.contains("OK \(file)"))
        // The default is the signature that is checked: a changed file is exit 1.
        try Data("other bytes\n".utf8).write(to: URL(fileURLWithPath: file))
        #expect(try CLI.run(["verify", file, "--pubkey", work.publicDER]).status == 1)

        let unsigned = try work.directory.write("unsigned.bin", Data("x".utf8))
        let missing = try CLI.run(["verify", unsigned, "--pubkey", work.publicDER])
        #expect(missing.status == 5, "\(missing.stderr)")
        #expect(missing.stderr.contains("unsigned.bin.sig") && missing.stderr.contains("--signature"), "\(missing.stderr)")

        let root = try PackCLITests.tree(work)
        let package = work.directory.file("app.zip")
        #expect(
            try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package])
                .status == 0)
        let zip = try CLI.run(["verify", package, "--pubkey", work.publicDER])
        #expect(zip.status == 2, "\(zip.stderr)")
        #expect(zip.stderr.contains("signet inspect"), "\(zip.stderr)")
    }

    @Test("--pin takes the full key id, sha256//BASE64 or a key file; the 16-hex short id gets a pointer to the full one")
    func pins() throws {
        let work = try Workspace()
        let file = try work.directory.write("fw.bin", Data("fw\n".utf8))
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let verify = ["verify", file, "--pubkey", work.publicDER, "--pin"]
        #expect(try CLI.run(verify + [work.keyID]).status == 0)
        #expect(try CLI.run(verify + [work.keyID.uppercased()]).status == 0)
        #expect(try CLI.run(verify + [work.certificate]).status == 0, "a certificate file pins its key")
        let other = try Workspace()
        #expect(try CLI.run(verify + [other.publicDER]).status == 3, "another key's file: not pinned")
        let short = try CLI.run(verify + [String(work.keyID.prefix(16))])
        #expect(short.status == 2, "\(short.stderr)")
        #expect(short.stderr.contains("short key id") && short.stderr.contains("signet key show"), "\(short.stderr)")
        #expect(!short.stderr.contains("Error:"), "Signet's style: \(short.stderr)")
    }

    @Test("--expires takes a date alone as its midnight UTC; --version --json is a document")
    func datesAndVersion() throws {
        let work = try Workspace()
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: src + "/a.txt"))
        let packed = try CLI.run([
            "pack", src, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "a", "--version", "1",
            "--expires", "2099-01-01", "--out", work.directory.file("a.zip"), "--json"
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        #expect(try packed.json()["expires"] as? String == "2099-01-01T00:00:00Z")
        let bad = try CLI.run([
            "pack", src, "--key", work.privatePEM, "--name", "a", "--version", "1", "--expires", "2099-13-01", "--out", work.directory.file("b.zip")
        ])
        #expect(bad.status == 2 && bad.stderr.contains("a date like 2027-01-01"), "\(bad.stderr)")
        let version = try CLI.run(["--version", "--json"])
        #expect(version.status == 0)
        #expect((try version.json()["signet"] as? String)?.isEmpty == false)
    }

    @Test("an interrupted command says what state things are in (exit 130 used to print nothing)", arguments: ["sign", "pack", "fetch"])
    func interruptedSaysSo(_ command: String) throws {
        let work = try Workspace()
        let file = try work.directory.write("f.bin", Data("f".utf8))
        // The passphrase comes from a FIFO nobody writes: the command waits there, reliably.
        let fifo = work.directory.file("pass.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        let arguments: [String] =
            switch command {
            case "sign": ["sign", file, "--key", work.privatePEM, "--passphrase-file", fifo]
            case "pack":
                ["pack", file, "--key", work.privatePEM, "--passphrase-file", fifo, "--name", "a", "--version", "1", "--out", work.directory.file("a.zip")]
            default:
                [
                    "fetch", "https://127.0.0.1:9/x", "--out", work.directory.file("x.bin"), "--signature", file, "--trust-dir", work.directory.file("t"),
                    "--trust-salt-file", fifo
                ]
            }
        let script = pythonScript("run_with_signals_unblocked.py")
        let result = try SignetTestSupport.run("python3", ["-c", script, fifo, CLI.binary] + arguments)
        let lines = result.stdoutText.split(separator: "\n", maxSplits: 1).map(String.init)
        #expect(lines.first == "-2", "died of SIGINT: \(result.stdoutText) \(result.stderr)")
        let said = lines.count > 1 ? lines[1] : ""
        #expect(said.contains("signet: interrupted (SIGINT); "), "\(said)")
        let expected = ["sign": "no signature was written", "pack": "no package was written", "fetch": "run the same command again to resume"][command]!
        #expect(said.contains(expected), "\(said)")
    }

    @Test("point 5: a TOML string without quotes is named, with its line")
    func unquotedTOMLValue() throws {
        let work = try Workspace()
        let config = try work.directory.write("app.conf", Data("channel = \"stable\"\ntls-ca = /etc/app/roots.pem\n".utf8))
        let result = try CLI.run(["update", "--config", config])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(
            result.stderr.contains("app.conf:2:") && result.stderr.contains("not quoted")
                && result.stderr.contains(#"tls-ca = "/etc/app/roots.pem""#), "\(result.stderr)")
        #expect(!result.stderr.contains("could not determine value type"), "\(result.stderr)")
    }

}
