import ArgumentParser
import Foundation
import Signet
import TOMLKit

/// `signet update`: keep DIR on what its channel names in a TUF repository (FORMAT.md §7).
struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Keep DIR on its channel: refresh a TUF repository's trusted metadata, install the release the channel names when newer.",
        discussion: """
            Refreshes the trusted metadata in --tuf-metadata DIR from --repository URL (the root \
            chain, then timestamp, snapshot and targets, each checked for its threshold of \
            signatures, version and expiry: FORMAT.md §7), picks the release --channel names, and \
            when it is newer than DIR holds, installs it as unpack URL does (range requests: only \
            what DIR lacks). The package is checked against what the metadata states before any \
            file is fetched: its signed manifest's SHA-256, name and sequence (exit 1, code \
            index-mismatch), its length and SHA-256 when it is downloaded whole; its files verify \
            with the keys of the role that lists it. Otherwise says "up to date" (with --repair, \
            after checking DIR as reverify does, and reinstalling it, fetching only what differs, \
            if anything is not ok). DIR is unchanged on any failure. --check only reports.

            The trusted metadata folder is made once from a root the device trusts (shipped with \
            it): signet tuf init --metadata-dir DIR root.json.

            Every option can come from a config file (--config FILE, TOML): one `option = value` \
            per line, named as the long options below; lists for repeatable options. Options on \
            the command line override the file's. Unknown keys are an error (exit 2). Secrets \
            never go in it (update needs none).

            Examples:
              signet update --repository https://updates.example.com/app/metadata/ \\
                --tuf-metadata /var/lib/signet/tuf/app --channel stable --dest /opt/app \\
                --tls-ca /etc/app/roots --state /var/lib/signet/app-state.json
              signet update --config /etc/signet/update.d/app.conf
              signet update --config /etc/signet/update.d/app.conf --check --json
            """
    )

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A TUF repository's metadata URL (https://…/metadata/): the channel, the release and its package keys come from its trusted metadata.",
            valueName: "url"))
    var repository: String?

    @Option(
        name: .long,
        help: ArgumentHelp("With --repository: the package name to follow (default: the one DIR holds, or the only one the channel lists).", valueName: "name"))
    var package: String?

    @Option(
        name: .customLong("targets-url"),
        help: ArgumentHelp("With --repository: where its targets are (default: targets/ beside the metadata URL).", valueName: "url"))
    var targetsURL: String?

    @Option(name: .long, help: ArgumentHelp("The directory the channel's package is installed in.", valueName: "dir"))
    var dest: String?

    @Option(name: .long, help: ArgumentHelp("A TOML file of options (the long option names; command-line options override it).", valueName: "file"))
    var config: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Leave out a key of --config FILE (a list, a command or a flag it sets: --unset health-check); repeatable.", valueName: "key"))
    var unset: [String] = []

    @Flag(name: .long, help: "Only report whether an update is available; change nothing.")
    var check = false

    @Option(name: .long, help: ArgumentHelp("The install state: the highest sequence installed per package (locked, updated atomically).", valueName: "file"))
    var state: String?

    @OptionGroup var trust: UpdateTrustOptions

    @OptionGroup(title: "Downloads") var tls: TLSOptions

    @Flag(name: .customLong("full-download"), help: "Download the whole package beside DIR first instead of reading only what DIR lacks.")
    var fullDownload = false

    @Flag(name: .long, help: "Replace a non-empty DIR that Signet did not install.")
    var force = false

    @Flag(
        name: .long,
        help: "When DIR already holds the channel's release, check it as reverify does and reinstall it if anything differs (fetching only what differs).")
    var repair = false

    @OptionGroup(title: "Releases") var releases: ReleaseOptions

    @OptionGroup var limits: LimitOptions

    @OptionGroup(title: "Encrypted packages") var decryption: DecryptionOptions

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait while another signet updates DIR (default 10).", valueName: "seconds"))
    var wait: Double = 10

    @Option(
        name: .customLong("device-id-file"),
        help: ArgumentHelp("This device's stable id, for its place in a release's rollout (default /etc/machine-id; never sent or printed).", valueName: "file")
    )
    var deviceIDFile = "/etc/machine-id"

    @Flag(
        name: .customLong("ignore-rollout"),
        help: "Install the channel's release now even if its rollout has not reached this device (a technician's run; not a config key).")
    var ignoreRollout = false

    @Flag(name: .long, help: "Install nothing new: report what is available (exit 0).")
    var hold = false

    @Option(
        name: .customLong("version-lock"),
        help: ArgumentHelp("Install only this sequence (42) or versions with this prefix (1.4: 1.4 and 1.4.2, not 1.40).", valueName: "lock"))
    var versionLock: String?

    @Option(
        name: .customLong("tlog-policy"),
        help: ArgumentHelp("Install only releases a transparency log holds under this policy (default: the root's).", valueName: "file"))
    var tlogPolicy: String?

    @OptionGroup(title: "Events") var events: EventOptions
    @OptionGroup var output: OutputOptions

    /// The config keys and the TOML type each takes (`ConfigKey.update`).
    static var configKeys: [String: ConfigKey] { ConfigKey.update }

    mutating func validate() throws {
        if let config {
            // The file's options first, then the command line's (which override them), parsed
            // again: the result is validated as if all of it had been typed.
            var rest = Self.commandLine()
            if let at = rest.firstIndex(of: "--config") {
                rest.removeSubrange(at..<min(rest.count, at + 2))
            }
            rest.removeAll { $0.hasPrefix("--config=") }
            let arguments: [String]
            do {
                arguments = try Self.arguments(fromConfig: config, overriddenBy: rest)
            } catch let failure as SignetError {
                // Not a usage error: the file's own problem, with its own code and exit status.
                ValidationFailure.record(failure)
                throw failure
            }
            // --unset did its work on the file's keys.
            var kept: [String] = []
            var skip = false
            for word in rest {
                if skip { skip = false; continue }
                if word == "--unset" { skip = true; continue }
                if word.hasPrefix("--unset=") { continue }
                kept.append(word)
            }
            do {
                self = try Update.parse(arguments + kept)
            } catch {
                // The parser's own error wraps the message: say only the message, never
                // "commandError(commandStack: …)", in text or JSON.
                throw ValidationError(Update.message(for: error))
            }
            return
        }
        if !unset.isEmpty { throw ValidationError("--unset leaves out keys of --config FILE; without --config, leave the option out") }
        guard repository != nil else {
            throw ValidationError("give --repository URL: the TUF repository's metadata URL (or repository = \"…\" in --config FILE)")
        }
        if trust.tufMetadata == nil {
            throw ValidationError(
                "--repository needs --tuf-metadata DIR: the folder of trusted metadata, made once with `signet tuf init --metadata-dir DIR root.json`")
        }
        if dest == nil { throw ValidationError("give --dest DIR (or dest = \"…\" in --config FILE)") }
        if trust.channel == nil { throw ValidationError("give --channel NAME: the channel this device follows (or channel = \"…\" in --config FILE)") }
        if !(0...86_400).contains(wait) { throw ValidationError("--wait takes 0 to 86400 seconds, not \(wait)") }
        if let versionLock { _ = try VersionLock(versionLock) }
    }

    /// The arguments after `update` on this process's command line.
    static func commandLine() -> [String] {
        let all = Array(CommandLine.arguments.dropFirst())
        guard let at = all.firstIndex(of: "update") else { return all }
        return Array(all[(at + 1)...])
    }

    /// The config file as command-line arguments, leaving out every option `given` sets.
    static func arguments(fromConfig path: String, overriddenBy given: [String]) throws -> [String] {
        let bytes: [UInt8]
        do {
            bytes = try Config.read(path)
        } catch let error as SignetError where error.code != .insecureFile {
            throw ValidationError(error.reason)
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            let number = error.source.begin.line
            let line = text.split(separator: "\n", omittingEmptySubsequences: false).dropFirst(max(0, number - 1)).first.map(String.init) ?? ""
            if let hint = Config.unquotedValueHint(line) {
                throw ValidationError("\(path):\(number): \(hint)")
            }
            // TOMLKit reads an unclosed string into the next line and names what it met there.
            if line.filter({ $0 == "\"" }).count % 2 == 1 {
                throw ValidationError(
                    "\(path):\(number): a string on this line is not closed: a \" is missing at its end (\(line.trimmingCharacters(in: .whitespaces)))")
            }
            throw ValidationError("\(path):\(number): \(Config.describe(tomlError: error.description))")
        }
        // --unset KEY: the config's KEY left out (a list or a flag cannot be emptied otherwise).
        var unset: Set<String> = []
        for (index, word) in given.enumerated() {
            if word == "--unset", index + 1 < given.count { unset.insert(given[index + 1]) }
            if word.hasPrefix("--unset=") { unset.insert(String(word.dropFirst("--unset=".count))) }
        }
        let keys = configKeys.keys.sorted()
        func unknown(_ key: String) -> String {
            if let why = ConfigKey.refusedByUpdate[key] { return why }
            return
                "unknown key '\(key)'\(ArgumentErrors.didYouMean(key, among: keys)); the keys are the long options of signet update: \(keys.joined(separator: ", "))"
        }
        for key in unset where configKeys[key] == nil {
            throw ValidationError("--unset \(key): not a config key: \(unknown(key))")
        }
        var arguments: [String] = []
        for (key, value) in table {
            let number = Config.line(of: key, in: text)
            let line = number.map { ":\($0)" } ?? ""
            if key == "index" {
                throw ValidationError(
                    "\(path)\(line): 'index' (a signed channel index) is gone: Signet follows a TUF repository. Set repository = \"https://…/metadata/\" and tuf-metadata = \"DIR\" (made once with signet tuf init --metadata-dir DIR root.json); the publisher makes the repository with signet repo"
                )
            }
            guard let kind = configKeys[key] else {
                throw ValidationError("\(path)\(line): \(unknown(key))")
            }
            let option = "--" + key
            // (`--verity-auto` on the command line is `verity` too.)
            if unset.contains(key) || given.contains(where: { $0 == option || $0.hasPrefix(option + "=") || (key == "verity" && $0 == "--verity-auto") }) {
                continue
            }
            let literal = number.flatMap { Config.literal(onLine: $0, in: text) }
            arguments += try kind.arguments(key, value, at: "\(path)\(line)", literal: literal)
        }
        return arguments
    }

    func run() throws {
        try events.start()
        Signals.onInterrupt(
            "the destination holds the tree it held before, or the whole new release if the swap had already happened (an update is all or nothing); what was fetched is kept beside it, and the next run continues from there"
        )
        guard let repository else { throw ValidationError("give --repository URL") }
        try runRepository(repository)
    }
}

