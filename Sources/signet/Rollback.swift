import ArgumentParser
import Signet

struct Rollback: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback",
        abstract: "Swap the previous release back into DIR (the one unpack and update keep beside it).",
        usage: "signet rollback <dir> [--boot-check] [--wait <seconds>] [<options>]\nsignet rollback --boot-check --config <file> [<options>]",
        discussion: """
            The previous release (.DIR.signet-previous) is checked first: its manifest must be the \
            one that verified when it was installed, and every file must match it (a file it shares \
            with DIR's release and that was edited in place is named, and nothing changes). Then it \
            is swapped with DIR in one atomic rename, the release swapped out is removed and \
            recorded as bad: it is not installed again, a higher sequence is. With --state, the \
            state file records that DIR was rolled back on purpose (reverify --state accepts it), \
            while the highest sequence installed stays recorded: no server can push an older release.

            --boot-check rolls back only a release installed with --pending that was not confirmed \
            (signet confirm DIR) before the machine restarted; otherwise it does nothing, exit 0. \
            The boot unit signet-boot-check@NAME.service runs it early at every boot.

            Exit 0 when rolled back (or nothing to do with --boot-check), 1 when refused \
            (rollback-refused: no previous release, or it no longer verifies), 5 when DIR is busy.

            Examples:
              signet rollback /opt/app
              signet rollback /opt/app --state /var/lib/signet/app-state.json \\
                --post-install 'systemctl restart app'
              signet rollback --boot-check --config /etc/signet/update.d/app.conf
            """
    )

    @Argument(help: ArgumentHelp("The installed directory.", valueName: "dir"))
    var dest: String?

    @Flag(name: .customLong("boot-check"), help: "Only roll back a pending release installed before this boot (the boot unit's check).")
    var bootCheck = false

    @Option(name: .long, help: ArgumentHelp("Take DIR (dest) and --state (state) from an update config file.", valueName: "file"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("The install state to record the rollback in.", valueName: "file"))
    var state: String?

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait while another signet updates DIR (default 10).", valueName: "seconds"))
    var wait: Double = 10

    @Option(
        name: .customLong("post-install"),
        help: ArgumentHelp(
            "The app's post-install command, run after the swap with SIGNET_EVENT=rollback (with --config: the config's post-install).", valueName: "cmd"))
    var postInstall: String?

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if dest == nil && config == nil { throw ValidationError("name the installed directory (or --config FILE of its update)") }
        if dest != nil && config != nil { throw ValidationError("give either DIR or --config FILE, not both") }
        if !(0...86_400).contains(wait) { throw ValidationError("--wait takes 0 to 86400 seconds, not \(wait)") }
        if let postInstall, InstallHooks.words(postInstall) == nil {
            throw ValidationError(
                "--post-install '\(postInstall)' is not a command: it is empty or has an unterminated quote (commands are split into words as a shell would, without a shell)"
            )
        }
    }

    /// DIR, --state and --post-install, from the arguments or the update config.
    static func destination(_ dest: String?, state: String?, config: String?, postInstall: String? = nil) throws -> (
        dest: String, state: String?, postInstall: String?
    ) {
        guard let config else { return (dest!, state, postInstall) }
        let arguments = try Update.arguments(fromConfig: config, overriddenBy: [])
        func value(_ option: String) -> String? { arguments.firstIndex(of: option).flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil } }
        guard let dest = value("--dest") else { throw SignetError(.usage, "config file '\(config)' has no dest = \"…\"", path: config) }
        return (dest, state ?? value("--state"), postInstall ?? value("--post-install"))
    }

    struct Report: Encodable {
        let destination: String
        let rolled_back: Bool
        @Null var from: Update.Release?
        @Null var to: Update.Release?
        @Null var skipped: String?
        let hooks: [ReleaseOptions.Hook]
    }

    func run() throws {
        let (dest, stateFile, command) = try Self.destination(dest, state: state, config: config, postInstall: postInstall)
        var options = RollbackOptions()
        options.bootCheck = bootCheck
        options.stateFile = stateFile
        options.wait = wait
        options.postInstall = command.flatMap(InstallHooks.words)
        let report = try Installer.rollback(dest, options: options)
        func release(_ r: Signet.Release?) -> Update.Release? { r.map { .init(name: $0.name, version: $0.version, sequence: $0.sequence) } }
        if output.json {
            Output.json(
                Report(
                    destination: dest, rolled_back: report.to != nil, from: release(report.from), to: release(report.to), skipped: report.skipped,
                    hooks: report.hooks.map(ReleaseOptions.Hook.init)))
            return
        }
        if let skipped = report.skipped {
            Output.line("nothing to roll back: \(skipped)")
        } else if let from = report.from, let to = report.to {
            Output.line(
                "rolled back \(dest) from \(from.description) to \(to.description); sequence \(from.sequence) is recorded as bad (a higher sequence installs; `--retry-bad` installs it again)"
            )
            if stateFile == nil {
                Output.line("  not recorded in an install state (no --state): `reverify --state` accepts it from the record beside \(dest)")
            }
            for hook in report.hooks {
                Output.line(
                    "  \(hook.hook): \(hook.outcome)"
                        + (hook.output.isEmpty ? "" : " — " + hook.output.split(separator: "\n").suffix(2).joined(separator: " | ")))
                if !hook.succeeded { Output.warn("the post-install command \(hook.outcome); the rollback is made") }
            }
        }
    }
}
