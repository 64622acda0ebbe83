import Foundation
import Testing
import SignetTestSupport

/// Issue 41: a third pass as new users (a device maker setting up a fleet, a release engineer
/// wiring Signet into CI). Each test is a mistake as the user made it, and what Signet says.
@Suite("a new user's third pass (issue 41), run as a binary")
struct NewUser3CLITests {
    /// A package of two files, signed with the workspace's key.
    static func package(_ work: Workspace, sequence: String = "7") throws -> String {
        let root = try PackCLITests.tree(work)
        let package = work.directory.file("app-\(sequence).zip")
        let packed = try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", "app", "--version", "1", "--sequence", sequence, "--out", package])
        guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
        return package
    }

    @Test("point 1: a mistyped --trust-dir with --trust-salt-file is a wrong path (exit 5), not a broken seal")
    func mistypedTrustDirectoryWithSalt() throws {
        let work = try Workspace()
        let package = try Self.package(work)
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

    @Test("points 2-3: --tls-ca given a public key or a package-key directory says so; a refusal names the system CA store")
    func tlsCAMistakes() throws {
        let work = try Workspace()
        let server = try HTTPSServer()
        try FileManager.default.copyItem(atPath: try Self.package(work), toPath: server.www + "/app.zip")
        let unpack = ["unpack", server.url("app.zip"), "--dest", work.directory.file("app"), "--pubkey", work.publicDER]

        try work.openssl(["pkey", "-pubin", "-inform", "DER", "-in", work.publicDER, "-out", "public.pem"])
        for key in [work.publicDER, work.directory.file("public.pem")] {
            let given = try CLI.run(unpack + ["--tls-ca", key])
            #expect(given.status == 4, "\(given.stderr)")
            #expect(given.stderr.contains("is a public key, not a certificate") && given.stderr.contains("--tls-pin"), "\(given.stderr)")
            #expect(!given.stderr.contains("asn1") && !given.stderr.contains("serialNumber"), "no ASN.1 stack: \(given.stderr)")
        }
        let privateKey = try CLI.run(unpack + ["--tls-ca", work.privatePEM])
        #expect(privateKey.status == 4 && privateKey.stderr.contains("is a private key, not a certificate"), "\(privateKey.stderr)")
        let leaf = try CLI.run(unpack + ["--tls-cert", work.publicDER])
        #expect(leaf.status == 4 && leaf.stderr.contains("--tls-cert takes the server's own certificate"), "\(leaf.stderr)")

        // The sealed directory of package keys, salted or not.
        let salt = try work.directory.write("salt", Data(repeating: 9, count: 32), mode: 0o600)
        for (name, seal) in [("trust", ["--salt-file", salt]), ("trust-plain", [])] {
            let trust = work.directory.file(name)
            try FileManager.default.createDirectory(atPath: trust, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: work.publicDER, toPath: trust + "/release.der")
            #expect(try CLI.run(["trust", "seal", trust] + seal).status == 0)
            let given = try CLI.run(unpack + ["--tls-ca", trust])
            #expect(given.status == 4, "\(given.stderr)")
            #expect(given.stderr.contains("is a trust directory of public keys") && given.stderr.contains("--trust-dir"), "\(given.stderr)")
            #expect(!given.stderr.contains("salt"), "\(given.stderr)")
        }

        // Without --tls-ca the system store is used, and the refusal says so.
        let system = try CLI.run(unpack)
        #expect(system.status == 3, "\(system.stderr)")
        #expect(system.stderr.contains("system's CA store") && system.stderr.contains("--tls-ca"), "\(system.stderr)")
        let pinned = try CLI.run(unpack + ["--tls-ca", server.otherRoot])
        #expect(pinned.status == 3 && pinned.stderr.contains("against the --tls-ca roots only"), "\(pinned.stderr)")
        #expect(try CLI.run(unpack + ["--tls-ca", server.root]).status == 0)
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
            ["pack", work.path, "--key", work.privatePEM, "--pin-value", secret, "--name", "a", "--version", "1"],
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

    @Test("point 5: a TOML string without quotes is named, with its line")
    func unquotedTOMLValue() throws {
        let work = try Workspace()
        let config = try work.directory.write("app.conf", Data("channel = \"stable\"\ntls-ca = /etc/app/roots.pem\n".utf8))
        let result = try CLI.run(["update", "--config", config])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("app.conf:2:") && result.stderr.contains("not quoted")
                && result.stderr.contains(#"tls-ca = "/etc/app/roots.pem""#), "\(result.stderr)")
        #expect(!result.stderr.contains("could not determine value type"), "\(result.stderr)")
    }

    @Test("point 6: a read-only DIR under the systemd unit names the ReadWritePaths= drop-in")
    func readOnlyUnderSystemd() throws {
        let work = try Workspace()
        let package = try Self.package(work)
        let readOnly = work.directory.file("ro")
        try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: true)
        #expect(try SignetTestSupport.run("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readOnly]).status == 0)
        defer { _ = try? SignetTestSupport.run("umount", [readOnly]) }
        let dest = readOnly + "/app"

        // Outside systemd: the filesystem is read-only.
        let plain = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER], environment: ["INVOCATION_ID": nil])
        #expect(plain.status == 5 && plain.stderr.contains("remount it read-write"), "\(plain.stderr)")

        // As systemd runs the unit: $INVOCATION_ID set, in the unit's cgroup.
        let (root, mountedHere) = try Self.cgroup2Root(work)
        defer { if mountedHere { _ = try? SignetTestSupport.run("umount", [root]) } }
        let cgroup = root + "/signet-test-\(getpid()).slice/signet-update@app.service"
        try FileManager.default.createDirectory(atPath: cgroup, withIntermediateDirectories: true)
        defer { _ = rmdir(cgroup); _ = rmdir((cgroup as NSString).deletingLastPathComponent) }
        let script = "echo $$ > '\(cgroup)/cgroup.procs' && exec \"$@\""
        let unit = try SignetTestSupport.run("sh", ["-c", script, "sh", CLI.binary, "unpack", package, "--dest", dest, "--pubkey", work.publicDER],
                                             environment: ["INVOCATION_ID": "0123456789abcdef0123456789abcdef"])
        #expect(unit.status == 5, "\(unit.stderr)")
        #expect(unit.stderr.contains("systemctl edit signet-update@app.service") && unit.stderr.contains("ReadWritePaths=\(readOnly)"), "\(unit.stderr)")
        #expect(!unit.stderr.contains("remount"), "\(unit.stderr)")
    }

