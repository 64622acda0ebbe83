import ArgumentParser
import Foundation
import Signet

/// `signet tuf`: a TUF client (TUF specification 1.0) over a metadata folder (FORMAT.md §7).
struct TUF: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tuf",
        abstract: "Follow a TUF repository: trust one root, walk its chain, verify and download targets.",
        discussion: """
            A TUF repository (The Update Framework) separates who may do what: root keys (offline, \
            m of n) name the keys of the other roles; targets keys list the files; snapshot and \
            timestamp keys (online) keep the listing fresh. A device trusts one file, its first \
            root.json, and follows every later root version from there however long it was away.

            Example (a device's first start, then every poll):
              signet tuf init --metadata-dir /var/lib/signet/tuf/example root.json
              signet tuf download --metadata-dir /var/lib/signet/tuf/example \\
                --metadata-url https://updates.example.com/metadata/ \\
                --target-name app.zip --target-dir /var/cache/app
            """,
        subcommands: [Init.self, Refresh.self, Download.self]
    )

    /// `signet tuf` takes every key from the metadata folder; the trust options are there for
    /// the seal of a --tls-ca folder only.
    static func refuseTrustSources(_ trust: TrustOptions) throws {
        if trust.hasSources {
            throw ValidationError(
                "signet tuf takes its keys from the metadata folder (--metadata-dir); --pubkey, --trust-dir, --ca and --tuf-metadata are for packages")
        }
    }

    struct MetadataOptions: ParsableArguments {
        @Option(
            name: .customLong("metadata-dir"), help: ArgumentHelp("The folder of trusted metadata (root.json and what refreshes verified).", valueName: "dir"))
        var metadataDirectory: String
    }

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Trust ROOT (the repository's root.json) in a new metadata folder.",
            usage: "signet tuf init --metadata-dir <dir> <root.json> [--force] [<options>]",
            discussion: """
                Checks that ROOT is TUF root metadata signed by its own root threshold, creates the \
                folder (mode 0755) and writes ROOT there as root.json; other metadata from an earlier \
                root is removed. Nothing is fetched. Ship ROOT in the device image. A folder \
                that already trusts a higher root version is refused (exit 1, naming both \
                versions): the chain only moves forward. --force replaces it, for a device moved \
                to a repository made anew.

                Example:
                  signet tuf init --metadata-dir /var/lib/signet/tuf/example root.json
                """
        )

        @OptionGroup var metadata: MetadataOptions

        @Argument(help: ArgumentHelp("The repository's trusted root.json.", valueName: "root.json"))
        var root: String

        @Flag(name: .long, help: "Replace a trusted root even when it is a higher version than ROOT.")
        var force = false

        @OptionGroup var output: OutputOptions

        func run() throws {
            let bytes = try TUFRootFile.read(root)
            try TUFClient.initialize(metadataDirectory: metadata.metadataDirectory, trustedRoot: bytes, force: force)
            if output.json {
                Output.json(["metadata_dir": metadata.metadataDirectory])
            } else if !output.quiet {
                Output.line("trusted root written to \(metadata.metadataDirectory)/root.json")
            }
        }
    }

    struct RemoteOptions: ParsableArguments {
        @Option(name: .customLong("metadata-url"), help: ArgumentHelp("The repository's metadata URL (https://…/metadata/).", valueName: "url"))
        var metadataURL: String

        func validate() throws {
            if !Signet.Download.isURL(metadataURL) { throw ValidationError("--metadata-url '\(metadataURL)' is not an https:// URL") }
        }
    }

    struct Refresh: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "refresh",
            abstract: "Update the trusted metadata: root chain, timestamp, snapshot, targets.",
            discussion: """
                Follows the TUF client workflow: each next root version (signed by the old and the \
                new root threshold), then timestamp, snapshot and targets, each signed by its \
                role's threshold, never older than what the folder holds, not expired. What \
                verified is stored; a failure (exit 1, 3 or 4) leaves the folder with the last \
                verified versions.

                Example:
                  signet tuf refresh --metadata-dir /var/lib/signet/tuf/example \\
                    --metadata-url https://updates.example.com/metadata/
                """
        )

        @OptionGroup var metadata: MetadataOptions
        @OptionGroup var remote: RemoteOptions
        @OptionGroup var trust: TrustOptions
        @OptionGroup(title: "Downloads") var tls: TLSOptions
        @OptionGroup var output: OutputOptions

        func validate() throws { try TUF.refuseTrustSources(trust) }

        func run() throws {
            tls.warnIfInsecure(remote.metadataURL)
            let options = TUFClientOptions(metadataDirectory: metadata.metadataDirectory, metadataURL: remote.metadataURL)
            var client = options
            client.download = try tls.options(trust: trust)
            let report = try TUFClient(options: client).refresh()
            TUFReports.print(report, output: output)
        }
    }

    struct Download: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "download",
            abstract: "Refresh, then download targets verified against the trusted targets roles.",
            usage: """
                signet tuf download --metadata-dir <dir> --metadata-url <url>
                                    --target-name <path> [--target-name <path> ...]
                                    --target-dir <dir> [<options>]
                """,
            discussion: """
                Refreshes the metadata, finds each --target-name through the targets role and its \
                delegations, and writes it into --target-dir (made if missing; the file name is the \
                target path, percent-encoded) once its length and every hash match. A verified copy already \
                there is not fetched again. Targets are processed in order; the first failure stops.

                Example:
                  signet tuf download --metadata-dir /var/lib/signet/tuf/example \\
                    --metadata-url https://updates.example.com/metadata/ \\
                    --target-name app.zip --target-dir /var/cache/app
                """
        )

        @OptionGroup var metadata: MetadataOptions
        @OptionGroup var remote: RemoteOptions

        @Option(name: .customLong("target-name"), help: ArgumentHelp("A target path, as the targets role lists it; repeatable.", valueName: "path"))
        var targetNames: [String]

        @Option(name: .customLong("target-dir"), help: ArgumentHelp("Where verified targets are written.", valueName: "dir"))
        var targetDirectory: String

        @Option(
            name: .customLong("target-base-url"),
            help: ArgumentHelp("Where the repository's targets are (default: 'targets/' beside the metadata URL).", valueName: "url"))
        var targetBaseURL: String?

        @OptionGroup var trust: TrustOptions
        @OptionGroup(title: "Downloads") var tls: TLSOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            try TUF.refuseTrustSources(trust)
            if targetNames.isEmpty { throw ValidationError("give at least one --target-name") }
            if let targetBaseURL, !Signet.Download.isURL(targetBaseURL) { throw ValidationError("--target-base-url '\(targetBaseURL)' is not an https:// URL") }
        }

        struct Report: Encodable {
            let target: String
            let file: String
            let length: Int64
            let fetched: Bool
        }

        func run() throws {
            tls.warnIfInsecure(remote.metadataURL)
            var options = TUFClientOptions(metadataDirectory: metadata.metadataDirectory, metadataURL: remote.metadataURL)
            options.download = try tls.options(trust: trust)
            let client = try TUFClient(options: options)
            do {
                try FileManager.default.createDirectory(atPath: targetDirectory, withIntermediateDirectories: true)
            } catch {
                throw SignetError(.io, "cannot create --target-dir '\(targetDirectory)': \(error.localizedDescription)", path: targetDirectory)
            }
            let base =
                targetBaseURL ?? URL(string: "../targets/", relativeTo: URL(string: options.metadataURL))?.absoluteURL.absoluteString ?? options.metadataURL
            var reports: [Report] = []
            for name in targetNames {
                guard let target = try client.target(name) else {
                    throw SignetError(
                        .targetNotFound, "no trusted targets role lists '\(name)' (searched the targets role and the delegations for that path)", path: name)
                }
                let written = try client.download(target, from: base, into: targetDirectory)
                reports.append(Report(target: name, file: written.path, length: target.length, fetched: written.fetched))
                if !output.json && !output.quiet {
                    Output.line(
                        written.fetched ? "downloaded \(name) to \(written.path): \(target.length) bytes, verified" : "\(name) is up to date in \(written.path)"
                    )
                }
            }
            if output.json { Output.json(reports) }
        }
    }
}

