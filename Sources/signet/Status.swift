import ArgumentParser
import Signet

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Tell where installed files came from (package, version, sequence, signer), and whether they verify now.",
        discussion: """
        Reads user.signet.meta (informational: package, path in it, signer, and the URL it was \
        downloaded from when unpack or fetch downloaded it) and, with --pubkey, re-verifies the file. A file \
        without Signet's attributes is reported as not installed by Signet (exit 1); a file that \
        does not exist is exit 5, a directory or a symbolic link given as a file exit 4. With \
        several files, the exit status is the most severe: 1, then 3, 2, 4, 5.

        Example:
          signet status /opt/app/bin/tool --pubkey keys/public_key.der
        """
    )

    @Argument(help: ArgumentHelp("Installed files.", valueName: "file"))
    var files: [String] = []

    @OptionGroup var trust: TrustOptions

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one file") }
    }

    struct Entry: Encodable {
        let path: String
        let installed_by_signet: Bool
        @Null var package: String?
        @Null var version: String?
        @Null var sequence: UInt64?
        @Null var key_id: String?
        @Null var package_path: String?
        @Null var source: String?
        @Null var channel: String?
        let verdict: String
        let detail: String
        /// For a file that could not be read: the documented error object.
        @Null var error: Output.ErrorBody? = nil
    }

    func run() throws {
        let policy = trust.hasSources ? try trust.policy() : nil
        var entries: [Entry] = []
        var statuses: [Int32] = []
        for file in files {
            let origin: FileOrigin
            do {
                origin = try FileOrigin(path: file)
            } catch let error as SignetError {
                // Reported, never taken for "not installed"; the other files are still shown.
                // Its own exit status: a missing file is 5, a directory or link given as a file 4.
                entries.append(Entry(path: file, installed_by_signet: false, package: nil, version: nil, sequence: nil, key_id: nil,
                                     package_path: nil, source: nil, channel: nil, verdict: "unreadable", detail: error.reason,
                                     error: Output.errorBody(error)))
                statuses.append(error.code.exitStatus.rawValue)
                if !output.json { Output.error(error.description) }
                continue
            }
            var verdict = origin.isInstalled ? "not-checked" : "not-installed"
            var channel: String? = nil
            var detail = origin.isInstalled ? "signed by \(origin.keyID?.short ?? "an unknown key"), not checked (pass --pubkey to verify)"
                                            : "'\(file)' has no Signet attributes: it was not installed by Signet (or its attributes were stripped)"
            var status: Int32 = origin.isInstalled ? 0 : 1
            if let policy, origin.isInstalled || origin.hasSidecar {
                let report = Reverifier.verifyFile(at: file, policy: policy)
                verdict = report.verdict.name
                detail = report.detail
                channel = report.signer.flatMap { policy.channel(of: $0) }
                status = report.verdict.isOK ? 0 : report.verdict == .untrusted ? 3 : report.error?.code.exitStatus.rawValue ?? (report.verdict == .unreadable ? 5 : 1)
            }
            statuses.append(status)
            entries.append(Entry(path: file, installed_by_signet: origin.isInstalled, package: origin.packageName, version: origin.version,
                                 sequence: origin.sequence, key_id: origin.keyID?.hex, package_path: origin.packagePath,
                                 source: origin.source, channel: channel,
                                 verdict: verdict, detail: detail))
        }
        if output.json {
            Output.json(["files": entries])
        } else {
            for entry in entries where entry.verdict != "unreadable" {
                guard entry.installed_by_signet else {
                    Output.line("\(entry.path): not installed by Signet — \(entry.detail)")
                    continue
                }
                Output.lines([
                    "\(entry.path):",
                    entry.package == nil && entry.sequence == nil ? "  package:  a bare package (FILE + FILE.sig: no name, version or sequence)"
                        : "  package:  \(entry.package ?? "?") \(entry.version ?? "") (sequence \(entry.sequence.map(String.init) ?? "?"))",
                    "  path:     \(entry.package_path ?? "?")",
                ] + (entry.source.map { ["  from:     \($0)"] } ?? []) + [
                    "  key id:   \(entry.key_id ?? "?")\(entry.channel.map { " (channel \($0))" } ?? "")",
                    "  verdict:  \(entry.verdict) — \(entry.detail)",
                ])
            }
        }
        let status = Output.mostSevere(statuses)
        if status != 0 { throw ExitCode(status) }
    }
}