    @Test("point 8: pack --exclude leaves files and folders out; detached signatures packed as resources are warned about")
    func packExclude() throws {
        let work = try Workspace()
        let root = work.directory.file("dist")
        try FileManager.default.createDirectory(atPath: root + "/bin", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/tmp/deep", withIntermediateDirectories: true)
        for name in ["app.conf", "bin/tool", "bin/helper"] { _ = try work.directory.write("dist/" + name, Data("\(name)\n".utf8)) }
        _ = try work.directory.write("dist/tmp/deep/scratch", Data("x".utf8))
        #expect(try CLI.run(["sign", root + "/app.conf", root + "/bin/tool", root + "/bin/helper", "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--sequence", "3"]

        let all = try CLI.run(["pack", root] + key + ["--out", work.directory.file("all.zip"), "--json"])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(((try all.json()["files"]) as? [Any])?.count == 7)
        #expect(all.stderr.contains("3 resources are detached signatures of another resource") && all.stderr.contains("--exclude '*.sig'"), "\(all.stderr)")

        let out = work.directory.file("app.zip")
        let some = try CLI.run(["pack", root] + key + ["--exclude", "*.sig", "--exclude", "tmp/", "--out", out, "--json"])
        #expect(some.status == 0, "\(some.stderr)")
        #expect(!some.stderr.contains("detached"), "\(some.stderr)")
        let paths = ((try some.json()["files"]) as? [[String: Any]])?.compactMap { $0["path"] as? String }
        #expect(paths == ["app.conf", "bin/helper", "bin/tool"], "\(String(describing: paths))")
        // What unzip sees: the three resources and Signet's own entries, nothing excluded.
        let listed = try SignetTestSupport.run("unzip", ["-Z1", out]).stdoutText.split(separator: "\n").map(String.init)
        #expect(!listed.contains { $0.hasPrefix("tmp/") || (!$0.hasPrefix(".signet/") && $0.hasSuffix(".sig")) }, "\(listed)")
        #expect(try CLI.run(["unpack", out, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)

        // Anchored patterns as elsewhere: 'bin/helper' only that file; nothing left is exit 2.
        let one = try CLI.run(["pack", root] + key + ["--exclude", "*.sig", "--exclude", "/bin/helper", "--exclude", "tmp", "--out", work.directory.file("one.zip"), "--json"])
        #expect(((try one.json()["files"]) as? [[String: Any]])?.compactMap { $0["path"] as? String } == ["app.conf", "bin/tool"])
        let none = try CLI.run(["pack", root] + key + ["--exclude", "*", "--out", work.directory.file("none.zip")])
        #expect(none.status == 2 && none.stderr.contains("--exclude leaves no file"), "\(none.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("none.zip")))
    }

    @Test("point 9: pack says where the sequence came from, in text and JSON")
    func sequenceSource() throws {
        let work = try Workspace()
        let root = try PackCLITests.tree(work)
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1", "--force"]
        let out = ["--out", work.directory.file("app.zip")]
        let now = Int(Date().timeIntervalSince1970)

        let timed = try CLI.run(["pack", root] + key + out, environment: ["SOURCE_DATE_EPOCH": nil])
        #expect(timed.status == 0 && timed.stdoutText.contains("is the current Unix time (no --sequence given)")
                && timed.stdoutText.contains("--sequence N"), "\(timed.stdoutText)")
        let timedJSON = try CLI.run(["pack", root] + key + out + ["--json"], environment: ["SOURCE_DATE_EPOCH": nil]).json()
        #expect(timedJSON["sequence_source"] as? String == "time")
        #expect(((timedJSON["sequence"] as? Int) ?? 0) >= now)

        let epoch = try CLI.run(["pack", root] + key + out, environment: ["SOURCE_DATE_EPOCH": "1700000000"])
        #expect(epoch.stdoutText.contains("sequence 1700000000 is SOURCE_DATE_EPOCH"), "\(epoch.stdoutText)")
        let epochJSON = try CLI.run(["pack", root] + key + out + ["--json"], environment: ["SOURCE_DATE_EPOCH": "1700000000"]).json()
        #expect(epochJSON["sequence_source"] as? String == "source-date-epoch" && epochJSON["sequence"] as? Int == 1_700_000_000)

        let given = try CLI.run(["pack", root] + key + out + ["--sequence", "142"])
        #expect(given.status == 0 && !given.stdoutText.contains("no --sequence"), "\(given.stdoutText)")
        let givenJSON = try CLI.run(["pack", root] + key + out + ["--sequence", "143", "--json"]).json()
        #expect(givenJSON["sequence_source"] as? String == "option" && givenJSON["sequence"] as? Int == 143)
    }

    /// A writable cgroup v2 hierarchy: the one mounted, or one mounted for the test.
    static func cgroup2Root(_ work: Workspace) throws -> (path: String, mountedHere: Bool) {
        let mounts = try String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)
        if let line = mounts.split(separator: "\n").first(where: { $0.split(separator: " ").count > 2 && $0.split(separator: " ")[2] == "cgroup2" }) {
            return (String(line.split(separator: " ")[1]), false)
        }
        let mountPoint = work.directory.file("cgroup2")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let mounted = try SignetTestSupport.run("mount", ["-t", "cgroup2", "none", mountPoint])
        guard mounted.status == 0 else { throw SupportError("no cgroup v2 hierarchy, and mounting one failed: \(mounted.stderr)") }
        return (mountPoint, true)
    }
}
