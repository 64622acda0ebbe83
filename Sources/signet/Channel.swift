import ArgumentParser
import Foundation
import Signet

/// `signet channel`: signed channel indexes that devices poll (FORMAT.md §6).
struct Channel: ParsableCommand {
    /// Channel indexes are superseded by TUF repositories (issue 37): said on every use.
    static let superseded = "channel indexes (signet-channel/1) are superseded by TUF repositories (signet repo, signet update --repository; FORMAT.md §7), where no single stolen key owns the fleet; they will be removed in a later release (CHANGELOG: moving a fleet)"

    static let configuration = CommandConfiguration(
        commandName: "channel",
        abstract: "Publish channel indexes: what a channel's devices should run, signed and expiring.",
        subcommands: [Sign.self]
    )

    struct Sign: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sign",
            abstract: "Sign a channel index naming a package; run again (cron) to renew its expiry.",
            usage: """
            signet channel sign --channel <name> --package <pkg.zip> --url <url>
                                  --key <key> --out <index.json> [<options>]
            """,
            discussion: """
            Writes INDEX.json: the channel, the package's name, version and sequence, its URL \
            (relative to the index's own URL, or absolute), its size and SHA-256 and the SHA-256 of \
            its signed manifest, when it was signed, when it expires, and a serial. Devices running \
            `signet update` refuse an expired index (a server holding back updates is found out) \
            and one whose serial is lower than one they saw (an old index served again).

            The serial is one higher than that of the index --out holds, and at least the current \
            Unix time; --serial N sets it (it must still be higher). Re-sign before the index \
            expires: a cron job or timer running this command again on the same package renews it. \
            The index is a DSSE envelope signed with the key, as packages are (files or pkcs11:).

            Example:
              signet channel sign --channel stable --package app-1.4.2.zip \\
                --url app-1.4.2.zip --key keys/private_key.pem --out stable.json \\
                --expires-in 7d
            """
        )

        @Option(name: .long, help: ArgumentHelp("The channel: 1 to 64 letters, digits, '.', '_' or '-'.", valueName: "name"))
        var channel: String

        @Option(name: .long, help: ArgumentHelp("The signed package the channel's devices should run.", valueName: "pkg.zip"))
        var package: String

        @Option(name: .long, help: ArgumentHelp("Where devices find the package: relative to the index's URL, or https://….", valueName: "url"))
        var url: String

        @OptionGroup var key: SigningKeyOptions

        @Option(name: .long, help: "Signature algorithm.")
        var algorithm: SignatureAlgorithm = .default

        @Option(name: .long, help: ArgumentHelp("The index file to write (replaced atomically; its serial is read first).", valueName: "index.json"))
        var out: String

        @Option(name: .customLong("expires-in"), help: ArgumentHelp("How long devices accept it: 90s, 30m, 12h or 7d (default 7d).", valueName: "duration"))
        var expiresIn: String = "7d"

        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("The index's serial (higher than the one --out holds).", valueName: "n"))
        var serial: UInt64?

        @OptionGroup var output: OutputOptions

        func validate() throws {
            guard Self.seconds(expiresIn) != nil else {
                throw ValidationError("--expires-in takes a number and a unit: 90s, 30m, 12h or 7d (at most 366d), not '\(expiresIn)'")
            }
            guard ChannelIndex.isValidChannel(channel) else {
                throw ValidationError("--channel takes 1 to 64 letters, digits, '.', '_' or '-', not '\(channel)'")
            }
        }

        /// `90s`, `30m`, `12h`, `7d` in seconds (1 s to 366 days); nil for anything else.
        static func seconds(_ text: String) -> Int64? {
            guard let unit = text.last, let value = Int64(text.dropLast()), value > 0 else { return nil }
            let scale: Int64
            switch unit {
            case "s": scale = 1
            case "m": scale = 60
            case "h": scale = 3_600
            case "d": scale = 86_400
            default: return nil
            }
            let (seconds, overflow) = value.multipliedReportingOverflow(by: scale)
            guard !overflow, seconds <= 366 * 86_400 else { return nil }
            return seconds
        }

        struct Report: Encodable {
            let index: String
            let channel: String
            let serial: UInt64
            let signed: String
            let expires: String
            let key_id: String
            let package: PackageReport

            struct PackageReport: Encodable {
                let name: String
                let version: String
                let sequence: UInt64
                let url: String
                let size: UInt64
                let sha256: String
                let manifest_sha256: String
            }
        }

        func run() throws {
            Output.warn(Channel.superseded)
            let described = try ChannelIndex.package(at: package, url: url)
            let privateKey = try key.load()
            let index = try ChannelIndex.publish(described, channel: channel, signer: Signer(key: privateKey, algorithm: algorithm),
                                                 lifetime: Self.seconds(expiresIn)!, serial: serial, out: out)
            if output.json {
                let p = index.package
                Output.json(Report(index: out, channel: index.channel, serial: index.serial, signed: index.signed.rfc3339, expires: index.expires.rfc3339,
                                   key_id: index.keyID.hex,
                                   package: .init(name: p.name, version: p.version, sequence: p.sequence, url: p.url, size: p.size,
                                                  sha256: p.sha256, manifest_sha256: p.manifestSHA256)))
                return
            }
            Output.line("signed \(out): channel \(index.channel) serial \(index.serial), \(index.package.name) \(index.package.version) (sequence \(index.package.sequence)) at \(index.package.url), expires \(index.expires.rfc3339)")
        }
    }
}
