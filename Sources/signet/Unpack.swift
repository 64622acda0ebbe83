import ArgumentParser
import Signet

struct Unpack: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpack",
        abstract: "Verify a package and install it into a directory, atomically.",
        discussion: """
            Nothing is written to DIR until the package is verified: its structure and every entry \
            name first, then the manifest signature, expiry, the exact file set, and each file's \
            size, SHA-256 and signature as it streams into a staging directory beside DIR. Each \
            installed file carries its signature in the user.signet.sig extended attribute (and \
            user.signet.meta); DIR/.signet/ keeps the manifest and all signatures. DIR is then \
            swapped for the new tree in one step: at every instant it holds the old or the new tree.

            DIR may be absent, empty, or a tree Signet installed; anything else needs --force. \
            Installing a lower sequence of the same package name is refused (--allow-downgrade). \
            A package of another name (another product signed by the same key) does not replace \
            an installed tree, nor one that --state records for DIR, unless --change-package says \
            DIR changes product; nor does a bare package replace a tree installed from a manifest. \
            The release DIR already holds (the same signed manifest) is not installed again: \
            "up to date", nothing written. --repair checks DIR as reverify does and reinstalls \
            only a tree that no longer checks whole (for a URL, fetching only what differs); \
            --force reinstalls it regardless.

            Files DIR holds unchanged (the same path, size and SHA-256) are hashed where they are \
            and shared with the new tree (hard links) when their mode and attributes stay the \
            same, else copied: an update writes what changed. The replaced release is kept beside \
            DIR (.DIR.signet-previous) for `signet rollback DIR` unless --keep-previous=no. \
            --post-install runs a command after the swap; a failing --health-check swaps the \
            previous release back (exit 1, health-check-failed); --pending leaves the release \
            to be confirmed (`signet confirm DIR`) before the next boot. A release rolled back \
            from is not installed again until a higher sequence is published (bad-release).

            One update of DIR at a time: unpack locks .DIR.signet-lock beside DIR from the rollback \
            check to the swap; a second unpack waits (--wait) or fails with exit 5. Installed files \
            get the manifest's modes (0644/0755) and folders 0755, whatever the umask. An \
            interrupted unpack removes its staging directory; after a kill -9, the next unpack to \
            DIR removes what is left.

            An https:// URL is read with HTTP range requests over one connection, under the TLS \
            options below: the end of the zip, its directory and the manifest first, which must \
            verify before any resource is asked for; then each file whose path, size and SHA-256 \
            equal a file DIR holds is copied from DIR (and hashed as it is copied; a modified one \
            is fetched), and only the others are fetched, streamed into the staging directory. \
            Nothing of the package is stored on the device. A server that does not answer ranges, \
            or --full-download, gets the package downloaded whole into .DIR.signet-download beside \
            DIR first (continued by the next run if cut short).

            Examples:
              signet unpack app-1.4.2.zip --dest /opt/app --pubkey keys/public_key.der
              signet unpack https://updates.example.com/app-1.4.2.zip --dest /opt/app \\
                --pubkey keys/public_key.der --tls-ca /etc/app/roots \\
                --tls-pin sha256//BASE64
              signet unpack app-1.4.3.zip --dest /opt/app --pubkey keys/public_key.der \\
                --post-install "systemctl try-restart app.service" \\
                --health-check "/opt/app/bin/selftest" --health-timeout 30s
            """
    )

    @Argument(help: ArgumentHelp("The package: a file, or an https:// URL (read with range requests, only what DIR lacks).", valueName: "pkg.zip|url"))
    var package: String

    @Option(name: .long, help: ArgumentHelp("The directory to install into.", valueName: "dir"))
    var dest: String

    @OptionGroup var trust: TrustOptions

    @OptionGroup(title: "Downloads") var tls: TLSOptions

    @Flag(
        name: .customLong("full-download"),
        help: "For a URL: download the whole package beside DIR first instead of reading only what DIR lacks with range requests.")
    var fullDownload = false

    @Flag(name: .long, help: "The older layout: FILE and FILE.sig pairs, no manifest (no completeness, rollback or expiry guarantee).")
    var bare = false

    @Option(name: .long, help: "Signature algorithm of a --bare package.")
    var algorithm: SignatureAlgorithm = .default

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A file recording the highest sequence installed per package name, across destinations (locked, updated atomically).", valueName: "file"))
    var state: String?

    @Flag(name: .long, help: "Replace a non-empty DIR that Signet did not install; reinstall the release DIR already holds.")
    var force = false

    @Flag(
        name: .long,
        help:
            "When DIR already holds this release, check it as reverify does and reinstall it if anything differs (modified, missing or added files, modes, attributes)."
    )
    var repair = false

    @Flag(
        name: .customLong("case-insensitive-dest"),
        help: "DIR's filesystem ignores case: refuse a package with two paths that differ only in case (automatic on vfat, exFAT, NTFS and SMB).")
    var caseInsensitiveDest = false

    @Flag(name: .customLong("allow-downgrade"), help: "Install a lower sequence over the same package.")
    var allowDowngrade = false

    @Flag(
        name: .customLong("change-package"),
        help:
            "DIR changes product: install a package of another name (or a bare one) over the installed tree or what --state records for DIR; the change is recorded in --state."
    )
    var changePackage = false

    @OptionGroup(title: "Releases") var releases: ReleaseOptions

    @OptionGroup var limits: LimitOptions

    @OptionGroup(title: "Encrypted packages") var decryption: DecryptionOptions

    @Option(
        name: .customLong("tlog-policy"),
        help: ArgumentHelp("Install only a release a transparency log holds under this policy (its proof beside the package).", valueName: "file"))
    var tlogPolicy: String?

    @Option(
        name: .customLong("tlog-state"),
        help: ArgumentHelp("With --tlog-policy: where the largest checkpoint per log is kept (default /var/lib/signet/tlog).", valueName: "dir"))
    var tlogState: String?

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait while another signet updates DIR (default 10).", valueName: "seconds"))
    var wait: Double = 10

    @OptionGroup(title: "Events") var events: EventOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
        if !(0...86_400).contains(wait) { throw ValidationError("--wait takes 0 to 86400 seconds, not \(wait)") }
        // One rule (FORMAT §7): the gate before the swap needs a signed release to judge — its
        // name, version and sequence for the pre-install command — which a bare package has not.
        if bare, !releases.window.isEmpty || releases.preInstall != nil {
            throw ValidationError(
                "--bare cannot be combined with --window or --pre-install: a bare package has no signed release (name, version, sequence) for the gate to judge; install it without them, or pack it with signet pack"
            )
        }
    }

    struct Report: Encodable {
        let destination: String
        let package: String
        @Null var name: String?
        @Null var version: String?
        @Null var sequence: UInt64?
        @Null var replaced_sequence: UInt64?
        let signer: String
        @Null var channel: String?
        let files: [String]
        let attributes: String
        let atomic_exchange: Bool
        @Null var leftover: String?
        @Null var transfer: Transfer?
        let up_to_date: Bool
        let repaired: [String]
        let files_shared: Int
        let files_copied: Int
        let previous_kept: Bool
        let pending: Bool
        let verity: ReleaseOptions.Verity
        let hooks: [ReleaseOptions.Hook]
    }

    /// How a URL's package was transferred.
    struct Transfer: Encodable {
        let mode: String
        let bytes_downloaded: UInt64
        let requests: Int
        let files_fetched: Int
        let files_reused: Int
        let files_resumed: Int
        let bytes_fetched: UInt64
        let bytes_total: UInt64
        let package_size: UInt64
        let chunks_reused: Int
        let chunk_bytes_reused: UInt64
        let chunks_fetched: Int
        let chunk_bytes_fetched: UInt64
        let chunks_resumed: Int
        let chunk_bytes_resumed: UInt64
        let file_bytes_resumed: UInt64
        let answer_bytes_resumed: UInt64

        init(_ report: TransferReport) {
            mode = report.mode.rawValue
            bytes_downloaded = report.bytesDownloaded
            requests = report.requests
            files_fetched = report.filesFetched
            files_reused = report.filesReused
            files_resumed = report.filesResumed
            bytes_fetched = report.bytesFetched
            bytes_total = report.bytesTotal
            package_size = report.packageSize
            chunks_reused = report.chunksReused
            chunk_bytes_reused = report.chunkBytesReused
            chunks_fetched = report.chunksFetched
            chunk_bytes_fetched = report.chunkBytesFetched
            chunks_resumed = report.chunksResumed
            chunk_bytes_resumed = report.chunkBytesResumed
            file_bytes_resumed = report.fileBytesResumed
            answer_bytes_resumed = report.answerBytesResumed
        }
    }

    func run() throws {
        try events.start()
        Signals.onInterrupt(
            "'\(dest)' holds the tree it held before, or the whole new one if the swap had already happened (an install is all or nothing); "
                + (Download.isURL(package)
                    ? "what was fetched is kept beside it: run the same command again to continue from there" : "the staged files are removed"))
        var options = InstallOptions()
        options.phase = Events.phaseHandler
        options.force = force
        options.repair = repair
        releases.apply(to: &options)
        options.allowDowngrade = allowDowngrade
        options.changePackage = changePackage
        options.bare = bare
        options.caseInsensitiveDestination = caseInsensitiveDest
        options.bareAlgorithm = algorithm
        options.limits = limits.limits
        options.wait = wait
        options.stateFile = state
        options.decryptionKey = try decryption.load()
        if let tlogPolicy {
            options.transparency = TransparencyRequirement(
                policy: try Log.policy(tlogPolicy, deviceOption: "--tlog-policy"), stateDirectory: tlogState ?? "/var/lib/signet/tlog",
                download: try tls.options(trust: trust))
        } else if tlogState != nil {
            throw ValidationError("--tlog-state goes with --tlog-policy FILE")
        }
        let policy = try trust.policy(sealedElsewhere: tls.sealsDirectories)
        let report: InstallReport
        if Download.isURL(package) {
            tls.warnIfInsecure(package)
            let (package, dest, options) = (package, dest, options)
            var download = try tls.options(trust: trust)
            download.ranges = !fullDownload
            report = try ProgressLine.downloading(package, options: download, output: output) {
                try await Installer.installAsync(downloading: package, to: dest, policy: policy, options: options, download: $0)
            }
        } else {
            report = try ProgressLine.showing("installing " + dest, output: output) { progress in
                var options = options
                options.progress = progress
                return try Installer.install(package, to: dest, policy: policy, options: options)
            }
        }
        if let leftover = report.leftover {
            Output.warn("installed, but the replaced tree '\(leftover)' could not be removed; the next unpack to '\(dest)' removes it (or remove it yourself)")
        }
        if !report.attributesWritten {
            Output.warn("'\(dest)' is on a filesystem without user extended attributes: signatures are kept only in \(dest)/.signet/sigs/")
        }
        Output.result(
            Report(
                destination: dest, package: package, name: report.manifest?.name, version: report.manifest?.version,
                sequence: report.manifest?.sequence, replaced_sequence: report.replacedSequence,
                signer: report.signer.keyID.hex, channel: policy.channel(of: report.signer.keyID), files: report.files,
                attributes: report.attributesWritten ? "xattr" : "sidecar", atomic_exchange: report.exchanged,
                leftover: report.leftover, transfer: report.transfer.map(Transfer.init),
                up_to_date: report.upToDate, repaired: report.repaired, files_shared: report.filesShared, files_copied: report.filesCopied,
                previous_kept: report.previousKept, pending: report.pending, verity: .init(report), hooks: report.hooks.map(ReleaseOptions.Hook.init)),
            json: output.json)
        if output.json { return }
        if report.upToDate, let manifest = report.manifest {
            Output.line(
                "up to date: \(dest) holds \(manifest.name) \(manifest.version) (sequence \(manifest.sequence))\(repair ? ", and it checks whole" : ""); nothing written (--repair checks it, --force reinstalls it)"
            )
            return
        }
        Self.sayRepaired(report, dest: dest)
        let what = report.manifest.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "bare package"
        let replaced = report.replacedSequence.map { ", replacing sequence \($0)" } ?? ""
        Output.line(
            "installed \(what) into \(dest): \(report.files.count) file\(report.files.count == 1 ? "" : "s") verified, signed by key \(report.signer.keyID.short)\(replaced)"
        )
        if let transfer = report.transfer {
            Output.line("  " + Self.describe(transfer))
        }
        Self.sayShared(report)
        ReleaseOptions.say(report)
    }

    /// Unchanged files shared with the replaced tree and copied from it.
    static func sayShared(_ report: InstallReport) {
        guard report.filesShared + report.filesCopied > 0 else { return }
        var text = "  unchanged files: \(count(report.filesShared)) shared with the replaced tree (nothing written)"
        if report.filesCopied > 0 {
            text +=
                ", \(count(report.filesCopied)) copied (written again: a file is shared only when the key that signed the release that wrote it is still trusted for this package, with the same mode and attributes)"
        }
        Output.line(text)
    }

    /// With --repair, what the check of DIR found (the reinstall that follows replaced it):
    /// "repairing DIR: 2 findings (a.txt: modified, b.txt: missing)".
    static func sayRepaired(_ install: InstallReport?, dest: String) {
        guard let repaired = install?.repaired, !repaired.isEmpty else { return }
        let shown = repaired.prefix(5).joined(separator: ", ") + (repaired.count > 5 ? ", …" : "")
        Output.line("repairing \(dest): \(repaired.count) finding\(repaired.count == 1 ? "" : "s") (\(shown))")
    }

    /// "fetched 20 of 2,000 files (1.2 MiB of 64 MiB), reused 1,980 from DIR; 1.3 MiB in 5 requests".
    static func describe(_ transfer: TransferReport) -> String {
        let all = transfer.filesFetched + transfer.filesReused + transfer.filesResumed
        var text =
            "fetched \(count(transfer.filesFetched)) of \(count(all)) file\(all == 1 ? "" : "s") (\(ProgressLine.bytes(transfer.bytesFetched)) of \(ProgressLine.bytes(transfer.bytesTotal)))"
        if transfer.mode == .ranges {
            text += ", reused \(count(transfer.filesReused)) from the installed tree"
            if transfer.filesResumed > 0 { text += ", \(count(transfer.filesResumed)) staged by an interrupted run" }
            if transfer.chunksReused > 0 {
                text +=
                    "; large files rebuilt from \(count(transfer.chunksReused)) chunk\(transfer.chunksReused == 1 ? "" : "s") already here (\(ProgressLine.bytes(transfer.chunkBytesReused)))"
                    + " and \(count(transfer.chunksFetched)) fetched (\(ProgressLine.bytes(transfer.chunkBytesFetched)))"
            }
            if transfer.chunksResumed > 0 {
                text +=
                    "; \(ProgressLine.bytes(transfer.chunkBytesResumed)) of large files continued from where an interrupted run stopped (\(count(transfer.chunksResumed)) chunk\(transfer.chunksResumed == 1 ? "" : "s") checked)"
            }
            if transfer.fileBytesResumed > 0 {
                text += "; \(ProgressLine.bytes(transfer.fileBytesResumed)) of files continued at the byte where an interrupted run stopped"
            }
            if transfer.answerBytesResumed > 0 {
                text += "; \(ProgressLine.bytes(transfer.answerBytesResumed)) that a killed run had received, not asked for again"
            }
            text +=
                "; \(ProgressLine.bytes(transfer.bytesDownloaded)) downloaded in \(count(transfer.requests)) range request\(transfer.requests == 1 ? "" : "s")"
        } else {
            text += "; the whole package downloaded (\(ProgressLine.bytes(transfer.packageSize)))"
        }
        return text
    }

    /// 1,980
    static func count(_ value: Int) -> String {
        let digits = Array(String(value))
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return out
    }
}