enum TUFReports {
    struct Refresh: Encodable {
        let root: Int64
        let roots_walked: Int
        let timestamp: Int64
        let snapshot: Int64
        let targets: Int64
        let requests: Int
        let bytes_downloaded: UInt64
    }

    static func print(_ report: TUFRefreshReport, output: OutputOptions) {
        if output.json {
            Output.json(
                Refresh(
                    root: report.rootVersion, roots_walked: report.rootsWalked, timestamp: report.timestampVersion,
                    snapshot: report.snapshotVersion, targets: report.targetsVersion, requests: report.requests,
                    bytes_downloaded: report.bytesReceived))
        } else if !output.quiet {
            Output.line(
                "trusted: root v\(report.rootVersion)\(report.rootsWalked > 0 ? " (\(report.rootsWalked) new)" : ""), timestamp v\(report.timestampVersion), snapshot v\(report.snapshotVersion), targets v\(report.targetsVersion)"
            )
        }
    }
}

enum TUFRootFile {
    /// The initial root, as a file that conveys trust (owner, mode).
    static func read(_ path: String) throws -> [UInt8] {
        try TrustedInput.check(path, what: "the trusted root")
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SignetError(.fileNotFound, "cannot read the trusted root '\(path)': no such file; check the path", path: path)
        }
        guard data.count <= 512_000 else { throw SignetError(.malformedMetadata, "'\(path)' is larger than the 512000 bytes a root may have", path: path) }
        return [UInt8](data)
    }
}
