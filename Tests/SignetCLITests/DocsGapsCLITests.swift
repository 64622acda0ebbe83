import Foundation
import Testing
import SignetTestSupport

/// Issue 17, point 4: what the docs promised and the tool did not do.
@Suite("Gaps between the docs and the tool, run as a binary")
struct DocsGapsCLITests {
    /// A bare package made by openssl dgst and Info-ZIP zip: a.txt and sub/b.txt with .sig
    /// files beside them (and, with `unsigned`, c.txt without one).
    static func barePackage(_ work: Workspace, unsigned: Bool = false, name: String = "bare.zip", text: String = "alpha\n") throws -> String {
        let root = work.directory.file("bare-" + name)
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/a.txt"))
        try Data("beta\n".utf8).write(to: URL(fileURLWithPath: root + "/sub/b.txt"))
        for file in ["a.txt", "sub/b.txt"] {
            try work.openssl(["dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", root + "/" + file + ".sig", root + "/" + file])
        }
        var entries = ["a.txt", "a.txt.sig", "sub/b.txt", "sub/b.txt.sig"]
        if unsigned {
            try Data("gamma\n".utf8).write(to: URL(fileURLWithPath: root + "/c.txt"))
            entries.append("c.txt")
        }
        let package = work.directory.file(name)
        let zipped = try SignetTestSupport.run("zip", ["-q", package] + entries, directory: root)
        guard zipped.status == 0 else { throw SupportError(zipped.stderr) }
        return package
    }

    @Test("inspect --bare lists the files and whether each is signed; with a key it verifies each, as unpack --bare does")
    func inspectBare() throws {
        let work = try Workspace()
        let package = try Self.barePackage(work)
        let plain = try CLI.run(["inspect", package])
        #expect(plain.status == 1 && plain.stderr.contains("--bare"), "no manifest (exit 1), and the hint: \(plain.stderr)")
        let listed = try CLI.run(["inspect", package, "--bare", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let files = try #require(try listed.json()["files"] as? [[String: Any]])
        #expect(files.map { "\($0["path"]!):\($0["signed"]!)" } == ["a.txt:1", "sub/b.txt:1"])
        #expect(try listed.json()["verdict"] as? String == "not-checked")
        let verified = try CLI.run(["inspect", package, "--bare", "--pubkey", work.publicDER])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdoutText.contains("verified:  yes"))
        // Another key: exit 1 naming the file; an unsigned file: exit 1 with or without keys.
        let other = try Workspace()
        let wrong = try CLI.run(["inspect", package, "--bare", "--pubkey", other.publicDER, "--json"])
        #expect(wrong.status == 1)
        #expect((try wrong.json()["error"] as? [String: Any])?["entry"] as? String == "a.txt")
        let withUnsigned = try Self.barePackage(work, unsigned: true, name: "unsigned.zip")
        #expect(try CLI.run(["inspect", withUnsigned, "--bare"]).status == 1)
        let refused = try CLI.run(["inspect", withUnsigned, "--bare", "--pubkey", work.publicDER])
        #expect(refused.status == 1 && refused.stderr.contains("'c.txt' has no signature"), "\(refused.stderr)")
    }

    @Test("a tree installed with --bare is re-verified (modified, added, missing) and upgraded like others")
    func bareTrees() throws {
        let work = try Workspace()
        let package = try Self.barePackage(work)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--bare", "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let ok = try CLI.run(["reverify", dest, "--pubkey", work.publicDER])
        #expect(ok.status == 0, "\(ok.stdoutText) \(ok.stderr)")
        #expect(ok.stdoutText.contains("bare package") && ok.stdoutText.contains("2 ok"))
        try Data("changed\n".utf8).write(to: URL(fileURLWithPath: dest + "/a.txt"))
        try Data("new\n".utf8).write(to: URL(fileURLWithPath: dest + "/new.txt"))
        try FileManager.default.removeItem(atPath: dest + "/sub/b.txt")
        let bad = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--json"])
        #expect(bad.status == 1)
        let verdicts = try #require((try bad.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]])
            .map { "\($0["path"]!)=\($0["verdict"]!)" }
        #expect(verdicts == ["a.txt=modified", "new.txt=added", "sub/b.txt=missing"])
        let status = try CLI.run(["status", dest + "/a.txt"])
        #expect(status.stdoutText.contains("a bare package"), "\(status.stdoutText)")
        // The next bare release, then a signed package, replace it without --force.
        let next = try Self.barePackage(work, name: "bare-2.zip", text: "alpha 2\n")
        let again = try CLI.run(["unpack", next, "--bare", "--dest", dest, "--pubkey", work.publicDER])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "alpha 2\n")
        #expect(!FileManager.default.fileExists(atPath: dest + "/new.txt"), "replaced as a whole")
        let signed = work.directory.file("signed.zip")
        #expect(try CLI.run(["pack", try PackCLITests.tree(work), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                             "--name", "app", "--version", "1", "--out", signed]).status == 0)
        let upgraded = try CLI.run(["unpack", signed, "--dest", dest, "--pubkey", work.publicDER])
        #expect(upgraded.status == 0, "\(upgraded.stderr)")
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
    }

