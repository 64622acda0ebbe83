import ArgumentParser
import Foundation
import Signet
import TOMLKit

/// `signet update`: keep DIR on what its channel's signed index names (FORMAT.md §6).
struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "update",
        abstract: "Keep DIR on its channel: verify the signed index, install the release it names when newer.",
        discussion: """
        Fetches the channel index at INDEX_URL under the TLS options and verifies it with the \
        trust options: signed by a trusted key (a key in another channel's folder of a trust \
        directory is refused, exit 3), for --channel (exit 1 otherwise), not expired (exit 1, \
        code stale-index: a server that keeps serving an old index is found out), and with a \
        serial no lower than the highest --state saw for the channel (exit 1, code rollback: an \
        old index served again). When it names a newer release than DIR holds, installs it from \
        the URL it gives, as unpack URL does (range requests: only what DIR lacks), after checking \
        that the package's signed manifest is the one the index binds, before any file is \
        fetched (exit 1, code index-mismatch). Otherwise says "up to date" (with --repair, \
        after checking DIR as reverify does, and reinstalling it, fetching only what differs, \
        if anything is not ok). DIR is unchanged on \
        any failure. --check only reports.

        Every option can come from a config file (--config FILE, TOML): one `option = value` \
        per line, named as the long options below (index for INDEX_URL); lists for repeatable \
        options. Options on the command line override the file's. Unknown keys are an error \
        (exit 2). Secrets never go in it (update needs none).

        Examples:
          signet update https://updates.example.com/stable.json --channel stable \\
            --dest /opt/app --trust-dir /etc/app/trust --tls-ca /etc/app/roots \\
            --state /var/lib/app/state.json
          signet update --config /etc/signet/update.d/app.conf
          signet update --config /etc/signet/update.d/app.conf --check --json
        """
    )

    @Argument(help: ArgumentHelp("The channel index (https://…/CHANNEL.json); not with --repository.", valueName: "index-url"))
    var index: String?

    @Option(name: .long, help: ArgumentHelp("A TUF repository's metadata URL (https://…/metadata/): the channel, the release and its package keys come from its trusted metadata.", valueName: "url"))
    var repository: String?

    @Option(name: .long, help: ArgumentHelp("With --repository: the package name to follow (default: the one DIR holds, or the only one the channel lists).", valueName: "name"))
    var package: String?

    @Option(name: .customLong("targets-url"), help: ArgumentHelp("With --repository: where its targets are (default: targets/ beside the metadata URL).", valueName: "url"))
    var targetsURL: String?

    @Option(name: .long, help: ArgumentHelp("The directory the channel's package is installed in.", valueName: "dir"))
    var dest: String?

    @Option(name: .long, help: ArgumentHelp("A TOML file of options (the long option names; command-line options override it).", valueName: "file"))
    var config: String?

    @Flag(name: .long, help: "Only report whether an update is available; change nothing.")
    var check = false

    @Option(name: .long, help: ArgumentHelp("The install state: highest sequence per package and highest index serial per channel (locked, updated atomically).", valueName: "file"))
    var state: String?

    @OptionGroup var trust: TrustOptions

    @OptionGroup(title: "Downloads") var tls: TLSOptions

    @Flag(name: .customLong("full-download"), help: "Download the whole package beside DIR first instead of reading only what DIR lacks.")
    var fullDownload = false

    @Flag(name: .long, help: Reseal.help)
    var reseal = false

    @Flag(name: .long, help: "Replace a non-empty DIR that Signet did not install.")
    var force = false

    @Flag(name: .long, help: "When DIR already holds the channel's release, check it as reverify does and reinstall it if anything differs (fetching only what differs).")
    var repair = false

    @OptionGroup(title: "Releases") var releases: ReleaseOptions

    @OptionGroup var limits: LimitOptions

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to wait while another signet updates DIR (default 10).", valueName: "seconds"))
    var wait: Double = 10

    @OptionGroup var output: OutputOptions

    /// The config keys: every long option of this command but --config, --check, --json, --quiet.
    static let configKeys: [String: Bool] = [
        // key: takes a value (false: a flag)
        "index": true, "dest": true, "state": true, "channel": true,
        "repository": true, "tuf-metadata": true, "package": true, "targets-url": true,
        "pubkey": true, "trust-dir": true, "pin": true, "revoked": true, "ca": true, "allow-expired-cert": false,
        "expect-subject": true, "trust-salt-file": true, "trust-seal-key": true, "clock-skew": true, "allow-weak-key": false,
        "tls-ca": true, "tls-pin": true, "tls-cert": true, "allow-http": false, "max-download-size": true, "connect-timeout": true,
        "low-speed-time": true, "max-time": true, "retries": true, "retry-delay": true,
        "full-download": false, "reseal": false, "force": false, "repair": false, "max-files": true, "max-total-size": true, "max-ratio": true, "wait": true,
    ].merging(ReleaseOptions.configKeys) { a, _ in a }

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
            self = try Update.parse(arguments + rest)
            return
        }
        if repository != nil {
            if index != nil { throw ValidationError("give either a channel index URL or --repository, not both: a TUF repository replaces the channel index") }
            if trust.tufMetadata == nil { throw ValidationError("--repository needs --tuf-metadata DIR: the folder of trusted metadata, made once with `signet tuf init --metadata-dir DIR root.json`") }
            if !trust.pubkey.isEmpty || !trust.trustDirectory.isEmpty || !trust.ca.isEmpty { throw ValidationError("with --repository the package keys come from the repository's trusted metadata (the role that lists the release): leave out --pubkey, --trust-dir and --ca") }
            if reseal { throw ValidationError("--reseal renews trust directories; a TUF repository rotates its keys through its root instead") }
        } else {
            for (option, value) in [("--package", package), ("--targets-url", targetsURL)] where value != nil {
                throw ValidationError("\(option) is for --repository (a TUF repository)")
            }
        }
        if index == nil && repository == nil { throw ValidationError("give the channel index URL or --repository URL (or index = \"…\" / repository = \"…\" in --config FILE)") }
        if dest == nil { throw ValidationError("give --dest DIR (or dest = \"…\" in --config FILE)") }
        if trust.channel == nil { throw ValidationError("give --channel NAME: the channel this device follows (or channel = \"…\" in --config FILE)") }
        if !trust.hasSources && repository == nil { throw ValidationError(TrustOptions.missingSources) }
        if !(0...86_400).contains(wait) { throw ValidationError("--wait takes 0 to 86400 seconds, not \(wait)") }
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
            throw ValidationError("\(path):\(number): \(error.description)")
        }
        var arguments: [String] = []
        for (key, value) in table {
            let line = Config.line(of: key, in: text).map { ":\($0)" } ?? ""
            guard let takesValue = configKeys[key] else {
                throw ValidationError("\(path)\(line): unknown key '\(key)'; the keys are the long options of signet update (index for the URL): \(configKeys.keys.sorted().joined(separator: ", "))")
            }
            let option = key == "index" ? nil : "--" + key
            if let option, given.contains(where: { $0 == option || $0.hasPrefix(option + "=") }) { continue }
            if key == "index", given.contains(where: { !$0.hasPrefix("-") && Download.isURL($0) }) { continue }
            let values: [TOMLValueConvertible]
            if let array = value.array { values = Array(array) } else { values = [value] }
            for element in values {
                let item = element.tomlValue
                if !takesValue {
                    guard let flag = item.bool else { throw ValidationError("\(path)\(line): '\(key)' takes true or false") }
                    if flag, let option { arguments.append(option) }
                    continue
                }
                let text: String
                if let string = item.string { text = string }
                else if let int = item.int { text = String(int) }
                else if let double = item.double { text = String(double) }
                else { throw ValidationError("\(path)\(line): '\(key)' takes a string or a number") }
                if let option { arguments.append(option) }
                arguments.append(text)
            }
        }
        return arguments
    }

    struct Report: Encodable {
        let channel: String
        let serial: UInt64
        let expires: String
        @Null var installed: Release?
        let available: Release
        let update_available: Bool
        let updated: Bool
        let package_url: String
        @Null var transfer: Unpack.Transfer?
        let repaired: [String]
        let files_shared: Int
        let previous_kept: Bool
        let pending: Bool
        let hooks: [ReleaseOptions.Hook]

        struct Release: Encodable {
            let name: String
            let version: String
            let sequence: UInt64
        }
    }

    func run() throws {
        Signals.onInterrupt("the destination holds the tree it held before, or the whole new release if the swap had already happened (an update is all or nothing); the staged files are removed; the next run resumes")
        if let repository { return try runRepository(repository) }
        guard let index, let dest, let channel = trust.channel else { throw ValidationError("give the index URL, --dest and --channel") }
        Output.warn(Channel.superseded)
        if Download.isURL(index) { tls.warnIfInsecure(index) }
        var trustOptions = trust
        // --channel names the channel followed; keys at a trust directory's top level sign any
        // channel, keys in a channel's folder only that channel's index and packages.
        trustOptions.channel = nil
        var options = UpdateOptions(channel: channel)
        // --reseal's own mistakes first (usage), then the policy (which checks the seal).
        if reseal { options.install.reseal = try Reseal.renewal(of: dest, trust: trust, tls: tls, channel: channel) }
        let policy = try trustOptions.policy(sealedElsewhere: tls.sealsDirectories || reseal)
        options.checkOnly = check
        applyInstallOptions(to: &options.install)
        let download = try downloadOptions()
        let chosen = options
        let report = try ProgressLine.downloading(index, options: download, output: output) { download in
            var options = chosen
            options.download = download
            return try await Updater.updateAsync(index: index, to: dest, policy: policy, options: options)
        }
        let available = Report.Release(name: report.index.package.name, version: report.index.package.version, sequence: report.index.package.sequence)
        if output.json {
            Output.json(Report(channel: report.index.channel, serial: report.index.serial, expires: report.index.expires.rfc3339,
                               installed: report.installed.map { .init(name: $0.name, version: $0.version, sequence: $0.sequence) },
                               available: available, update_available: report.updateAvailable, updated: report.install.map { !$0.upToDate } ?? false,
                               package_url: report.packageURL, transfer: report.install?.transfer.map(Unpack.Transfer.init),
                               repaired: report.install?.repaired ?? [], files_shared: report.install?.filesShared ?? 0,
                               previous_kept: report.install?.previousKept ?? false, pending: report.install?.pending ?? false,
                               hooks: report.install?.hooks.map(ReleaseOptions.Hook.init) ?? []))
            return
        }
        let expires = "index serial \(report.index.serial), expires \(report.index.expires.rfc3339)"
        Unpack.sayRepaired(report.install, dest: dest)
        if let install = report.install, !install.upToDate {
            Output.line("updated \(dest) to \(available.name) \(available.version) (sequence \(available.sequence)) from channel \(channel); \(expires)")
            if let transfer = install.transfer { Output.line("  " + Unpack.describe(transfer)) }
            ReleaseOptions.say(install)
        } else if report.updateAvailable {
            Output.line("update available for \(dest): \(available.name) \(available.version) (sequence \(available.sequence)), installed: \(report.installed.map { "\($0.version) (sequence \($0.sequence))" } ?? "nothing"); \(expires)")
        } else {
            Output.line("up to date: \(dest) holds \(report.installed.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "?"), channel \(channel) names sequence \(available.sequence); \(expires)")
        }
    }
}

