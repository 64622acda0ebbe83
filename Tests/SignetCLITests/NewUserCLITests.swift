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
}
