import ArgumentParser
import Signet

/// What `unpack` and `update` do around the swap: the previous release kept for a
/// rollback, a release left pending until confirmed, and the hooks.
struct ReleaseOptions: ParsableArguments {
    enum YesNo: String, ExpressibleByArgument, CaseIterable {
        case yes, no
    }

    enum IMAMode: String, ExpressibleByArgument, CaseIterable {
        case user, security
    }

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Also write each file's signature as an IMA v2 signature to user.ima, or to security.ima (root only) for the kernel's IMA appraisal (README: \"Let the kernel check every read\"; the certificate: signet key show --ima-cert).",
            valueName: "user|security"))
    var ima: IMAMode?

    /// `--verity` (required) or `--verity-auto` (where it can be used).
    enum VerityMode: String, EnumerableFlag {
        case verity, verityAuto

        static func name(for value: Self) -> NameSpecification {
            value == .verity ? .customLong("verity") : .customLong("verity-auto")
        }

        static func help(for value: Self) -> ArgumentHelp? {
            switch value {
            case .verity:
                "Make each installed file an fs-verity file (the package made with pack --verity; the kernel measures each against the signed digest, then checks every read, and reverify measures instead of reading). Refused before anything is written where the package or DIR's filesystem cannot (ext4 needs tune2fs -O verity)."
            case .verityAuto: "As --verity where the package and DIR's filesystem allow it; otherwise install without it and say why."
            }
        }
    }

    @Flag var verity: VerityMode?

    @Option(
        name: .customLong("require-manifest-sha256"),
        help: ArgumentHelp(
            "Install only the release whose signed manifest has this SHA-256 (what update --check reported and someone confirmed); any other, even correctly signed, is refused (exit 1, not-confirmed) before anything of it is fetched.",
            valueName: "hex"))
    var requireManifestSHA256: String?

    @Option(
        name: .customLong("keep-previous"),
        help: ArgumentHelp(
            "Keep the replaced release beside DIR (.DIR.signet-previous, sharing its unchanged files) for `signet rollback` and the health check: yes (the default) or no.",
            valueName: "yes|no"))
    var keepPrevious: YesNo = .yes

    @Flag(
        name: .long,
        help:
            "Leave the new release pending until `signet confirm DIR`: if the machine restarts first, the boot unit (signet-boot-check@.service) rolls it back."
    )
    var pending = false

    @Option(
        name: .customLong("pre-install"),
        help: ArgumentHelp(
            "A command run once the release is staged and verified, before the swap: exit 0 installs it, exit 75 means not now (what was staged is kept for the next run; update exits 0), anything else refuses it (exit 1, pre-install-refused).",
            valueName: "cmd"))
    var preInstall: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Swap only inside this maintenance window, in local time: \"Mon..Fri 02:00..04:00\", \"22:00..06:00\"; repeatable. Outside it the release is staged and verified, then kept for the next run.",
            valueName: "window"))
    var window: [String] = []

    @Option(
        name: .customLong("post-install"),
        help: ArgumentHelp(
            "A command run after each successful swap, without a shell (write sh -c '…' for one), with SIGNET_* variables in a clean environment; its output goes into the report.",
            valueName: "cmd"))
    var postInstall: String?

    @Option(
        name: .customLong("health-check"),
        help: ArgumentHelp(
            "A command run after the swap (and the post-install command): if it fails or times out, the previous release is swapped back, this one is recorded as bad, and signet exits 1 (health-check-failed).",
            valueName: "cmd"))
    var healthCheck: String?

    @Flag(
        name: .customLong("retry-bad"),
        help: "Install a release DIR refused as bad (its health check failed, or it was rolled back) all the same, once what made it fail is fixed.")
    var retryBad = false

    @Option(name: .customLong("health-timeout"), help: ArgumentHelp("How long the health check may take: 90s, 5m or 1h (default 60s).", valueName: "duration"))
    var healthTimeout: String = "60s"

    func validate() throws {
        if let hash = requireManifestSHA256,
            hash.utf8.count != 64 || !hash.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) || (0x41...0x46).contains($0) })
        {
            throw ValidationError("--require-manifest-sha256 takes a SHA-256 in hex (64 digits), as update --check reports it; not '\(hash)'")
        }
        for spec in window { _ = try MaintenanceWindow(spec) }
        for (option, value) in [("--pre-install", preInstall), ("--post-install", postInstall), ("--health-check", healthCheck)] {
            if let value, InstallHooks.words(value) == nil {
                throw ValidationError(
                    "\(option) '\(value)' is not a command: it is empty or has an unterminated quote (commands are split into words as a shell would, without a shell)"
                )
            }
        }
        if Self.seconds(healthTimeout) == nil {
            throw ValidationError("--health-timeout takes a number and a unit: 90s, 5m or 1h (1s to 24h), not '\(healthTimeout)'")
        }
        if healthCheck != nil, keepPrevious == .no {
            throw ValidationError("--health-check needs the previous release to go back to: leave out --keep-previous=no")
        }
        if pending, keepPrevious == .no {
            throw ValidationError("--pending needs the previous release to go back to: leave out --keep-previous=no")
        }
    }

    /// "90s", "5m", "1h", or seconds alone; 1 s to 24 h.
    static func seconds(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600]
        var number = Substring(text)
        var scale = 1.0
        if let last = text.last, let unit = units[last] { number = number.dropLast(); scale = unit }
        guard let value = Double(number), value.isFinite, value * scale >= 1, value * scale <= 86_400 else { return nil }
        return value * scale
    }

    func apply(to options: inout InstallOptions) {
        options.requiredManifestSHA256 = requireManifestSHA256?.lowercased()
        options.imaAttribute = ima.map { $0 == .user ? "user.ima" : "security.ima" }
        options.verity =
            switch verity {
            case .verity?: .on;
            case .verityAuto?: .auto;
            case nil: .off
            }
        options.keepPrevious = keepPrevious == .yes
        options.pending = pending
        options.retryBad = retryBad
        options.hooks.preInstall = preInstall.flatMap(InstallHooks.words)
        options.windows = window.compactMap { try? MaintenanceWindow($0) }
        options.hooks.postInstall = postInstall.flatMap(InstallHooks.words)
        options.hooks.healthCheck = healthCheck.flatMap(InstallHooks.words)
        options.hooks.healthTimeout = Self.seconds(healthTimeout) ?? 60
    }

    /// What the hooks did, for the text output.
    static func say(_ report: InstallReport) {
        if let reason = report.verityNotUsed {
            Output.line("  fs-verity: not used: \(reason)")
        } else if report.verityEnabled > 0 {
            Output.line(
                "  fs-verity: \(report.verityEnabled) file\(report.verityEnabled == 1 ? "" : "s") made fs-verity files, each measured by the kernel against the signed digest; every read of them is checked"
            )
        }
        if report.previousKept { Output.line("  the replaced release is kept for `signet rollback \(report.destination)`") }
        if report.pending { Output.line("  pending: run `signet confirm \(report.destination)` once it runs well; a restart before that rolls it back") }
        for hook in report.hooks {
            Output.line(
                "  \(hook.hook): \(hook.outcome)" + (hook.output.isEmpty ? "" : " — " + hook.output.split(separator: "\n").suffix(2).joined(separator: " | ")))
        }
        for hook in report.hooks where hook.hook == "post-install" && !hook.succeeded {
            Output.warn("the post-install command \(hook.outcome); the release is installed")
        }
    }

    /// fs-verity in `--json`: files made fs-verity files, and why it was not used (`auto`).
    struct Verity: Encodable {
        let enabled: Int
        @Null var not_used: String?

        init(_ report: InstallReport) {
            (enabled, not_used) = (report.verityEnabled, report.verityNotUsed)
        }
    }

    /// The hooks in `--json`.
    struct Hook: Encodable {
        let hook: String
        let command: [String]
        @Null var exit: Int32?
        let timed_out: Bool
        let output: String
        @Null var failure: String?

        init(_ result: HookResult) {
            (hook, command, exit, timed_out, output, failure) = (result.hook, result.command, result.exitStatus, result.timedOut, result.output, result.failure)
        }
    }
}
