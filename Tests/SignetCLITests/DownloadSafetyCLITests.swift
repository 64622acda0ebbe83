import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// What a download keeps and trusts: a retry hashes only its own bytes, a partial another user
/// planted is never used, inspect downloads into a private folder, every answer is bounded by
/// what was asked and signed, and TLS mistakes are said as what they are.
@Suite("Downloads: retries, planted partials, private folders, bounded answers, TLS mistakes")
struct DownloadSafetyCLITests {
    // MARK: Point 7: a retried download restarts its hash

    @Test("fetch --signature: a retry that starts over hashes only the new attempt (hostile suffix refused, honest retry verified)")
    func retriedFetchHash() throws {
        let work = try Workspace()
        let body = CLIHelpers.randomData(300_000)
        let cut = 100_000
        // Hostile: the first K bytes, a cut; the retry is answered with 200 and only the rest.
        let hostile = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init(from: cut)]])
        try body.write(to: URL(fileURLWithPath: hostile.file("fw.bin")))
        #expect(try CLI.run(["sign", hostile.file("fw.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let out = work.directory.file("fw.bin")
        let refused = try CLI.run([
            "fetch", hostile.url("fw.bin"), "--out", out, "--signature", hostile.url("fw.bin.sig"),
            "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"
        ])
        #expect(refused.status == 1, "a suffix of the signed file must not verify: \(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out), "nothing renamed into place")
        #expect(hostile.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(hostile.requests)")

        // Honest: the connection drops once, the retry sends the whole file again.
        let honest = try ScriptedServer(script: ["fw.bin": [.init(length: body.count, cutAfter: cut), .init()]])
        try body.write(to: URL(fileURLWithPath: honest.file("fw.bin")))
        try FileManager.default.copyItem(atPath: hostile.file("fw.bin.sig"), toPath: honest.file("fw.bin.sig"))
        let verified = try CLI.run([
            "fetch", honest.url("fw.bin"), "--out", out, "--signature", honest.url("fw.bin.sig"),
            "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"
        ])
        #expect(verified.status == 0, "a genuine file after one dropped connection verifies: \(verified.stderr)")
        #expect(try contents(out) == body)
        #expect(honest.requests.filter { $0.hasPrefix("fw.bin ") }.count == 2, "\(honest.requests)")
    }

    @Test("unpack URL and inspect URL after a dropped connection: the honest retry installs, the hostile suffix is refused")
    func retriedPackageDownloads() throws {
        let work = try Workspace()
        let staging = try TemporaryDirectory()
        let package = staging.file("app.zip")
        try CLIHelpers.pack(work, ["a.bin": CLIHelpers.randomData(150_000), "b.bin": CLIHelpers.randomData(150_000)], out: package)
        let size = try contents(package).count
        let cut = size / 3
        for (honest, name) in [(true, "honest"), (false, "hostile")] {
            let retry: ScriptedServer.Answer = honest ? .init() : .init(from: cut)
            let server = try ScriptedServer(script: [
                "app.zip": [
                    .init(length: size, cutAfter: cut), retry,
                    .init(length: size, cutAfter: cut), retry
                ]
            ])
            try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
            let dest = work.directory.file("dest-" + name)
            let unpack = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            let inspect = try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"])
            if honest {
                #expect(unpack.status == 0, "\(unpack.stderr)")
                #expect(inspect.status == 0, "\(inspect.stderr)")
            } else {
                #expect(unpack.status != 0 && !FileManager.default.fileExists(atPath: dest), "\(unpack.status) \(unpack.stderr)")
                #expect(inspect.status != 0, "\(inspect.stderr)")
            }
            // Nothing beside DIR: no download, and no lock beside a DIR that was never made.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: work.directory.path)
                .filter { $0.contains("signet-") && !isKeptBesideDestination($0) }
            #expect(leftovers.isEmpty, "\(leftovers)")
        }
    }

    @Test("a partial download planted by another user in a shared folder is never used: root replaces it, another user is refused")
    func plantedPartials() throws {
        guard geteuid() == 0 else { print("skipped: needs root to act as other users"); return }
        let work = try Workspace()
        let body = CLIHelpers.randomData(200_000)
        let server = try ScriptedServer(script: [:])
        try body.write(to: URL(fileURLWithPath: server.file("fw.bin")))
        #expect(try CLI.run(["sign", server.file("fw.bin"), "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        // A shared sticky folder, as /tmp is.
        let shared = work.directory.file("shared")
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        chmod(work.directory.path, 0o755)
        chmod(shared, 0o1777)
        // Another user plants the partial: mode 0666, with the first bytes of the file.
        let planted = shared + "/.fw.bin.signet-download"
        let plant = try CLIHelpers.asUser(65534, "/bin/sh", ["-c", "umask 0; head -c 1000 /dev/zero > '\(planted)'; chmod 666 '\(planted)'"])
        #expect(plant?.status == 0, "\(plant?.stderr ?? "")")
        let out = shared + "/fw.bin"
        let fetched = try CLI.run([
            "fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
            "--pubkey", work.publicDER, "--allow-http", "--retry-delay", "0"
        ])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        #expect(try contents(out) == body)
        let info = try FileManager.default.attributesOfItem(atPath: out)
        #expect((info[.ownerAccountID] as? Int) == 0, "the file is root's, not the planting user's: \(info)")
        #expect(((info[.posixPermissions] as? Int) ?? 0) & 0o022 == 0, "not writable by others")
        #expect(!FileManager.default.fileExists(atPath: planted))

        // A user who cannot remove another user's file in a sticky folder is refused (exit 5).
        let again = try CLIHelpers.asUser(65534, "/bin/sh", ["-c", "umask 0; head -c 1000 /dev/zero > '\(planted)'"])
        #expect(again?.status == 0)
        try FileManager.default.moveItem(atPath: planted, toPath: shared + "/.fw2.bin.signet-download")
        let denied = try CLIHelpers.asUser(65533, CLI.binary, ["fetch", server.url("fw.bin"), "--out", shared + "/fw2.bin", "--allow-http", "--json"])
        #expect(denied?.status == 5, "\(denied?.status ?? -1) \(denied?.stderr ?? "")")
        #expect(denied?.stderr.contains("not a download this user made") == true, "\(denied?.stderr ?? "")")
        #expect(!FileManager.default.fileExists(atPath: shared + "/fw2.bin"))
    }

    @Test("inspect URL downloads into a private folder: a planted file at the old predictable name is never read")
    func inspectPrivateFolder() throws {
        let work = try Workspace()
        let server = try ScriptedServer(script: [:])
        try CLIHelpers.pack(work, ["a.txt": Data("genuine\n".utf8)], sequence: 7, out: server.file("app.zip"))
        let tmp = work.directory.file("tmp")
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        // An older signed package planted where inspect once downloaded to, with a record that
        // claims it is a partial download of the URL.
        let old = work.directory.file("old.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("old\n".utf8)], sequence: 3, out: old)
        let url = server.url("app.zip")
        let hash = try run("bash", ["-c", "printf %s '\(url)' | sha256sum | head -c 16"]).stdoutText
        let planted = tmp + "/signet-download-" + hash
        try FileManager.default.copyItem(atPath: old, toPath: planted)
        let inspected = try CLI.run(["inspect", url, "--pubkey", work.publicDER, "--allow-http", "--json"], environment: ["TMPDIR": tmp])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect((try inspected.json()["sequence"] as? Int) == 7, "the served package, not the planted one: \(inspected.stdoutText)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp) == ["signet-download-" + hash], "nothing of inspect's is left")
    }

    // MARK: Points 3, 4, 5: leftovers, --dest ., the download waits

    @Test("nothing is left after a TLS refusal or an HTTP error; a finished fetch carries no partial-download attribute")
    func noLeftovers() throws {
        let server = try CLIHelpers.shared.get()
        let work = try Workspace()
        _ = try server.directory.writeRandom("www/file.bin", count: 100_000)
        try CLIHelpers.pack(work, ["a.txt": Data("a\n".utf8)], out: server.www + "/app.zip")
        let dir = work.directory.path
        func leftovers() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix(".") && $0.contains("signet-") } }
        // TLS refused: the server's chain is not under this root.
        let fetchRefused = try CLI.run(["fetch", server.url("file.bin"), "--out", dir + "/file.bin", "--tls-ca", server.otherRoot])
        #expect(fetchRefused.status == 3, "\(fetchRefused.stderr)")
        let unpackRefused = try CLI.run(["unpack", server.url("app.zip"), "--dest", dir + "/app", "--pubkey", work.publicDER, "--tls-ca", server.otherRoot])
        #expect(unpackRefused.status == 3, "\(unpackRefused.stderr)")
        let notFound = try CLI.run(["unpack", server.url("missing.zip"), "--dest", dir + "/app", "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(notFound.status == 5, "\(notFound.stderr)")
        #expect(try leftovers() == [])
        // A finished fetch: the file has no user.signet.download.
        let fetched = try CLI.run(["fetch", server.url("file.bin"), "--out", dir + "/file.bin", "--tls-ca", server.root])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let attributes = try run("getfattr", ["-d", "-m", "-", dir + "/file.bin"]).stdoutText
        #expect(!attributes.contains("user.signet.download"), "\(attributes)")
        #expect(try leftovers() == [])
    }

    // MARK: Point 14: TLS names and anchors, huge headers, an overall deadline

    @Test(
        "TLS: a leaf without subjectAltName (CN=localhost only) is refused; --tls-ca takes CA certificates only; a 200 KB header and --max-time are explained")
    func tlsAndLimits() throws {
        let nginx = try CLIHelpers.shared.get()
        let work = try TemporaryDirectory()
        let d = nginx.directory.path
        // A leaf for localhost with the name only in its CN, issued by the test intermediate.
        let made = try run(
            "bash",
            [
                "-c",
                """
                set -e; cd '\(d)'
                openssl req -newkey rsa:2048 -nodes -keyout cn.key -out cn.csr -subj "/CN=localhost" 2>/dev/null
                printf "extendedKeyUsage=serverAuth\\n" > cn.ext
                openssl x509 -req -in cn.csr -CA int.pem -CAkey int.key -CAcreateserial -out cn.pem -days 30 -extfile cn.ext 2>/dev/null
                cat cn.pem int.pem > cn-chain.pem
                """
            ])
        #expect(made.status == 0, "\(made.stderr)")
        let cnOnly = try ScriptedServer(script: [:], tls: (nginx.directory.file("cn-chain.pem"), nginx.directory.file("cn.key")))
        try Data("x".utf8).write(to: URL(fileURLWithPath: cnOnly.file("f.txt")))
        let refused = try CLI.run(["fetch", cnOnly.url("f.txt"), "--out", work.file("f.txt"), "--tls-ca", nginx.root])
        #expect(refused.status == 3 && refused.stderr.contains("subjectAltName"), "\(refused.status) \(refused.stderr)")
        // The same chain with a SAN is accepted (the refusal is about the name, not the chain).
        try Data("y".utf8).write(to: URL(fileURLWithPath: nginx.www + "/f.txt"))
        #expect(try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("g.txt"), "--tls-ca", nginx.root]).status == 0)

        // A server certificate given as a trust anchor: refused, pointing at --tls-cert.
        let leafAsCA = try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("h.txt"), "--tls-ca", nginx.leaf])
        #expect(leafAsCA.status == 4 && leafAsCA.stderr.contains("--tls-cert"), "\(leafAsCA.status) \(leafAsCA.stderr)")
        #expect(
            try CLI.run(["fetch", nginx.url("f.txt"), "--out", work.file("i.txt"), "--tls-ca", nginx.intermediate]).status == 0,
            "an intermediate CA may anchor the chain (documented)")

        // A response header of 200 KB.
        let big = try ScriptedServer(script: ["f.txt": [.init(headers: ["X-Big": String(repeating: "a", count: 200_000)])]])
        try Data("z".utf8).write(to: URL(fileURLWithPath: big.file("f.txt")))
        let header = try CLI.run(["fetch", big.url("f.txt"), "--out", work.file("j.txt"), "--allow-http", "--retries", "0"])
        #expect(header.status == 5 && header.stderr.contains("larger than libcurl accepts"), "\(header.status) \(header.stderr)")

        // An overall deadline: a server (same pins as nginx) that sends 100 KB of 3 MB and then
        // nothing until the test lets it go on; --max-time's least, 1 s, is the only wait.
        let stalling = try ScriptedServer(script: ["big.bin": [.init(pauses: [.init(after: 100_000)])]], tls: nginx.tls)
        _ = try stalling.directory.writeRandom("www/big.bin", count: 3_000_000)
        let started = Date()
        let slow = try CLI.run(["fetch", stalling.url("big.bin"), "--out", work.file("big.bin"), "--tls-ca", nginx.root, "--max-time", "1"])
        #expect(slow.status == 5 && slow.stderr.contains("--max-time 1"), "\(slow.status) \(slow.stderr)")
        #expect(Date().timeIntervalSince(started) < 10)
        try stalling.release()
        #expect(stalling.finished() == "disconnected", "the client had given up")
        #expect(FileManager.default.fileExists(atPath: work.file(".big.bin.signet-download")), "what arrived is kept")
    }

    /// Point 12: the probe asks for the last 65,557 bytes; a server answered `206 bytes
    /// 0-(N-1)/N` with 768 MiB and Signet held it all (1.09 GB peak RSS) before refusing.
    @Test("a probe answered with the whole file as one 206 part is refused at its first byte, with a flat peak RSS")
    func probeAnsweredWhole() throws {
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true, suffixFromStart: true)]])
        try CLIHelpers.bigFile(server.file("app.zip"))
        let dest = try TemporaryDirectory()
        let arguments = [
            "unpack", server.url("app.zip"), "--dest", dest.file("app"), "--pubkey", CLIHelpers.examplePublicKey,
            "--allow-http", "--retries", "0"
        ]
        let result = try CLI.run(arguments + ["--json"])
        #expect(result.status == 5, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("last 65557 bytes"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dest.file("app")))
        // 128 MiB held would show; refused at the first byte, the peak is Signet's own.
        let peak = try CLI.peakRSS(arguments, status: 5)
        // (AddressSanitizer's own memory is about 90 MiB: still far below 128 MiB held.)
        #expect(peak < (CLI.underAddressSanitizer ? 160 << 10 : 64 << 10), "peak RSS \(peak) KiB")
        #expect(server.requests.count <= 2, "\(server.requests)")
    }

    /// Point 12: `--max-download-size` was never applied on the ranged path.
    @Test("--max-download-size applies on the ranged path: a package larger than it is refused after the probe's headers")
    func maximumSizeOverRanges() throws {
        let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true)]])
        try CLIHelpers.bigFile(server.file("app.zip"))
        let dest = try TemporaryDirectory()
        let result = try CLI.run([
            "unpack", server.url("app.zip"), "--dest", dest.file("app"), "--pubkey", CLIHelpers.examplePublicKey,
            "--allow-http", "--retries", "0", "--max-download-size", "1000000", "--json"
        ])
        #expect(result.status == 4, "\(result.status) \(result.stderr)")
        #expect((try? result.json()["error"] as? [String: Any])?["code"] as? String == "download-too-large", "\(result.stdoutText)")
        #expect(result.stderr.contains("--max-download-size"), "\(result.stderr)")
        #expect(server.requests.count == 1, "\(server.requests)")
    }

    @Test("points 2-3: --tls-ca given a public key or a package-key directory says so; a refusal names the system CA store")
    func tlsCAMistakes() throws {
        let work = try Workspace()
        let server = try HTTPSServer.site("DownloadSafetyCLITests")
        try FileManager.default.copyItem(atPath: try CLIHelpers.package(work), toPath: server.www + "/app.zip")
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

}
