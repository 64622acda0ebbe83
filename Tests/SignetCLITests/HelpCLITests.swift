import Foundation
import Testing
import SignetTestSupport

/// Issue 17, points 5 and 8: shell completions from the binary, and help that reads well at
/// 80 columns (the man pages are generated from the same help text by scripts/build-deb.sh).
@Suite("Help text and shell completions, run as a binary")
struct HelpCLITests {
    static let commands = ["", "keygen", "key", "key show", "sign", "verify", "pack", "inspect", "unpack", "fetch",
                           "reverify", "status", "trust", "trust seal", "channel", "channel sign", "update",
                           "repo", "repo init", "repo add", "repo sign", "repo refresh", "repo rotate", "repo status",
                           "tuf", "tuf init", "tuf refresh", "tuf download"]

    @Test("every help page fits 80 columns, and no option's description is cut off", arguments: commands)
    func eightyColumns(_ command: String) throws {
        let arguments = ["help"] + command.split(separator: " ").map(String.init)
        let result = try CLI.run(arguments, environment: ["COLUMNS": "80"])
        #expect(result.status == 0, "\(arguments): \(result.stderr)")
        let lines = result.stdoutText.split(separator: "\n", omittingEmptySubsequences: false)
        for line in lines { #expect(line.count <= 80, "signet \(arguments.joined(separator: " ")): \(line.count) columns: \(line)") }
        #expect(result.stdoutText.contains("USAGE: signet"))
        // A wrapped description continues on an indented line; none ends mid-word with a hyphen.
        #expect(!lines.contains { $0.hasSuffix("-") && !$0.hasSuffix(" -") && !$0.hasSuffix("--") }, "\(result.stdoutText)")
    }

    @Test("bash, zsh and fish completions name every command and the options of each", arguments: ["bash", "zsh", "fish"])
    func completions(_ shell: String) throws {
        let result = try CLI.run(["--generate-completion-script", shell])
        #expect(result.status == 0, "\(result.stderr)")
        // (fish names long options without their dashes)
        for word in ["keygen", "pack", "unpack", "reverify", "status", "allow-key", "structured", "case-insensitive-dest", "pubkey",
                     "channel", "update", "expires-in", "full-download"] {
            #expect(result.stdoutText.contains(word), "\(shell) completion lacks \(word)")
        }
        if shell == "bash" {
            // bash parses it.
            let directory = try TemporaryDirectory()
            let script = try directory.write("signet.bash", result.stdout)
            #expect(try SignetTestSupport.run("bash", ["-n", script]).status == 0)
        }
    }
}
