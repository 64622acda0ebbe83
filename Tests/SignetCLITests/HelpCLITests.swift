import Foundation
import Testing
import SignetTestSupport

/// Issue 17, points 5 and 8: shell completions from the binary, and help that reads well at
/// 80 columns (the man pages are generated from the same help text by scripts/build-deb.sh).
@Suite("Help text and shell completions, run as a binary")
struct HelpCLITests {
    static let commands = [
        "", "keygen", "key", "key show", "sign", "verify", "pack", "resign", "encrypt", "inspect", "unpack", "fetch",
        "reverify", "status", "rollback", "confirm", "trust", "trust seal", "update", "serve",
        "repo", "repo init", "repo add", "repo rollout", "repo resign", "repo sign", "repo refresh", "repo rotate", "repo renew", "repo discard", "repo status",
        "log", "log vkey", "log init", "log policy", "log append", "log status", "log monitor", "log verify", "witness", "witness serve",
        "tuf", "tuf init", "tuf refresh", "tuf download"
    ]

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

    /// Issue 41, point 7: examples in the help (the indented lines before USAGE) are pasted
    /// into a shell; at 80 columns none may wrap, or the rest of a command lands on a line of
    /// its own and runs as another command. Each must appear whole in the 80-column page, and a
    /// line ending in a backslash continues on an indented line.
    @Test("no example line in any help page wraps at 80 columns", arguments: commands)
    func examplesDoNotWrap(_ command: String) throws {
        let arguments = ["help"] + command.split(separator: " ").map(String.init)
        let wide = try CLI.run(arguments, environment: ["COLUMNS": "1000"]).stdoutText
        let narrow = try CLI.run(arguments, environment: ["COLUMNS": "80"]).stdoutText
        let before = { (text: String) in text.components(separatedBy: "\nUSAGE:").first ?? text }
        let narrowLines = Set(before(narrow).split(separator: "\n").map(String.init))
        let wideLines = before(wide).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        for (index, line) in wideLines.enumerated() where line.hasPrefix("  ") {
            #expect(narrowLines.contains(line), "signet \(arguments.joined(separator: " ")): this line wraps at 80 columns (\(line.count)): \(line)")
            if line.hasSuffix("\\"), index + 1 < wideLines.count {
                #expect(
                    wideLines[index + 1].hasPrefix("   "), "signet \(arguments.joined(separator: " ")): a continuation is not indented: \(wideLines[index + 1])"
                )
            }
        }
    }

    /// The list above is every command the binary has (from each group's SUBCOMMANDS).
    @Test("the help tests cover every command")
    func everyCommandListed() throws {
        var found: [String] = [""]
        var queue = [""]
        while let group = queue.popLast() {
            let arguments = ["help"] + group.split(separator: " ").map(String.init)
            let text = try CLI.run(arguments, environment: ["COLUMNS": "1000"]).stdoutText
            guard let section = text.components(separatedBy: "SUBCOMMANDS:\n").dropFirst().first else { continue }
            for line in section.split(separator: "\n") {
                guard line.hasPrefix("  "), !line.hasPrefix("   "), let name = line.split(separator: " ").first, name != "See" else { continue }
                let command = group.isEmpty ? String(name) : group + " " + name
                found.append(command)
                queue.append(command)
            }
        }
        #expect(Set(found) == Set(Self.commands), "missing: \(Set(found).subtracting(Self.commands)); gone: \(Set(Self.commands).subtracting(found))")
    }

    @Test("bash, zsh and fish completions name every command and the options of each", arguments: ["bash", "zsh", "fish"])
    func completions(_ shell: String) throws {
        let result = try CLI.run(["--generate-completion-script", shell])
        #expect(result.status == 0, "\(result.stderr)")
        // (fish names long options without their dashes)
        for word in [
            "keygen", "pack", "unpack", "reverify", "status", "allow-key", "structured", "case-insensitive-dest", "pubkey",
            "channel", "update", "expires-in", "full-download"
        ] {
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
