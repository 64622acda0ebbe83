import ArgumentParser
import Foundation
import Signet

struct Reverify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-verify installed files, or whole installed trees, from their signature attributes.",
        discussion: """
        A FILE is opened once (never through a symbolic link) and checked against its \
        user.signet.sig attribute, else an IMA attribute, else the sidecar in the installed \
        tree's .signet/sigs/. Verdicts: ok, modified, unsigned, untrusted, unreadable.

        A DIR installed by unpack is checked as a whole: its signed manifest first, then every \
        file: ok, modified, missing, added, unsigned, or attributes-lost (the content still \
        matches but the attribute was stripped, as cp, tar without --xattrs and many editors do). \
        --repair restores lost attributes from DIR/.signet/sigs/, after checking the content.

        Exit 0 if everything is ok (or repaired), 1 if anything is not, 3 if the signer is not trusted.

        Examples:
          signet reverify /opt/app --pubkey keys/public_key.der --exclude '*.log'
          signet reverify /opt/app/bin/tool --pubkey keys/public_key.der
        """
    )

    @Argument(help: ArgumentHelp("Installed files or trees.", valueName: "path"))
    var paths: [String] = []

    @OptionGroup var trust: TrustOptions

    @Option(name: .long, help: ArgumentHelp("Skip files allowed to change (glob on the relative path, a name, a directory or '*.ext'); repeatable.", valueName: "pattern"))
    var exclude: [String] = []

    @Option(name: .long, help: ArgumentHelp("Check only this subtree of a DIR (relative); repeatable.", valueName: "subdir"))
    var only: [String] = []

    @Flag(name: .long, help: "Restore lost signature attributes from DIR/.signet/sigs/ after checking the content.")
    var repair = false

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if paths.isEmpty { throw ValidationError("name at least one installed file or directory") }
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
    }

    struct FileEntry: Encodable {
        let path: String
        let verdict: String
        let detail: String
        let signature: String?
        let key_id: String?

        init(_ report: FileReport) {
            path = report.path
            verdict = report.verdict.name
            detail = report.detail
            signature = report.signatureSource?.rawValue
            key_id = report.signer?.hex
        }
    }

    struct TreeEntry: Encodable {
        let root: String
        let ok: Bool
        let name: String?
        let version: String?
        let sequence: UInt64?
        let signer: String?
        let error: String?
        let attributes: String
        let counts: [String: Int]
        let duration_seconds: Double
        let files: [FileEntry]
    }

    struct Report: Encodable {
        let ok: Bool
        let trees: [TreeEntry]
        let files: [FileEntry]
    }

    func run() throws {
        let policy = try trust.policy()
        var options = ReverifyOptions()
        options.exclude = exclude
        options.only = only
        options.repair = repair
        var trees: [TreeReport] = []
        var files: [FileReport] = []
        for path in paths {
            if Reverifier.isDirectory(atPath: path) {
                trees.append(try Reverifier.verifyTree(at: path, policy: policy, options: options))
            } else {
                files.append(Reverifier.verifyFile(at: path, policy: policy))
            }
        }
        let untrusted = trees.contains { $0.manifestFailure == .untrustedSigner } || files.contains { $0.verdict == .untrusted }
        let bad = trees.contains { $0.manifestFailure != nil && $0.manifestFailure != .untrustedSigner }
            || trees.contains { $0.files.contains { !$0.verdict.isOK } } || files.contains { !$0.verdict.isOK && $0.verdict != .untrusted }
        if output.json {
            Output.json(Report(ok: !bad && !untrusted, trees: trees.map { tree in
                TreeEntry(root: tree.root, ok: tree.isOK, name: tree.manifest?.name, version: tree.manifest?.version, sequence: tree.manifest?.sequence,
                          signer: tree.signer?.keyID.hex, error: tree.manifestMessage, attributes: tree.attributesSupported ? "xattr" : "sidecar",
                          counts: Dictionary(uniqueKeysWithValues: tree.counts.map { ($0.key.name, $0.value) }),
                          duration_seconds: tree.duration, files: tree.files.map(FileEntry.init))
            }, files: files.map(FileEntry.init)))
        } else {
            for tree in trees {
                if let message = tree.manifestMessage {
                    Output.line("FAILED \(tree.root): \(message)")
                    continue
                }
                for file in tree.files where file.verdict != .ok {
                    Output.line("\(file.verdict.name.padding(toLength: 15, withPad: " ", startingAt: 0)) \(file.path)  — \(file.detail)")
                }
                let summary = tree.counts.sorted { $0.key.name < $1.key.name }.map { "\($0.value) \($0.key.name)" }.joined(separator: ", ")
                let name = tree.manifest.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? ""
                Output.line("\(tree.isOK ? "OK" : "FAILED") \(tree.root): \(name): \(summary) in \(String(format: "%.2f", tree.duration)) s\(tree.attributesSupported ? "" : " (signatures from .signet/sigs/: no user xattrs here)")")
            }
            for file in files {
                Output.line("\(file.verdict.name.padding(toLength: 15, withPad: " ", startingAt: 0)) \(file.path)  — \(file.detail)")
            }
        }
        if bad { throw ExitCode(1) }
        if untrusted { throw ExitCode(3) }
    }
}