extension Update {
    /// The install options (--force, --repair, the releases, the limits, --wait, --state).
    func applyInstallOptions(to install: inout InstallOptions) throws {
        install.phase = Events.phaseHandler
        install.decryptionKey = try decryption.load()
        install.force = force
        install.repair = repair
        releases.apply(to: &install)
        install.limits = limits.limits
        install.wait = wait
        install.stateFile = state
    }

    /// The TLS policy and time-outs, ranges unless --full-download.
    func downloadOptions() throws -> DownloadOptions {
        var download = try tls.options(trust: trust)
        download.ranges = !fullDownload
        return download
    }

    /// `update --repository`: the channel's release from a TUF repository.
    func runRepository(_ repository: String) throws {
        guard let dest, let channel = trust.channel, let metadataDirectory = trust.tufMetadata else {
            throw ValidationError("give --dest, --channel and --tuf-metadata")
        }
        tls.warnIfInsecure(repository)
        var options = TUFUpdateOptions(client: TUFClientOptions(metadataDirectory: metadataDirectory, metadataURL: repository), channel: channel)
        options.package = package
        options.targetsURL = targetsURL
        options.checkOnly = check
        options.deviceIDFile = deviceIDFile
        options.ignoreRollout = ignoreRollout
        options.hold = hold
        options.versionLock = try versionLock.map(VersionLock.init)
        // A policy decides what installs: a trust input.
        options.transparencyPolicy = try tlogPolicy.map { try Log.policy($0, deviceOption: "--tlog-policy") }
        if let events = Events.current { options.onRelease = { events.release($0) } }
        try applyInstallOptions(to: &options.install)
        let download = try downloadOptions()
        let chosen = options
        let report = try ProgressLine.downloading(repository, options: download, output: output) { download in
            var options = chosen
            options.client.download = download
            return try await TUFUpdater.updateAsync(to: dest, options: options)
        }
        let available = ListedRelease(report.release)
        let installed = report.installed.map { Release(name: $0.name, version: $0.version, sequence: $0.sequence) }
        let updated = report.install.map { !$0.upToDate } ?? false
        // `installed` is what DIR holds after the run; `replaced` what it held before an update.
        Output.result(
            RepositoryReport(
                channel: channel, repository: repository, root_version: report.refresh.rootVersion,
                timestamp_version: report.refresh.timestampVersion, role: report.role, installed: updated ? available.release : installed,
                available: available, update_available: report.updateAvailable, channel_is_older: report.channelIsOlder,
                updated: report.install.map { !$0.upToDate } ?? false, package_url: report.packageURL,
                transfer: report.install?.transfer.map(Unpack.Transfer.init), repaired: report.install?.repaired ?? [],
                files_shared: report.install?.filesShared ?? 0,
                files_copied: report.install?.filesCopied ?? 0,
                previous_kept: report.install?.previousKept ?? false, pending: report.install?.pending ?? false,
                verity: report.install.map(ReleaseOptions.Verity.init),
                hooks: report.install?.hooks.map(ReleaseOptions.Hook.init) ?? [], replaced: updated ? installed : nil,
                refused: report.refused.map { Refused(sequence: $0.sequence, reason: $0.reason, at: $0.at) },
                rollout: report.rollout.map(Rollout.init), deferred: report.deferred,
                choice: report.choice.map(Choice.init), log_entry: report.logged?.entry, log_size: report.logged?.checkpointSize), json: output.json)
        if output.json { return }
        let trusted = "root v\(report.refresh.rootVersion), timestamp v\(report.refresh.timestampVersion)"
        Unpack.sayRepaired(report.install, dest: dest)
        if let install = report.install, !install.upToDate {
            Output.line("updated \(dest) to \(available.name) \(available.version) (sequence \(available.sequence)) from channel \(channel); \(trusted)")
            if let transfer = install.transfer { Output.line("  " + Unpack.describe(transfer)) }
            if let logged = report.logged {
                Output.line("  in the transparency log as entry \(logged.entry) of \(logged.checkpointSize), cosigned as its policy asks")
            }
            Unpack.sayShared(install)
            ReleaseOptions.say(install)
            // It got the newest release that has reached it; a newer one is on its way.
            if let deferred = report.deferred { Output.line("  newer: \(deferred)") }
        } else if let refused = report.refused {
            // Not a failure: the device keeps what runs until the publisher ships a fix.
            Output.line(
                "held back: channel \(channel) names \(available.name) \(available.version) (sequence \(available.sequence)), which \(dest) refused (\(refused.reason), \(refused.at)); keeping \(installed.map { "\($0.version) (sequence \($0.sequence))" } ?? "what it holds") until a higher sequence is published (--retry-bad installs it again); \(trusted)"
            )
        } else if let deferred = report.deferred {
            // Not a failure: the device waits for its wave, or was told to hold.
            Output.line(
                "\(deferred); \(dest) \(installed.map { "keeps \($0.version) (sequence \($0.sequence))" } ?? "stays empty: no listed release has reached this device yet"); \(trusted)"
            )
        } else if report.updateAvailable {
            Output.line(
                "update available for \(dest): \(available.name) \(available.version) (sequence \(available.sequence), manifest SHA-256 \(report.release.manifestSHA256)), installed: \(installed.map { "\($0.version) (sequence \($0.sequence))" } ?? "nothing"); \(trusted)"
            )
        } else if report.channelIsOlder {
            Output.warn(
                "channel \(channel) names an older release than installed: \(dest) holds \(installed.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "?"), the channel names sequence \(available.sequence); nothing was changed (a repository cannot push an older release: the publisher republishes it with a higher sequence)"
            )
        } else {
            Output.line(
                "up to date: \(dest) holds \(installed.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "?"), channel \(channel) names sequence \(available.sequence); \(trusted)"
            )
        }
    }
}

