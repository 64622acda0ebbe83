import Foundation
import Testing
import SignetTestSupport

/// `update --config FILE` (FORMAT.md §6): each key's TOML type checked, never read as another
/// (`version-lock = 1.10` is TOML's float 1.1), "did you mean" for keys and plan names, TOML's
/// syntax errors in Signet's words with the line, and an example that shows every key. Config
/// errors stop before any request: no server is needed.
@Suite("Config files: typed keys, suggestions, the complete example")
struct ConfigCLITests {
    static let repository = UpdateCLITests.repository

    /// Runs `update --config` on `lines` (after the keys a run needs).
    static func run(_ lines: String, _ extra: [String] = []) throws -> ProcessResult {
        let work = try TemporaryDirectory()
        let path = work.file("app.conf")
        try Data(
            ("repository = \"https://127.0.0.1:1/metadata/\"\ntuf-metadata = \"\(work.path)/tuf\"\nchannel = \"stable\"\ndest = \"\(work.path)/app\"\n" + lines)
                .utf8
        )
        .write(to: URL(fileURLWithPath: path))
        return try CLI.run(["update", "--config", path] + extra)
    }

    @Test("A value of the wrong TOML type is exit 2 naming the key, its line and what to write: version-lock = 1.10 says quote it; a sequence stays a number")
    func types() throws {
        let float = try Self.run("version-lock = 1.10\n")
        #expect(
            float.status == 2 && float.stderr.contains("app.conf:5: 'version-lock'") && float.stderr.contains("TOML reads 1.10 as 1.1")
                && float.stderr.contains("quote it, as in version-lock = \"1.10\""), "\(float.stderr)")
        for (line, says) in [
            ("retries = \"three\"", "'retries' takes a whole number, not a string"),
            ("hold = \"yes\"", "'hold' takes true or false, not a string"),
            ("state = 5", "'state' takes a string in quotes, not a whole number"),
            ("package = [\"a\", \"b\"]", "'package' takes one value, not a list"),
            ("tls-ca = [1]", "'tls-ca' takes a string in quotes or a list of them"),
            ("max-files = 1.5", "'max-files' takes a whole number, not a decimal number"),
            ("verity = \"sometimes\"", "'verity' takes true or false, or \"auto\""),
            ("keep-previous = 1", "'keep-previous' takes \"yes\", \"no\", true or false")
        ] {
            let result = try Self.run(line + "\n")
            #expect(result.status == 2 && result.stderr.contains("app.conf:5: \(says)"), "\(line): \(result.stderr)")
        }
        // Types a key does take get past the config (the run then fails on the missing
        // metadata folder, not on the file).
        for line in ["version-lock = 143", "version-lock = \"1.10\"", "max-time = 1.5", "wait = 3", "keep-previous = false", "window = \"Mon 02:00..04:00\""] {
            let result = try Self.run(line + "\n")
            #expect(!result.stderr.contains("app.conf"), "\(line): \(result.stderr)")
        }
    }

    @Test(
        "Unknown keys and plans get a did-you-mean; other commands' trust keys are refused by name; TOML syntax errors are said in Signet's words with the line"
    )
    func messages() throws {
        let typo = try Self.run("chanel = \"beta\"\n")
        #expect(typo.status == 2 && typo.stderr.contains("unknown key 'chanel'; did you mean 'channel'?"), "\(typo.stderr)")
        for key in ["pubkey", "pin", "clock-skew"] {
            let refused = try Self.run("\(key) = \"x\"\n")
            #expect(refused.status == 2 && refused.stderr.contains("'\(key)' belongs to unpack and verify"), "\(refused.stderr)")
        }
        let twice = try Self.run("channel = \"beta\"\n")
        #expect(twice.status == 2 && twice.stderr.contains("app.conf:5: 'channel' is set twice"), "\(twice.stderr)")
        let syntax = try Self.run("state \"x\"\n")
        #expect(syntax.status == 2 && syntax.stderr.contains("app.conf:5: not valid TOML") && syntax.stderr.contains("key = value"), "\(syntax.stderr)")
        let plan = try CLI.run(["repo", "add", "/nonexistent-repo", "x.zip", "--channel", "stable", "--rollout", "defualt"])
        #expect(plan.status == 2 && plan.stderr.contains("did you mean 'default'?"), "\(plan.stderr)")
        let rule = try CLI.run(["repo", "add", "/nonexistent-repo", "x.zip", "--channel", "stable", "--rollout", "1.125%@0h,100%@400d"])
        #expect(rule.status == 2 && rule.stderr.contains("at most two decimals"), "\(rule.stderr)")
        let long = try CLI.run(["repo", "add", "/nonexistent-repo", "x.zip", "--channel", "stable", "--rollout", "1%@0h,100%@400d"])
        #expect(long.status == 2 && long.stderr.contains("at most 366 days"), "\(long.stderr)")
        let partial = try CLI.run(["repo", "add", "/nonexistent-repo", "x.zip", "--channel", "stable", "--rollout", "10%@0h,50%@1d"])
        #expect(partial.stderr.contains("stops at 50% of devices"), "a plan that never reaches 100% warns: \(partial.stderr)")
        let offset = try CLI.run([
            "repo", "add", "/nonexistent-repo", "x.zip", "--channel", "stable", "--rollout", "now", "--rollout-start", "2026-12-01T03:00:00+01:00"
        ])
        #expect(!offset.stderr.contains("--rollout-start") && offset.stderr.contains("not a TUF repository"), "an offset is accepted: \(offset.stderr)")
    }

    @Test("unpack --bare with --window or --pre-install is a usage error (exit 2) before anything is read: a bare package has no signed release for the gate")
    func bareGate() throws {
        let work = try TemporaryDirectory()
        for extra in [["--window", "Mon 02:00..04:00"], ["--pre-install", "true"]] {
            let refused = try CLI.run(["unpack", work.file("bare.zip"), "--bare", "--dest", work.file("app"), "--pubkey", work.file("key.der")] + extra)
            #expect(refused.status == 2 && refused.stderr.contains("--bare cannot be combined with --window or --pre-install"), "\(refused.stderr)")
            #expect(!FileManager.default.fileExists(atPath: work.file("app")))
        }
    }

    @Test(
        "help update lists only what update takes (--channel as the repository's channel); --pubkey and the other trust options are refused by name; -q is --quiet"
    )
    func help() throws {
        let help = try CLI.run(["help", "update"])
        let options = Set(
            help.stdoutText.split(separator: "\n").filter { $0.hasPrefix("  -") }
                .flatMap { $0.split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: ",")) } }.filter {
                    $0.range(of: #"^--?[a-z0-9-]+$"#, options: .regularExpression) != nil
                })
        for refused in ["--pubkey", "--trust-dir", "--ca", "--pin", "--revoked", "--expect-subject", "--allow-expired-cert", "--clock-skew"] {
            #expect(!options.contains(refused), "help update lists \(refused)")
            let given = try CLI.run(
                [
                    "update", "--repository", "https://127.0.0.1:1/metadata/", "--tuf-metadata", "/tmp", "--channel", "stable", "--dest", "/tmp/x",
                    refused
                ] + (refused == "--allow-expired-cert" ? [] : ["v"]))
            #expect(given.status == 2 && given.stderr.contains("leave out \(refused)"), "\(refused): \(given.stderr)")
        }
        #expect(options.contains("-q") && options.contains("--quiet"))
        #expect(help.stdoutText.contains("The repository's channel this device follows"), "\(help.stdoutText)")
        // The complete example: every key update takes is in it (set or commented out).
        let example = try String(contentsOfFile: Self.repository + "/examples/update/app.conf", encoding: .utf8)
        let shown = Set(
            example.split(separator: "\n").compactMap { line -> String? in
                let bare = line.hasPrefix("# ") ? line.dropFirst(2) : line[...]
                guard let equals = bare.range(of: " = ") else { return nil }
                return String(bare[..<equals.lowerBound])
            })
        let notKeys: Set<String> = [
            "--config", "--unset", "--check", "--json", "--quiet", "-q", "--help", "-h", "--ignore-rollout", "--verity-auto", "--version",
            "--require-manifest-sha256", "--events-fd", "--events"
        ]
        let keys = options.subtracting(notKeys).filter { $0.hasPrefix("--") }.map { String($0.dropFirst(2)) }
        #expect(keys.count >= 40, "\(keys.sorted())")
        for key in keys { #expect(shown.contains(key), "examples/update/app.conf lacks '\(key)'") }
    }
}
