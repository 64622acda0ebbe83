import Foundation
import Testing
import SignetTestSupport

/// A resource large enough to be hashed on the second core while it is staged (issue 28).
@Suite("Large resources: hashed on the second core, still refused when changed")
struct LargeResourceCLITests {
    @Test("a 20 MiB resource installs and re-verifies; the same package with one byte changed (CRC fixed up by Python's zipfile) is exit 1, nothing installed")
    func largeResource() throws {
        let work = try Workspace()
        let tree = work.directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        let big = try #require(FileHandle(forReadingAtPath: "/dev/urandom")).readData(ofLength: 20 << 20)
        #expect(big.count == 20 << 20)
        try big.write(to: URL(fileURLWithPath: tree + "/firmware.bin"))
        try Data("small\n".utf8).write(to: URL(fileURLWithPath: tree + "/notes.txt"))
        let package = work.directory.file("app.zip")
        let packed = try CLI.run([
            "pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "1",
            "--store", "--out", package
        ])
        #expect(packed.status == 0, "\(packed.stderr)")
        let dest = work.directory.file("out")
        let installed = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: dest + "/firmware.bin")) == big)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // One byte of the big file changed, the archive otherwise consistent (CRC recomputed).
        let tampered = work.directory.file("tampered.zip")
        let script = pythonScript("repack_stored.py")
        #expect(try run("python3", ["-c", script, package, tampered]).status == 0)
        let refused = try CLI.run(["unpack", tampered, "--dest", work.directory.file("other"), "--pubkey", work.publicDER, "--json"])
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stdoutText.contains("firmware.bin") && refused.stdoutText.contains("SHA-256"), "\(refused.stdoutText)")
        #expect(!FileManager.default.fileExists(atPath: work.directory.file("other")))
    }
}
