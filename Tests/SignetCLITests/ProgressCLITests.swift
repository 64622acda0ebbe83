import Foundation
import Testing
import SignetTestSupport

/// Issue 17, point 1: a progress line on a terminal for sign, pack, unpack, inspect and reverify;
/// nothing on a pipe, with --json or with --quiet.
@Suite("Progress on a terminal, run as a binary under a pseudo-terminal")
struct ProgressCLITests {
    /// Runs signet on a pseudo-terminal: what the terminal showed, and the seconds it took.
    static func onTerminal(_ arguments: [String]) throws -> (status: Int32, shown: String, seconds: Double) {
        let result = try SignetTestSupport.run("python3", ["-c", ptyRun, CLI.binary] + arguments)
        return (result.status, result.stdoutText, Double(result.stderr) ?? 0)
    }

    /// The progress updates in `shown` that start with `label`: each is "\r ESC[K label: ...".
    static func updates(_ shown: String, _ label: String) -> [String] {
        shown.components(separatedBy: "\r\u{1B}[K").dropFirst().filter { $0.hasPrefix(label) }
            .map { $0.components(separatedBy: "\r").first ?? $0 }
    }

    @Test("sign, pack, unpack, inspect, reverify: an updating line of files and bytes, throttled, cleared at the end")
    func progressLines() throws {
        let work = try Workspace()
        let root = work.directory.file("big")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for index in 0..<24 { _ = try work.directory.writeRandom("big/f\(index).bin", count: 1_500_000) }
        let key = ["--key", work.privatePEM, "--passphrase-file", work.passFile]
        let package = work.directory.file("big.zip")
        let dest = work.directory.file("installed")
        let runs: [([String], String)] = [
            (["pack", root] + key + ["--name", "big", "--version", "1", "--out", package], "packing \(package): "),
            (["inspect", package, "--pubkey", work.publicDER], "verifying \(package): "),
            (["unpack", package, "--dest", dest, "--pubkey", work.publicDER], "installing \(dest): "),
            (["reverify", dest, "--pubkey", work.publicDER], "checking \(dest): "),
            // Last: it writes .sig files beside the files.
            (["sign", root + "/f0.bin", root + "/f1.bin"] + key, "signing: ")
        ]
        for (arguments, label) in runs {
            let (status, shown, seconds) = try Self.onTerminal(arguments)
            #expect(status == 0, "\(arguments): \(shown)")
            let lines = Self.updates(shown, label)
            #expect(!lines.isEmpty, "\(label) shows progress: \(shown.debugDescription)")
            let files = arguments[0] == "sign" ? 2 : 24
            #expect(lines.last?.contains("\(files) of \(files) file") == true, "\(label) ends complete: \(lines)")
            #expect(lines.allSatisfy { $0.contains(" of ") && $0.contains("MiB") }, "files and bytes: \(lines)")
            // At most ten updates a second (and one final one).
            #expect(Double(lines.count) <= seconds * 10 + 2, "\(label): \(lines.count) updates in \(seconds) s")
            // The line is cleared before the result is printed.
            #expect(
                shown.contains(
                    "\r\u{1B}[K"
                        + (arguments[0] == "sign"
                            ? "signed "
                            : arguments[0] == "pack" ? "packed " : arguments[0] == "unpack" ? "installed " : arguments[0] == "reverify" ? "OK " : "package:")),
                "\(label): \(shown.suffix(300).debugDescription)")
        }
        // Nothing with --quiet or --json, and nothing on a pipe.
        for extra in [["--quiet"], ["--json"]] {
            let (status, shown, _) = try Self.onTerminal(["reverify", dest, "--pubkey", work.publicDER] + extra)
            #expect(status == 0)
            #expect(!shown.contains("\u{1B}[K"), "\(extra): \(shown.debugDescription)")
        }
        let piped = try CLI.run(["reverify", dest, "--pubkey", work.publicDER])
        #expect(!piped.stderr.contains("\u{1B}[K") && !piped.stdoutText.contains("\u{1B}[K"))
    }

    @Test("update from a repository: the progress line names the package it downloads, not the metadata URL (issue 49, point 15)")
    func updateNamesPackage() throws {
        let p = try UpdateCLITests.Publisher("progress-package")
        try p.release(1)
        let (status, shown, _) = try Self.onTerminal([
            "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable",
            "--dest", p.dest, "--tls-ca", p.server.root, "--full-download"
        ])
        #expect(status == 0, "\(shown)")
        let lines = Self.updates(shown, "downloading ")
        #expect(lines.contains { $0.contains("/targets/") && $0.contains(".app-1.zip:") }, "\(lines)")
    }
}
