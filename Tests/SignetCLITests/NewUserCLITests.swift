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
}