    @Test("status of a file on a filesystem without user attributes says where it came from")
    func statusFromSidecar() throws {
        let work = try Workspace()
        guard let mount = try ScratchMount.mount("ramfs", options: "size=16m", at: work.directory.file("ramfs"), untested: "status from a sidecar") else { return }
        defer { mount.unmount() }
        let package = work.directory.file("app.zip")
        #expect(try CLI.run(["pack", try PackCLITests.tree(work), "--key", work.privatePEM, "--passphrase-file", work.passFile,
                             "--name", "app", "--version", "2.5", "--sequence", "25", "--out", package]).status == 0)
        let dest = mount.path + "/app"
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let status = try CLI.run(["status", dest + "/app.conf", "--pubkey", work.publicDER, "--json"])
        #expect(status.status == 0, "\(status.stdoutText) \(status.stderr)")
        let entry = try #require((try status.json()["files"] as? [[String: Any]])?.first)
        #expect(entry["installed_by_signet"] as? Bool == true)
        #expect(entry["package"] as? String == "app")
        #expect(entry["version"] as? String == "2.5")
        #expect(entry["sequence"] as? Int == 25)
        #expect(entry["package_path"] as? String == "app.conf")
        #expect(entry["key_id"] as? String == work.keyID)
        #expect(entry["verdict"] as? String == "ok")
    }

    @Test("--case-insensitive-dest refuses paths one case-insensitive filesystem would merge, before writing")
    func caseInsensitive() throws {
        let work = try Workspace()
        for (name, files) in [("two-files", ["Readme.txt", "README.TXT"]), ("file-and-folder", ["Docs", "docs/x.txt"]), ("nfd", ["Caf\u{e9}.txt", "cafe\u{301}.TXT"])] {
            let root = work.directory.file(name)
            for file in files {
                let path = root + "/" + file
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                try Data(file.utf8).write(to: URL(fileURLWithPath: path))
            }
            let package = work.directory.file(name + ".zip")
            let packed = try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", name, "--version", "1", "--out", package])
            guard packed.status == 0 else {
                // NFC/NFD twins are refused by pack itself.
                #expect(name == "nfd", "\(packed.stderr)")
                continue
            }
            let dest = work.directory.file("dest-" + name)
            // A case-sensitive filesystem takes it as it is; the flag refuses it, writing nothing.
            let refused = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--case-insensitive-dest"])
            #expect(refused.status == 4, "\(name): \(refused.stderr)")
            #expect(refused.stderr.contains("case-insensitive"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dest))
            #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        }
        // Folders that differ only in case merge without loss: allowed.
        let root = work.directory.file("folders")
        for file in ["Img/a.png", "img/b.png"] {
            try FileManager.default.createDirectory(atPath: (root + "/" + file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(file.utf8).write(to: URL(fileURLWithPath: root + "/" + file))
        }
        let package = work.directory.file("folders.zip")
        #expect(try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "f", "--version", "1", "--out", package]).status == 0)
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("dest-folders"), "--pubkey", work.publicDER, "--case-insensitive-dest"]).status == 0)
    }

    @Test("tiny files that deflate would enlarge are stored; compressible ones are deflated")
    func tinyFilesStored() throws {
        let work = try Workspace()
        let root = work.directory.file("tiny")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data("Hello from Signet!\n".utf8).write(to: URL(fileURLWithPath: root + "/hello.txt"))
        try Data().write(to: URL(fileURLWithPath: root + "/empty"))
        try Data(String(repeating: "key = value\n", count: 40).utf8).write(to: URL(fileURLWithPath: root + "/repeat.conf"))
        let package = work.directory.file("tiny.zip")
        let packed = try CLI.run(["pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "t", "--version", "1", "--out", package, "--json"])
        #expect(packed.status == 0, "\(packed.stderr)")
        let inspected = try CLI.run(["inspect", package, "--json"])
        let files = try #require(try inspected.json()["files"] as? [[String: Any]])
        var methods: [String: String] = [:]
        for file in files {
            methods[file["path"] as! String] = file["compression"] as? String
            if file["compression"] as? String == "deflated" {
                #expect((file["compressed_size"] as! Int) < (file["size"] as! Int), "deflated only where it shrinks: \(file)")
            }
        }
        #expect(methods == ["empty": "stored", "hello.txt": "stored", "repeat.conf": "deflated"])
        // Info-ZIP reads both.
        #expect(try SignetTestSupport.run("unzip", ["-tq", package]).status == 0)
    }
}