extension Update {
    /// The install options both kinds of channel share (--force, the limits, --wait, --state).
    func applyInstallOptions(to install: inout InstallOptions) {
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

    struct RepositoryReport: Encodable {
        let channel: String
        let repository: String
        let root_version: Int64
        let timestamp_version: Int64
        let role: String
        @Null var installed: Report.Release?
        let available: Report.Release
        let update_available: Bool
        let channel_is_older: Bool
        let updated: Bool
        let package_url: String
        @Null var transfer: Unpack.Transfer?
        let repaired: [String]
        let files_shared: Int
        let previous_kept: Bool
        let pending: Bool
        let hooks: [ReleaseOptions.Hook]
    }

    /// `update --repository`: the channel's release from a TUF repository.
    func runRepository(_ repository: String) throws {
        guard let dest, let channel = trust.channel, let metadataDirectory = trust.tufMetadata else { throw ValidationError("give --dest, --channel and --tuf-metadata") }
        tls.warnIfInsecure(repository)
        var options = TUFUpdateOptions(client: TUFClientOptions(metadataDirectory: metadataDirectory, metadataURL: repository), channel: channel)
        options.package = package
        options.targetsURL = targetsURL
        options.checkOnly = check
        applyInstallOptions(to: &options.install)
        let download = try downloadOptions()
        let chosen = options
        let report = try ProgressLine.downloading(repository, options: download, output: output) { download in
            var options = chosen
            options.client.download = download
            return try await TUFUpdater.updateAsync(to: dest, options: options)
        }
        let available = Report.Release(name: report.release.name, version: report.release.version, sequence: report.release.sequence)
        let installed = report.installed.map { Report.Release(name: $0.name, version: $0.version, sequence: $0.sequence) }
        if output.json {
            Output.json(RepositoryReport(channel: channel, repository: repository, root_version: report.refresh.rootVersion,
                                         timestamp_version: report.refresh.timestampVersion, role: report.role, installed: installed,
                                         available: available, update_available: report.updateAvailable, channel_is_older: report.channelIsOlder,
                                         updated: report.install.map { !$0.upToDate } ?? false, package_url: report.packageURL,
                                         transfer: report.install?.transfer.map(Unpack.Transfer.init), repaired: report.install?.repaired ?? [], files_shared: report.install?.filesShared ?? 0,
                               previous_kept: report.install?.previousKept ?? false, pending: report.install?.pending ?? false,
                               hooks: report.install?.hooks.map(ReleaseOptions.Hook.init) ?? []))
            return
        }
        let trusted = "root v\(report.refresh.rootVersion), timestamp v\(report.refresh.timestampVersion)"
        Unpack.sayRepaired(report.install, dest: dest)
        if let install = report.install, !install.upToDate {
            Output.line("updated \(dest) to \(available.name) \(available.version) (sequence \(available.sequence)) from channel \(channel); \(trusted)")
            if let transfer = install.transfer { Output.line("  " + Unpack.describe(transfer)) }
            ReleaseOptions.say(install)
        } else if report.updateAvailable {
            Output.line("update available for \(dest): \(available.name) \(available.version) (sequence \(available.sequence)), installed: \(installed.map { "\($0.version) (sequence \($0.sequence))" } ?? "nothing"); \(trusted)")
        } else if report.channelIsOlder {
            Output.warn("channel \(channel) names an older release than installed: \(dest) holds \(installed.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "?"), the channel names sequence \(available.sequence); nothing was changed (a repository cannot push an older release: the publisher republishes it with a higher sequence)")
        } else {
            Output.line("up to date: \(dest) holds \(installed.map { "\($0.name) \($0.version) (sequence \($0.sequence))" } ?? "?"), channel \(channel) names sequence \(available.sequence); \(trusted)")
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
              !["true", "false"].contains(value), Int(value) == nil else { return nil }
        return "the value of '\(key)' is not quoted: strings in TOML are quoted, as in \(key) = \"\(value)\""
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
