import ArgumentParser
import Foundation
import Signet

struct Reverify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reverify",
        abstract: "Re-verify installed files, or whole installed trees, from their signature attributes.",
        discussion: """
            A FILE is opened once (never through a symbolic link) and checked against its \
            user.signet.sig attribute, else an IMA attribute, else the sidecar in the installed \
            tree's .signet/sigs/. Verdicts: ok, modified, unsigned, untrusted, unreadable.

            A DIR installed by unpack is checked as a whole: its signed manifest first, then every \
            file: ok, modified, missing, added, unsigned, attributes-lost (the content still \
            matches but the attribute was stripped, as cp, tar without --xattrs and many editors do), \
            or mode-changed (a file or folder whose mode is not the signed one). New folders and \
            files added under DIR/.signet/ are added. --repair restores lost attributes from the \
            tree's record of its signatures, after checking the content, and restores modes.

            --state FILE (unpack's state file) and --expect-name NAME check that DIR still holds \
            the package it should: another product, an older release than the state records, or a \
            tree relabelled as bare fails (exit 1).

            A file packed with --structured (JSON or a property list) whose bytes changed is compared \
            key by key with the signed copy the tree keeps: if only keys allowed by --allow-key or \
            the rules file differ, it is ok with a note (keys-changed: ...); otherwise it is \
            modified and every changed, added and removed key path is listed. A KEYPATH joins keys \
            with '.'; array elements are numbers or '*' (items.*.name); '\\' escapes a '.' in a key.

            A rules file (--rules FILE) is JSON holding what a start-up check configures, combined \
            with the options: {"exclude": ["*.log"], "only": ["bin"], "allow_keys": \
            {"config/app.json": ["server.url"]}}. An unknown field, or a rule naming a file or key \
            that the signed tree does not have, is exit 2.

            Exit 0 if everything is ok (or repaired), 1 if anything is not, 3 if the signer is not trusted.

            Examples:
              signet reverify /opt/app --pubkey keys/public_key.der --exclude '*.log'
              signet reverify /opt/app/bin/tool --pubkey keys/public_key.der
              signet reverify /opt/app --pubkey keys/public_key.der \\
                --allow-key 'Info.plist:CFBundleVersion'
              signet reverify /opt/app --pubkey keys/public_key.der \\
                --rules /etc/app/reverify.json
            """
    )

    @Argument(help: ArgumentHelp("Installed files or trees.", valueName: "path"))
    var paths: [String] = []

    @OptionGroup var trust: TrustOptions

    @Flag(
        name: .long,
        help:
            "For a DIR, print a count per verdict and the first few paths of each instead of one line per file (a tree copied without its attributes has thousands of attributes-lost lines)."
    )
    var summary = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Skip files allowed to change; a glob with .gitignore's rules ('*.log' or 'cache' a name anywhere, 'var/tmp/*' anchored at the tree's root, '**' across folders, a folder selects what it holds); repeatable.",
            valueName: "pattern"))
    var exclude: [String] = []

    @Option(name: .long, help: ArgumentHelp("Check only this subtree of a DIR (relative); repeatable.", valueName: "subdir"))
    var only: [String] = []

    @Flag(
        name: .long,
        help:
            "Restore what a tree check finds lost: a file's user.signet.sig from the tree's copy of its signature (DIR/.signet/signatures, or DIR/.signet/sigs/PATH.sig where the filesystem has no user xattrs) once its content matches the signed manifest and the copy verifies, and the signed mode of files and folders."
    )
    var repair = false

    @Flag(
        name: .customLong("read-all"),
        help:
            "Read fs-verity files whole too. Without it, a file installed with --verity whose digest the kernel measures as the signed one is not read (the kernel checks each block whenever it is read); with it, a block changed under such a file (on the device) is found now, as the kernel refuses to read it."
    )
    var readAll = false

    @Option(
        name: .customLong("allow-key"),
        help: ArgumentHelp(
            "A key of a structured file that may change (config.json:server.url; split at the first ':'); repeatable.", valueName: "file:keypath"))
    var allowKey: [String] = []

    @Option(name: .long, help: ArgumentHelp("A JSON rules file with exclude, only and allow_keys (combined with the options).", valueName: "file"))
    var rules: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "unpack's --state file: each DIR must hold the package recorded for it there, at no lower sequence than recorded for its name.", valueName: "file"))
    var state: String?

    @Option(
        name: .customLong("expect-name"), help: ArgumentHelp("Each DIR must hold this package (another product, or a bare tree, fails).", valueName: "name"))
    var expectName: String?

    @OptionGroup(title: "Events") var events: EventOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if paths.isEmpty { throw ValidationError("name at least one installed file or directory") }
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
        _ = try allowedKeys()
    }

    /// `--allow-key FILE:KEYPATH`, split at the first ':'.
    func allowedKeys() throws -> [(String, KeyPath)] {
        try allowKey.map { text in
            guard let colon = text.firstIndex(of: ":"), colon != text.startIndex,
                let keyPath = KeyPath(String(text[text.index(after: colon)...]))
            else {
                throw ValidationError("--allow-key takes FILE:KEYPATH, a file of the tree and a dotted key path (config.json:server.url), not '\(text)'")
            }
            return (String(text[..<colon]), keyPath)
        }
    }

    struct KeyEntry: Encodable {
        let path: String
        let change: String
        let allowed: Bool
    }

    struct FileEntry: Encodable {
        let path: String
        let verdict: String
        let detail: String
        @Null var signature: String?
        @Null var key_id: String?
        @Null var changed_keys: [KeyEntry]?
        /// For a file that could not be checked: the documented error object.
        @Null var error: Output.ErrorBody?

        init(_ report: FileReport) {
            error = report.error.map(Output.errorBody)
            path = report.path
            verdict = report.verdict.name
            detail = report.detail
            signature = report.signatureSource?.rawValue
            key_id = report.signer?.hex
            changed_keys =
                report.changedKeys.isEmpty ? nil : report.changedKeys.map { KeyEntry(path: $0.path.description, change: $0.kind.rawValue, allowed: $0.allowed) }
        }
    }

    struct TreeEntry: Encodable {
        let root: String
        let ok: Bool
        @Null var name: String?
        @Null var version: String?
        @Null var sequence: UInt64?
        @Null var signer: String?
        /// Why the tree as a whole failed (its manifest, or an error checking it), as the
        /// documented error object; null when it did not.
        @Null var error: Output.ErrorBody?
        @Null var attributes: String?
        let counts: [String: Int]
        @Null var duration_seconds: Double?
        let files: [FileEntry]
    }

    struct Report: Encodable {
        let ok: Bool
        let trees: [TreeEntry]
        let files: [FileEntry]
    }

    func run() throws {
        try events.start()
        let policy = try trust.policy()
        var options = ReverifyOptions()
        options.exclude = exclude
        options.only = only
        options.repair = repair
        options.readVerityFiles = readAll
        options.stateFile = state
        options.expectedName = expectName
        for (file, keyPath) in try allowedKeys() { options.allow(keyPath, in: file) }
        if let rules { options.merge(try ReverifyOptions(rulesFile: rules)) }
        var trees: [TreeEntry] = []
        var files: [FileReport] = []
        var statuses: [Int32] = []
        for path in paths {
            guard Reverifier.isDirectory(atPath: path) else {
                let report = Reverifier.verifyFile(at: path, policy: policy)
                files.append(report)
                statuses.append(
                    report.verdict.isOK
                        ? 0 : report.verdict == .untrusted ? 3 : report.error?.code.exitStatus.rawValue ?? (report.verdict == .unreadable ? 5 : 1))
                continue
            }
            do {
                Events.current?.phase("reverify")
                let tree = try ProgressLine.showing("checking " + path, output: output) { progress in
                    var options = options
                    options.progress = progress
                    return try Reverifier.verifyTree(at: path, policy: policy, options: options)
                }
                var failure: SignetError? = nil
                if let reason = tree.manifestFailure {
                    let code: SignetError.Code =
                        switch reason {
                        case .untrustedSigner: .untrustedSigner
                        case .relabelled: .relabelledTree
                        case .otherPackage: .otherPackage
                        case .rollback: .rollback
                        default: .badSignature
                        }
                    failure = SignetError(code, tree.manifestMessage ?? "\(reason)", path: tree.root)
                }
                statuses.append(failure?.code.exitStatus.rawValue ?? (tree.isOK ? 0 : 1))
                if !output.json { show(tree) }
                guard output.json || Events.current != nil else { continue }
                // The JSON copy of the report exists only when JSON is asked for, or events that
                // end with it (for 50,000 files it is as large as the report itself).
                trees.append(
                    TreeEntry(
                        root: tree.root, ok: tree.isOK, name: tree.manifest?.name, version: tree.manifest?.version, sequence: tree.manifest?.sequence,
                        signer: tree.signer?.keyID.hex, error: failure.map(Output.errorBody), attributes: tree.attributesSupported ? "xattr" : "sidecar",
                        counts: Dictionary(uniqueKeysWithValues: tree.counts.map { ($0.key.name, $0.value) }),
                        duration_seconds: tree.duration, files: (summary ? Self.summarized(tree.files) : tree.files).map(FileEntry.init)))
            } catch let error as SignetError where paths.count > 1 {
                // One tree that cannot be checked does not hide the others' results.
                statuses.append(error.code.exitStatus.rawValue)
                trees.append(TreeEntry(root: path, ok: false, error: Output.errorBody(error), counts: [:], files: []))
                if !output.json { Output.error(error.description) }
            }
        }
        Output.result(Report(ok: statuses.allSatisfy { $0 == 0 }, trees: trees, files: files.map(FileEntry.init)), json: output.json)
        if !output.json {
            for file in files {
                // A file that could not be read has its verdict like any other, and its error on
                // standard error (the exit status is the error's); a path that does not exist
                // is only an error.
                if let error = file.error {
                    Output.error(error.description)
                    if error.code == .fileNotFound { continue }
                }
                Output.line("\(file.verdict.name.padding(toLength: 15, withPad: " ", startingAt: 0)) \(file.path)  — \(file.detail)")
            }
        }
        let status = Output.mostSevere(statuses)
        if status != 0 { throw ExitCode(status) }
    }

    /// --summary in JSON too (it was as large as without): at most five files of each
    /// verdict other than ok, in the tree's order; `counts` has every verdict's total.
    static func summarized(_ files: [FileReport]) -> [FileReport] {
        var shown: [String: Int] = [:]
        return files.filter { file in
            guard file.verdict != .ok || !file.changedKeys.isEmpty else { return false }
            shown[file.verdict.name, default: 0] += 1
            return shown[file.verdict.name, default: 0] <= 5
        }
    }

    private func show(_ tree: TreeReport) {
        if let message = tree.manifestMessage {
            Output.line("FAILED \(tree.root): \(message)")
            return
        }
        if summary {
            // Verdicts in the order of the counts line; at most five paths each.
            var byVerdict: [String: [String]] = [:]
            for file in tree.files where file.verdict != .ok || !file.changedKeys.isEmpty { byVerdict[file.verdict.name, default: []].append(file.path) }
            for (verdict, paths) in byVerdict.sorted(by: { $0.key < $1.key }) {
                let shown = paths.prefix(5).joined(separator: ", ")
                Output.line(
                    "\(verdict.padding(toLength: 15, withPad: " ", startingAt: 0)) \(paths.count): \(shown)\(paths.count > 5 ? ", and \(paths.count - 5) more" : "")"
                )
            }
        } else {
            for file in tree.files where file.verdict != .ok || !file.changedKeys.isEmpty {
                Output.line("\(file.verdict.name.padding(toLength: 15, withPad: " ", startingAt: 0)) \(file.path)  — \(file.detail)")
            }
        }
        let summary = tree.counts.sorted { $0.key.name < $1.key.name }.map { "\($0.value) \($0.key.name)" }.joined(separator: ", ")
        let name =
            tree.manifest.map { "\($0.name) \($0.version) (sequence \($0.sequence))" }
            ?? "installed from a bare package (no manifest: no completeness or rollback check)"
        Output.line(
            "\(tree.isOK ? "OK" : "FAILED") \(tree.root): \(name): \(summary) in \(String(format: "%.2f", tree.duration)) s\(tree.attributesSupported ? "" : " (signatures from .signet/sigs/: no user xattrs here)")"
        )
    }
}