/// Reading `--config` files.
enum Config {
    /// The file, at most 1 MiB, never through a FIFO.
    static func read(_ path: String) throws -> [UInt8] {
        // It can name the keys and the server: held to the rule of every file that conveys trust.
        try TrustedInput.check(path, what: "--config")
        let url = URL(fileURLWithPath: path)
        let values = try? url.resourceValues(forKeys: [.isRegularFileKey, .fileSizeKey])
        guard FileManager.default.fileExists(atPath: path) else {
            throw SignetError(.fileNotFound, "config file '\(path)' does not exist", path: path)
        }
        guard values?.isRegularFile == true, (values?.fileSize ?? 0) <= 1 << 20 else {
            throw SignetError(.malformedInput, "config file '\(path)' is not a regular file of at most 1 MiB", path: path)
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SignetError(.permissionDenied, "cannot read config file '\(path)'", path: path)
        }
        return Array(data)
    }

    /// For a TOML line `key = value` whose value is not a TOML value (TOMLKit's "could not
    /// determine value type"), the usual mistake said plainly: a string left unquoted.
    static func unquotedValueHint(_ line: String) -> String? {
        let parts = line.split(separator: "=", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let key = parts[0].trimmingCharacters(in: .whitespaces)
        let value = parts[1].trimmingCharacters(in: .whitespaces)
        guard !key.isEmpty, !value.isEmpty, let first = value.first, !"\"'[{".contains(first),
            !["true", "false"].contains(value), Int(value) == nil
        else { return nil }
        return "the value of '\(key)' is not quoted: strings in TOML are quoted, as in \(key) = \"\(value)\""
    }

    /// toml++'s message in Signet's words: what is wrong on the line and how a setting is written.
    static func describe(tomlError text: String) -> String {
        if let range = text.range(of: #"cannot redefine existing \w+ '[^']*'"#, options: .regularExpression) {
            let key = text[range].split(separator: "'").dropFirst().first.map(String.init) ?? "a key"
            return "'\(key)' is set twice: give each key once (a repeatable option takes a list, [\"…\", \"…\"])"
        }
        var detail = text
        for prefix in ["Error while parsing ", "error while parsing "] where detail.hasPrefix(prefix) { detail = String(detail.dropFirst(prefix.count)) }
        detail = detail.replacingOccurrences(of: "saw '\\n'", with: "found the end of the line").replacingOccurrences(of: "saw ", with: "found ")
        return "not valid TOML (\(detail)): each setting is one line, key = value, with strings in quotes and lists in [ ]"
    }

    /// The value on line `number` (from 1) as written: what follows `=`, without a comment.
    static func literal(onLine number: Int, in text: String) -> String? {
        guard let line = text.split(separator: "\n", omittingEmptySubsequences: false).dropFirst(number - 1).first,
            let equals = line.firstIndex(of: "=")
        else { return nil }
        let value = line[line.index(after: equals)...].prefix { $0 != "#" }.trimmingCharacters(in: .whitespaces)
        return value.isEmpty ? nil : value
    }

    /// The line (from 1) where `key` is set in a TOML text, for messages (TOMLKit keeps no
    /// positions of keys): the first line that starts with the key, bare or quoted, and `=`.
    static func line(of key: String, in text: String) -> Int? {
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            for form in [key, "\"\(key)\"", "'\(key)'"] where trimmed.hasPrefix(form) {
                if trimmed.dropFirst(form.count).drop(while: { $0 == " " || $0 == "\t" }).first == "=" { return number + 1 }
            }
        }
        return nil
    }
}
