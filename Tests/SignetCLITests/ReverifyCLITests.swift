import Foundation
import Testing
import SignetTestSupport

@Suite("signet reverify / status, run as a binary")
struct ReverifyCLITests {
    /// Packs and installs a small tree; returns the installed directory.
    static func install(_ work: Workspace, ima: Bool = false) throws -> String {
        let root = try PackCLITests.tree(work)
        let package = work.directory.file("app.zip")
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        #expect(try CLI.run(["pack", root] + key + ["--name", "app", "--version", "2.0", "--sequence", "20", "--out", package]).status == 0)
        let dest = work.directory.file("opt/app")
        let unpacked = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER] + (ima ? ["--ima", "user"] : []))
        #expect(unpacked.status == 0, "\(unpacked.stderr)")
        return dest
    }

    @Test("a tree: ok (0), a tampered file named (1), --repair restores a stripped attribute, JSON counts")
    func tree() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        let ok = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(ok.status == 0, "\(ok.stdoutText) \(ok.stderr)")
        #expect(ok.stdoutText.contains("OK \(app): app 2.0 (sequence 20): 2 ok"))

        try work.directory.write("opt/app/app.conf", Data("tampered\n".utf8))
        #expect(try SignetTestSupport.run("setfattr", ["-x", "user.signet.sig", app + "/img/logo.png"]).status == 0)
        let bad = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--json"])
        #expect(bad.status == 1)
        let tree = try #require((try bad.json()["trees"] as? [[String: Any]])?.first)
        #expect(tree["counts"] as? [String: Int] == ["modified": 1, "attributes-lost": 1])
        // One name for where the lost signature is restored from (issue 29): the tree's record.
        let lost = try #require((tree["files"] as? [[String: Any]])?.first { $0["verdict"] as? String == "attributes-lost" })
        #expect(lost["signature"] as? String == "record")
        #expect((lost["detail"] as? String)?.contains("--repair restores it from .signet/signatures") == true, "\(lost)")
        let help = try CLI.run(["help", "reverify"])
        #expect(help.stdoutText.contains("DIR/.signet/signatures") && !help.stdoutText.contains(".signet/sigs/ after"), "\(help.stdoutText)")
        let human = try CLI.run(["reverify", app, "--pubkey", work.publicDER])
        #expect(human.stdoutText.contains("modified        app.conf"))
        #expect(human.stdoutText.contains("attributes-lost img/logo.png"))

        let repaired = try CLI.run(["reverify", app, "--pubkey", work.publicDER, "--repair", "--exclude", "*.conf"])
        #expect(repaired.status == 0, "\(repaired.stdoutText)")
        #expect(repaired.stdoutText.contains("repaired"))
        #expect(repaired.stdoutText.contains("restored from .signet/signatures"), "\(repaired.stdoutText)")
        #expect(try SignetTestSupport.run("getfattr", ["-n", "user.signet.sig", app + "/img/logo.png"]).status == 0)

        let other = try Workspace()
        #expect(try CLI.run(["reverify", app, "--pubkey", other.publicDER]).status == 3)
        #expect(try CLI.run(["reverify", work.directory.path, "--pubkey", work.publicDER]).status == 2, "not an installed tree")
        #expect(try CLI.run(["reverify", app]).status == 2, "a trusted key is required")
    }

    @Test("files and status: where a file came from, verified or not")
    func filesAndStatus() throws {
        let work = try Workspace()
        let app = try Self.install(work)
        let file = app + "/img/logo.png"
        #expect(try CLI.run(["reverify", file, "--pubkey", work.publicDER]).status == 0)
        let status = try CLI.run(["status", file, "--pubkey", work.publicDER, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let entry = try #require((try status.json()["files"] as? [[String: Any]])?.first)
        #expect(entry["package"] as? String == "app")
        #expect(entry["version"] as? String == "2.0")
        #expect(entry["sequence"] as? Int == 20)
        #expect(entry["package_path"] as? String == "img/logo.png")
        #expect(entry["key_id"] as? String == work.keyID)
        #expect(entry["verdict"] as? String == "ok")
        let unchecked = try CLI.run(["status", file])
        #expect(unchecked.status == 0)
        #expect(unchecked.stdoutText.contains("not checked"))
        let plain = try CLI.run(["status", try work.directory.write("plain.txt", Data("x".utf8))])
        #expect(plain.status == 1)
        #expect(plain.stdoutText.contains("not installed by Signet"))
        // A file that cannot be opened is reported as such (not as "not installed"), and the
        // other files are still shown.
        let missing = try CLI.run(["status", work.directory.file("absent.png"), file, "--json"])
        #expect(missing.status == 5, "a missing file is an environment error")
        let shown = try #require(try missing.json()["files"] as? [[String: Any]])
        #expect(shown.map { $0["verdict"] as? String } == ["unreadable", "not-checked"])
        #expect((shown.first?["detail"] as? String)?.contains("no such file") == true)
        let link = work.directory.file("link.png")
        symlink(file, link)
        let linked = try CLI.run(["reverify", link, "--pubkey", work.publicDER, "--json"])
        #expect(linked.status == 4, "a link given as a file is malformed input: never followed")
        #expect((try linked.json()["files"] as? [[String: Any]])?.first?["verdict"] as? String == "unreadable")
    }

    @Test("unpack --ima user: evmctl ima_verify accepts the files")
    func ima() throws {
        let work = try Workspace()
        let app = try Self.install(work, ima: true)
        let evmctl = try which("evmctl")
        let verified = try SignetTestSupport.run(evmctl, ["ima_verify", "--xattr-user", "--key", work.certificate, app + "/app.conf"])
        #expect(verified.status == 0, "\(verified.stdoutText) \(verified.stderr)")
    }

    @Test("an app in a package of its own (examples/reverify-app) builds against the SignetReverify product, links neither libzip nor libcurl, and re-verifies as signet does")
    func reverifyOnlyApp() throws {
        // Built as a user builds it: its own Package.swift, this checkout as a path dependency.
        let built = try SignetTestSupport.run(UpdateCLITests.repository + "/scripts/example-app.sh", [], timeout: 900)
        try #require(built.status == 0, "\(built.stderr)")
        let app = built.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        // What the dynamic linker loads: libcurl is never linked by Signet (it is dlopened on a
        // first download), libzip is, by the archive layer; neither may reach this app. libcrypto
        // must: the check would pass vacuously for a binary ldd cannot read.
        let linked = try SignetTestSupport.run("ldd", [app])
        #expect(linked.status == 0, "\(linked.stderr)")
        let libraries = linked.stdoutText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(libraries.contains { $0.hasPrefix("libcrypto.so") }, "\(linked.stdoutText)")
        #expect(!libraries.contains { $0.hasPrefix("libzip.so") || $0.hasPrefix("libcurl") }, "\(linked.stdoutText)")
        // The signet binary does link libzip: the same check tells them apart.
        #expect(try SignetTestSupport.run("ldd", [CLI.binary]).stdoutText.contains("libzip.so"))

        let work = try Workspace()
        let tree = try Self.install(work)
        let ok = try SignetTestSupport.run(app, [work.publicDER, tree])
        #expect(ok.status == 0 && ok.stdoutText.contains("2 files, ok"), "\(ok.stdoutText) \(ok.stderr)")
        try work.directory.write("opt/app/app.conf", Data("tampered\n".utf8))
        let bad = try SignetTestSupport.run(app, [work.publicDER, tree])
        #expect(bad.status == 1 && bad.stdoutText.contains("modified app.conf"), "\(bad.stdoutText) \(bad.stderr)")
    }
}
