import ArgumentParser
import Signet

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Tell where installed files came from (package, version, sequence, signer), and whether they verify now.",
        discussion: """
        Reads user.signet.meta (informational: package, path in it, signer, and the URL it was \
        downloaded from when unpack or fetch downloaded it) and, with --pubkey, re-verifies the file. A file \
        without Signet's attributes is reported as not installed by Signet (exit 1).

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
        let package: String?
        let version: String?
        let sequence: UInt64?
        let key_id: String?
        let package_path: String?
        let source: String?
        let channel: String?
        let verdict: String
        let detail: String
    }

    func run() throws {
        let policy = trust.hasSources ? try trust.policy() : nil
        var entries: [Entry] = []
        for file in files {
            let origin: FileOrigin
            do {
                origin = try FileOrigin(path: file)
            } catch let error as SignetError {
                // Reported, never taken for "not installed"; the other files are still shown.
                entries.append(Entry(path: file, installed_by_signet: false, package: nil, version: nil, sequence: nil, key_id: nil,
                                     package_path: nil, source: nil, channel: nil, verdict: "unreadable", detail: error.reason))
                continue
            }
            var verdict = origin.isInstalled ? "not-checked" : "not-installed"
            var channel: String? = nil
            var detail = origin.isInstalled ? "signed by \(origin.keyID?.short ?? "an unknown key"), not checked (pass --pubkey to verify)"
                                            : "'\(file)' has no Signet attributes: it was not installed by Signet (or its attributes were stripped)"
            if let policy, origin.isInstalled || origin.hasSidecar {
                let report = Reverifier.verifyFile(at: file, policy: policy)
                verdict = report.verdict.name
                detail = report.detail
                channel = report.signer.flatMap { policy.channel(of: $0) }
            }
            entries.append(Entry(path: file, installed_by_signet: origin.isInstalled, package: origin.packageName, version: origin.version,
                                 sequence: origin.sequence, key_id: origin.keyID?.hex, package_path: origin.packagePath,
                                 source: origin.source, channel: channel,
                                 verdict: verdict, detail: detail))
        }
        if output.json {
            Output.json(["files": entries])
        } else {
            for entry in entries {
                guard entry.installed_by_signet else {
                    Output.line("\(entry.path): not installed by Signet — \(entry.detail)")
                    continue
                }
                Output.lines([
                    "\(entry.path):",
                    "  package:  \(entry.package ?? "?") \(entry.version ?? "") (sequence \(entry.sequence.map(String.init) ?? "?"))",
                    "  path:     \(entry.package_path ?? "?")",
                ] + (entry.source.map { ["  from:     \($0)"] } ?? []) + [
                    "  key id:   \(entry.key_id ?? "?")\(entry.channel.map { " (channel \($0))" } ?? "")",
                    "  verdict:  \(entry.verdict) — \(entry.detail)",
                ])
            }
        }
        if entries.contains(where: { $0.verdict != "ok" && $0.verdict != "not-checked" }) { throw ExitCode(1) }
    }
}
