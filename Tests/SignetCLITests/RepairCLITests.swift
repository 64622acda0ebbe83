import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 39, first part: installing the release DIR already holds writes nothing ("up to
/// date") unless --repair finds the tree no longer whole (then it is reinstalled) or --force
/// asks for a reinstall.
@Suite("Unpacking the release DIR holds: up to date, --repair, --force")
struct RepairCLITests {
    static func inode(_ path: String) -> UInt64? {
        var info = stat()
        return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
    }

    @Test("the same release again writes nothing; --repair reinstalls only a tree that no longer checks whole; --force reinstalls")
    func sameRelease() throws {
        let work = try Workspace()
        let tree = work.directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree + "/b", withIntermediateDirectories: true)
        try Data("release 1\n".utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: tree + "/b/c.txt"))
        let package = work.directory.file("app-1.zip")
        #expect(
            try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1.0",
                "--sequence", "1", "--out", package
            ]).status == 0)
        let dest = work.directory.file("app")
        let state = work.directory.file("state.json")
        let unpack = ["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--state", state]
        #expect(try CLI.run(unpack).status == 0)
        let (tree0, file0) = (Self.inode(dest), Self.inode(dest + "/a.txt"))

        // Again: nothing written (the same directory and files, not a swapped-in copy).
        let again = try CLI.run(unpack)
        #expect(again.status == 0 && again.stdoutText.contains("up to date: \(dest) holds app 1.0 (sequence 1)"), "\(again.stdoutText) \(again.stderr)")
        #expect(Self.inode(dest) == tree0 && Self.inode(dest + "/a.txt") == file0)
        let json = try CLI.run(unpack + ["--json"]).json()
        #expect(json["up_to_date"] as? Bool == true && (json["files"] as? [String]) == [] && (json["repaired"] as? [String]) == [])
        #expect(json["replaced_sequence"] is NSNull && json["atomic_exchange"] as? Bool == false, "nothing was replaced: \(json)")

        // Damage the tree: without --repair it stays as it is (up to date is about the release).
        try Data("tampered\n".utf8).write(to: URL(fileURLWithPath: dest + "/a.txt"))
        try FileManager.default.removeItem(atPath: dest + "/b/c.txt")
        try Data("extra\n".utf8).write(to: URL(fileURLWithPath: dest + "/extra.txt"))
        #expect(try CLI.run(unpack).stdoutText.contains("up to date"))
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 1)
        let repaired = try CLI.run(unpack + ["--repair", "--json"])
        #expect(repaired.status == 0, "\(repaired.stderr)")
        let report = try repaired.json()
        let findings = report["repaired"] as? [String] ?? []
        #expect(report["up_to_date"] as? Bool == false && findings.count == 3, "\(findings)")
        #expect(
            findings.contains { $0.hasPrefix("a.txt: ") } && findings.contains { $0.hasPrefix("b/c.txt: ") }
                && findings.contains { $0.hasPrefix("extra.txt: ") }, "\(findings)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "release 1\n")
        #expect(!FileManager.default.fileExists(atPath: dest + "/extra.txt"))
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--state", state, "--expect-name", "app"]).status == 0)

        // --repair on a whole tree: up to date, nothing written.
        let tree1 = Self.inode(dest)
        let whole = try CLI.run(unpack + ["--repair"])
        #expect(whole.status == 0 && whole.stdoutText.contains("up to date") && whole.stdoutText.contains("checks whole"), "\(whole.stdoutText)")
        #expect(Self.inode(dest) == tree1)

        // --force reinstalls the same release (a new tree swapped in).
        let forced = try CLI.run(unpack + ["--force"])
        #expect(forced.status == 0 && forced.stdoutText.contains("installed app 1.0"), "\(forced.stdoutText) \(forced.stderr)")
        #expect(Self.inode(dest) != tree1)

        // Another release of the same sequence (other bytes) is not "the same release": it installs.
        try Data("release 1, rebuilt\n".utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
        let rebuilt = work.directory.file("app-1b.zip")
        #expect(
            try CLI.run([
                "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1.0",
                "--sequence", "1", "--out", rebuilt
            ]).status == 0)
        let other = try CLI.run(["unpack", rebuilt, "--dest", dest, "--pubkey", work.publicDER, "--state", state])
        #expect(other.status == 0 && other.stdoutText.contains("installed"), "\(other.stdoutText) \(other.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "release 1, rebuilt\n")
    }
}
