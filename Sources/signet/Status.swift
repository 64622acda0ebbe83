import Foundation
import ArgumentParser
import Signet

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Tell where installed files came from (package, version, sequence, signer) and whether they verify now; for a directory, its releases.",
        discussion: """
            Reads user.signet.meta (informational: package, path in it, signer, and the URL it was \
            downloaded from when unpack or fetch downloaded it) and, with --pubkey, re-verifies the file. A file \
            without Signet's attributes is reported as not installed by Signet (exit 1); a file that \
            does not exist is exit 5, a symbolic link (or a directory among several files) exit 4. With \
            several files, the exit status is the most severe: 1, then 3, 2, 4, 5.

            One directory: the releases of an installed tree: the current one (confirmed, or \
            pending until `signet confirm DIR`), the previous one kept for `signet rollback`, the \
            releases refused as bad and the last rollback. Exit 1 (not-installed) when it holds no \
            release installed by Signet.

            Examples:
              signet status /opt/app/bin/tool --pubkey keys/public_key.der
              signet status /opt/app
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

    /// `status DIR --json`.
    struct DestinationReport: Encodable {
        struct Bad: Encodable { let name: String; let sequence: UInt64; let reason: String; let at: String; @Null var sequences: [UInt64]? }
        struct LastRollback: Encodable { let from: UInt64; let to: UInt64; let by: String; let at: String }
        let destination: String
        @Null var current: Update.Release?
        @Null var previous: Update.Release?
        let pending: Bool
        @Null var pending_since: String?
        let unchecked: Bool
        /// When the post-install command started for the current release, if it never finished.
        @Null var post_install_unfinished: String?
        let bad: [Bad]
        @Null var last_rollback: LastRollback?
        @Null var channel: Channel?
    }

    /// What the last update found on the channel and did not install, and why.
    struct Channel: Encodable { let sequence: UInt64; let version: String; let note: String; let at: String }

    /// One directory: the releases of an installed destination.
    func showDestination(_ dir: String) throws {
        let status = try Installer.status(of: dir)
        guard status.current != nil || status.previous != nil || !status.bad.isEmpty else {
            throw SignetError(
                .notInstalled,
                "'\(dir)' holds no release installed by Signet (no signed .signet/manifest.json): `status DIR` describes an installed tree, `status FILE` an installed file",
                path: dir)
        }
        if output.json {
            Output.json(DestinationReport(dir, status))
        } else {
            // Never "confirmed" and bad at once: an unchecked release says so, one the record
            // refused says so, and a bad range is said from above the release DIR holds.
            func state(_ current: Signet.Release) -> String {
                if status.bad.contains(where: { $0.name == current.name && ($0.sequences?.contains(current.sequence) ?? ($0.sequence == current.sequence)) }) {
                    return ", refused as bad (see below)"
                }
                // Not "confirmed" either when its post-install command never finished.
                var notes: [String] = []
                if let since = status.postInstallUnfinished {
                    notes.append(
                        "post-install not finished: the command started \(since) never ended (Signet was killed in it); the next run with --post-install runs it again"
                    )
                }
                if status.unchecked { notes.append("unchecked: its health check has not passed (the next run with the health check runs it)") }
                if !notes.isEmpty { return ", " + notes.joined(separator: "; ") }
                return status.pendingSince.map { ", pending since \($0) (signet confirm \(dir))" } ?? ", confirmed"
            }
            var lines = ["\(dir):", "  current:  " + (status.current.map { $0.description + state($0) } ?? "no release installed by Signet")]
            lines.append("  previous: " + (status.previous.map { "\($0.description), kept for signet rollback" } ?? "none kept"))
            for bad in status.bad {
                let running = status.current.flatMap { $0.name == bad.name && $0.sequence < bad.sequence ? $0.sequence : nil }
                // Each refused sequence (releases installed here); an older record's range.
                let range =
                    bad.sequences.map { $0.count == 1 ? "sequence \($0[0])" : "sequences \($0.map(String.init).joined(separator: ", "))" }
                    ?? running.map { $0 + 1 == bad.sequence ? "sequence \(bad.sequence)" : "sequences \($0 + 1) to \(bad.sequence)" }
                    ?? "sequence \(bad.sequence) and lower"
                lines.append("  bad:      \(bad.name) \(range) — \(bad.reason) (\(bad.at))")
            }
            if let last = status.lastRollback { lines.append("  rollback: sequence \(last.from) to \(last.to) by \(last.by), \(last.at)") }
            if let channel = status.channel { lines.append("  channel:  \(channel.note) (since \(channel.at))") }
            Output.lines(lines)
        }
    }

    func run() throws {
        var isDirectory: ObjCBool = false
        if files.count == 1, (try? FileManager.default.destinationOfSymbolicLink(atPath: files[0])) == nil,
            FileManager.default.fileExists(atPath: files[0], isDirectory: &isDirectory), isDirectory.boolValue
        {
            return try showDestination(files[0])
        }
        let policy = trust.hasSources ? try trust.policy() : nil
        var entries: [Entry] = []
        var statuses: [Int32] = []
        // Files whose error was printed as it happened (not shown again below).
        var printedAsErrors: Set<Int> = []
        for file in files {
            let origin: FileOrigin
            do {
                origin = try FileOrigin(path: file)
            } catch let error as SignetError {
                // Reported, never taken for "not installed"; the other files are still shown.
                // Its own exit status: a missing file is 5, a directory or link given as a file 4.
                entries.append(
                    Entry(
                        path: file, installed_by_signet: false, package: nil, version: nil, sequence: nil, key_id: nil,
                        package_path: nil, source: nil, channel: nil, verdict: "unreadable", detail: error.reason,
                        error: Output.errorBody(error)))
                statuses.append(error.code.exitStatus.rawValue)
                printedAsErrors.insert(entries.count - 1)
                if !output.json { Output.error(error.description) }
                continue
            }
            var verdict = origin.isInstalled ? "not-checked" : "not-installed"
            var channel: String? = nil
            var detail =
                origin.isInstalled
                ? "signed by \(origin.keyID?.short ?? "an unknown key"), not checked (pass --pubkey to verify)"
                : "'\(file)' has no Signet attributes: it was not installed by Signet (or its attributes were stripped)"
            var status: Int32 = origin.isInstalled ? 0 : 1
            if let policy, origin.isInstalled || origin.hasSidecar {
                let report = Reverifier.verifyFile(at: file, policy: policy)
                verdict = report.verdict.name
                detail = report.detail
                channel = report.signer.flatMap { policy.channel(of: $0) }
                status =
                    report.verdict.isOK
                    ? 0 : report.verdict == .untrusted ? 3 : report.error?.code.exitStatus.rawValue ?? (report.verdict == .unreadable ? 5 : 1)
            }
            statuses.append(status)
            entries.append(
                Entry(
                    path: file, installed_by_signet: origin.isInstalled, package: origin.packageName, version: origin.version,
                    sequence: origin.sequence, key_id: origin.keyID?.hex, package_path: origin.packagePath,
                    source: origin.source, channel: channel,
                    verdict: verdict, detail: detail))
        }
        if output.json {
            Output.json(["files": entries])
        } else {
            // A file that could not be read while it was checked (an fs-verity file the kernel
            // refuses, EIO) is shown with its verdict like the others.
            for (index, entry) in entries.enumerated() where !printedAsErrors.contains(index) {
                guard entry.installed_by_signet else {
                    Output.line("\(entry.path): not installed by Signet — \(entry.detail)")
                    continue
                }
                Output.lines(
                    [
                        "\(entry.path):",
                        entry.package == nil && entry.sequence == nil
                            ? "  package:  a bare package (FILE + FILE.sig: no name, version or sequence)"
                            : "  package:  \(entry.package ?? "?") \(entry.version ?? "") (sequence \(entry.sequence.map(String.init) ?? "?"))",
                        "  path:     \(entry.package_path ?? "?")"
                    ] + (entry.source.map { ["  from:     \($0)"] } ?? []) + [
                        "  key id:   \(entry.key_id ?? "?")\(entry.channel.map { " (channel \($0))" } ?? "")",
                        "  verdict:  \(entry.verdict) — \(entry.detail)"
                    ])
            }
        }
        let status = Output.mostSevere(statuses)
        if status != 0 { throw ExitCode(status) }
    }
}

extension Status.DestinationReport {
    /// The report of `dir`'s releases (`status DIR --json`; the service's Status).
    init(_ dir: String, _ status: DestinationStatus) {
        func release(_ r: Signet.Release?) -> Update.Release? { r.map { .init(name: $0.name, version: $0.version, sequence: $0.sequence) } }
        self.init(
            destination: dir, current: release(status.current), previous: release(status.previous),
            pending: status.pendingSince != nil, pending_since: status.pendingSince, unchecked: status.unchecked,
            post_install_unfinished: status.postInstallUnfinished,
            bad: status.bad.map { .init(name: $0.name, sequence: $0.sequence, reason: $0.reason, at: $0.at, sequences: $0.sequences) },
            last_rollback: status.lastRollback.map { .init(from: $0.from, to: $0.to, by: $0.by, at: $0.at) },
            channel: status.channel.map { .init(sequence: $0.sequence, version: $0.version, note: $0.note, at: $0.at) })
    }
}
