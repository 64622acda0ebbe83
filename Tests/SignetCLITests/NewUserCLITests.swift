import Foundation
import Testing
import SignetTestSupport

/// Issue 29: what a new user still tripped on, each as the user meets it.
@Suite("a new user's second pass (issue 29), run as a binary")
struct NewUserCLITests {
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
        #expect(try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package]).status == 0)
        let zip = try CLI.run(["verify", package, "--pubkey", work.publicDER])
        #expect(zip.status == 2, "\(zip.stderr)")
        #expect(zip.stderr.contains("signet inspect"), "\(zip.stderr)")
    }

    @Test("--structured 'config/*.json' stays in config/ ('*' does not cross '/'); 'config/**/*.json' goes down; --exclude alike")
    func gitignorePatterns() throws {
        let work = try Workspace()
        let root = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: root + "/config/mod0", withIntermediateDirectories: true)
        try Data(#"{"a": 1}"#.utf8).write(to: URL(fileURLWithPath: root + "/config/app.json"))
        try Data(#"{"b": 2}"#.utf8).write(to: URL(fileURLWithPath: root + "/config/mod0/cfg0.json"))
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1"]
        func structured(_ pattern: String) throws -> [String] {
            let package = work.directory.file("p-\(UUID().uuidString).zip")
            let packed = try CLI.run(["pack", root] + key + ["--structured", pattern, "--out", package, "--json"])
            #expect(packed.status == 0, "\(packed.stderr)")
            return try #require(try packed.json()["files"] as? [[String: Any]]).filter { $0["structured"] is String }.compactMap { $0["path"] as? String }
        }
        #expect(try structured("config/*.json") == ["config/app.json"])
        #expect(try structured("config/**/*.json") == ["config/app.json", "config/mod0/cfg0.json"])
        #expect(try structured("*.json") == ["config/app.json", "config/mod0/cfg0.json"])
        #expect(try structured("mod0") == ["config/mod0/cfg0.json"])

        // reverify --exclude: a changed file in config/mod0 is still found with 'config/*.json'.
        let package = work.directory.file("app.zip")
        #expect(try CLI.run(["pack", root] + key + ["--out", package]).status == 0)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        try Data(#"{"b": 3}"#.utf8).write(to: URL(fileURLWithPath: app + "/config/mod0/cfg0.json"))
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--exclude", "config/*.json"]).status == 1)
        #expect(try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--exclude", "config/**/cfg*.json"]).status == 0)
        let help = try CLI.run(["help", "pack"])
        #expect(help.stdoutText.contains(".gitignore"), "\(help.stdoutText)")
    }

    @Test("reverify TREE with an unreadable folder: the folder and its listed files are unreadable, everything else is checked; reverify FILE of an unreadable file gives its verdict")
    func unreadableFolders() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let work = try Workspace()
        let root = work.directory.file("src")
        for (path, text) in [("a/x.txt", "x"), ("a/deep/y.txt", "y"), ("b/z.txt", "z"), ("top.txt", "t")] {
            try FileManager.default.createDirectory(atPath: (root + "/" + path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/" + path))
        }
        let package = work.directory.file("app.zip")
        #expect(try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package]).status == 0)
        let app = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER]).status == 0)
        chmod(work.path, 0o755)
        chmod(work.keys, 0o755)
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary, "reverify"]
        #expect(try SignetTestSupport.run("setpriv", asNobody + [app, "--pubkey", work.publicDER]).status == 0, "all readable: ok")

        chmod(app + "/a", 0o000)
        try Data("changed".utf8).write(to: URL(fileURLWithPath: app + "/b/z.txt"))
        let result = try SignetTestSupport.run("setpriv", asNobody + [app, "--pubkey", work.publicDER, "--json"])
        chmod(app + "/a", 0o755)
        #expect(result.status == 1, "\(result.status) \(result.stderr)")
        let tree = try #require((try result.json()["trees"] as? [[String: Any]])?.first, "\(result.stdoutText)")
        let verdicts = Dictionary(uniqueKeysWithValues: try #require(tree["files"] as? [[String: Any]]).map { ($0["path"] as! String, $0["verdict"] as! String) })
        #expect(verdicts["a/"] == "unreadable" && verdicts["a/x.txt"] == "unreadable" && verdicts["a/deep/y.txt"] == "unreadable", "\(verdicts)")
        #expect(verdicts["b/z.txt"] == "modified" && verdicts["top.txt"] == "ok", "the rest is still checked: \(verdicts)")

        chmod(app + "/top.txt", 0o000)
        let file = try SignetTestSupport.run("setpriv", asNobody + [app + "/top.txt", "--pubkey", work.publicDER])
        chmod(app + "/top.txt", 0o644)
        #expect(file.status == 5, "\(file.status) \(file.stderr)")
        #expect(file.stdoutText.contains("unreadable") && file.stdoutText.contains("top.txt") && file.stdoutText.contains("permission denied"), "\(file.stdoutText) \(file.stderr)")
    }

    @Test("one overwrite rule: sign, pack, fetch, keygen and key show refuse an existing output (exit 5, nothing written) unless --force; pack skips its own output inside a packed folder")
    func overwriteRule() throws {
        let work = try Workspace()
        let file = try work.directory.write("app.tar", Data("release\n".utf8))
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        #expect(try CLI.run(["sign", file] + key).status == 0)
        let signature = try contents(file + ".sig")
        // An existing output: refused before any work, the old file untouched.
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: file))
        let again = try CLI.run(["sign", file] + key)
        #expect(again.status == 5 && again.stderr.contains("already exists") && again.stderr.contains("--force"), "\(again.stderr)")
        #expect(try contents(file + ".sig") == signature)
        let out = work.directory.file("other.sig")
        try Data("keep".utf8).write(to: URL(fileURLWithPath: out))
        #expect(try CLI.run(["sign", file, "--out", out] + key).status == 5)
        #expect(try contents(out) == Data("keep".utf8))
        #expect(try CLI.run(["sign", file, "--force"] + key).status == 0)
        #expect(try contents(file + ".sig") != signature)
        #expect(try CLI.run(["verify", file, "--pubkey", work.publicDER]).status == 0)

        // pack, run twice from inside the folder it packs: the second run needs --force, and the
        // package is not packed into itself.
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        try Data("a\n".utf8).write(to: URL(fileURLWithPath: src + "/a.txt"))
        let pack = ["pack", ".", "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", "r.zip", "--json"]
        #expect(try CLI.run(pack, directory: src).status == 0)
        let refused = try CLI.run(pack, directory: src)
        #expect(refused.status == 5 && refused.stderr.contains("'r.zip' already exists"), "\(refused.stderr)")
        let forced = try CLI.run(pack + ["--force"], directory: src)
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect((try forced.json()["files"] as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["a.txt"], "\(forced.stdoutText)")

        // key show --pubout and keygen follow the same rule.
        let pubout = try CLI.run(["key", "show", work.privatePEM, "--passphrase-file", work.passFile, "--pubout", work.publicDER])
        #expect(pubout.status == 5 && pubout.stderr.contains("--force"), "\(pubout.stderr)")
        let keygen = try CLI.run(["keygen", "--out", work.keys, "--bits", "2048", "--passphrase-file", work.passFile])
        #expect(keygen.status == 5 && keygen.stderr.contains("--force"), "\(keygen.stderr)")
        let before = try contents(work.privatePEM)
        #expect(try CLI.run(["keygen", "--out", work.keys, "--bits", "2048", "--passphrase-file", work.passFile, "--force"]).status == 0)
        #expect(try contents(work.privatePEM) != before)

        // fetch refuses before downloading anything (no server is needed to prove it).
        let fetched = work.directory.file("fetched.bin")
        try Data("mine".utf8).write(to: URL(fileURLWithPath: fetched))
        let fetch = try CLI.run(["fetch", "https://127.0.0.1:9/nothing", "--out", fetched])
        #expect(fetch.status == 5 && fetch.stderr.contains("already exists"), "\(fetch.stderr)")
        #expect(try contents(fetched) == Data("mine".utf8))
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
        let packed = try CLI.run(["pack", src, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "a", "--version", "1",
                                  "--expires", "2099-01-01", "--out", work.directory.file("a.zip"), "--json"])
        #expect(packed.status == 0, "\(packed.stderr)")
        #expect(try packed.json()["expires"] as? String == "2099-01-01T00:00:00Z")
        let bad = try CLI.run(["pack", src, "--key", work.privatePEM, "--name", "a", "--version", "1", "--expires", "2099-13-01", "--out", work.directory.file("b.zip")])
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
        let arguments: [String] = switch command {
        case "sign": ["sign", file, "--key", work.privatePEM, "--passphrase-file", fifo]
        case "pack": ["pack", file, "--key", work.privatePEM, "--passphrase-file", fifo, "--name", "a", "--version", "1", "--out", work.directory.file("a.zip")]
        default: ["fetch", "https://127.0.0.1:9/x", "--out", work.directory.file("x.bin"), "--signature", file, "--trust-dir", work.directory.file("t"),
                  "--trust-salt-file", fifo]
        }
        let script = """
        import signal, subprocess, sys, time
        def reset():
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        import os
        writer = os.open(sys.argv[1], os.O_RDWR)   # a writer that never writes: the reader waits
        p = subprocess.Popen(sys.argv[2:], preexec_fn=reset, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Interrupt once the command holds the FIFO open (it is then waiting in its read): a
        # fixed sleep was too short for a sanitizer build on a loaded machine.
        target = os.path.realpath(sys.argv[1])
        deadline = time.monotonic() + 120
        def waiting():
            try:
                return any(os.readlink(f"/proc/{p.pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{p.pid}/fd"))
            except OSError:
                return False
        while not waiting() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate()
        print(p.returncode)
        sys.stdout.write(err.decode())
        """
        let result = try SignetTestSupport.run("python3", ["-c", script, fifo, CLI.binary] + arguments)
        let lines = result.stdoutText.split(separator: "\n", maxSplits: 1).map(String.init)
        #expect(lines.first == "-2", "died of SIGINT: \(result.stdoutText) \(result.stderr)")
        let said = lines.count > 1 ? lines[1] : ""
        #expect(said.contains("signet: interrupted (SIGINT); "), "\(said)")
        let expected = ["sign": "no signature was written", "pack": "no package was written", "fetch": "run the same command again to resume"][command]!
        #expect(said.contains(expected), "\(said)")
    }

    @Test("--quiet prints nothing on success and what failed on failure; reverify --summary counts a copied tree's verdicts in a few lines")
    func quietAndSummary() throws {
        let work = try Workspace()
        let src = work.directory.file("src")
        try FileManager.default.createDirectory(atPath: src, withIntermediateDirectories: true)
        for index in 0..<12 { try Data("file \(index)\n".utf8).write(to: URL(fileURLWithPath: src + "/f\(index).txt")) }
        let package = work.directory.file("app.zip")
        let packed = try CLI.run(["pack", src, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--out", package, "--quiet"])
        #expect(packed.status == 0 && packed.stdout.isEmpty && packed.stderr.isEmpty, "\(packed.stdoutText) \(packed.stderr)")
        let app = work.directory.file("app")
        let unpacked = try CLI.run(["unpack", package, "--dest", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(unpacked.status == 0 && unpacked.stdout.isEmpty, "\(unpacked.stdoutText)")
        let clean = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(clean.status == 0 && clean.stdout.isEmpty, "\(clean.stdoutText)")
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: app + "/f3.txt"))
        let failed = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--quiet"])
        #expect(failed.status == 1 && failed.stdoutText.contains("modified        f3.txt"), "a failure still says what failed: \(failed.stdoutText)")

        // A tree copied with cp -r: the attributes are gone (and with them the record's use).
        let copy = work.directory.file("copy")
        #expect(try SignetTestSupport.run("cp", ["-r", app, copy]).status == 0)
        let summary = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--summary"])
        #expect(summary.status == 1)
        let lines = summary.stdoutText.split(separator: "\n")
        #expect(lines.count == 3, "one line per verdict and the result: \(summary.stdoutText)")
        #expect(summary.stdoutText.contains("attributes-lost 11: f0.txt, f1.txt, f10.txt, f11.txt, f2.txt, and 6 more"), "\(summary.stdoutText)")
        #expect(summary.stdoutText.contains("modified        1: f3.txt"), "\(summary.stdoutText)")
        // In JSON too (issue 49, point 14): five files of each verdict, every count.
        let json = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--summary", "--json"])
        let full = try CLI.run(["reverify", copy, "--pubkey", work.publicDER, "--json"])
        let tree = (try json.json()["trees"] as? [[String: Any]])?.first
        let files = tree?["files"] as? [[String: Any]] ?? []
        #expect(files.count == 6 && (tree?["counts"] as? [String: Int])?["attributes-lost"] == 11, "\(json.stdoutText)")
        #expect(json.stdout.count < full.stdout.count, "\(json.stdout.count) vs \(full.stdout.count)")
    }
}
