import ArgumentParser
import Foundation
import Signet

extension Repo {
    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add",
            abstract: "Stage a new targets version listing a package for channels.",
            usage: """
                signet repo add <repo> <pkg.zip> --channel <name> [--channel <name> ...]
                                [--allow-lower-sequence] [--key <key>] [<options>]
                """,
            discussion: """
                Copies PACKAGE into REPO/targets (under its SHA-256) and stages the next targets \
                version, which lists it with what binds it (name, version, sequence, the SHA-256 of \
                its signed manifest) and its channels. Each channel names one release of a package: \
                the one it named before is dropped from it. A release whose sequence is not higher \
                than the channel's is refused unless --allow-lower-sequence. The package must be \
                signed by a targets key (devices take their package keys from the targets role). \
                The targets key holders then sign, and the next refresh publishes it to devices.

                An encrypted package (pack --encrypt-to) is listed as any other: its manifest, \
                inside it, is read through --decryption-key, the key of one of its recipients \
                (seal it to a publisher's certificate too).

                Examples:
                  signet repo add site app-1.4.2.zip --channel stable --channel beta
                  signet repo add site app.enc.zip --channel stable \\
                    --decryption-key publisher.p12
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Argument(help: ArgumentHelp("The signed package.", valueName: "pkg.zip"))
        var package: String
        @Option(name: .long, help: ArgumentHelp("A channel the release is for; repeatable.", valueName: "name"))
        var channel: [String] = []
        @Flag(name: .customLong("allow-lower-sequence"), help: "Let a channel name a release with a lower sequence than it names now (a deliberate roll-back).")
        var allowLower = false
        @Option(
            name: .long,
            help: ArgumentHelp(
                "Roll the release out in waves: steps PERCENT%@OFFSET (1%@0h,10%@24h,50%@72h,100%@144h), or 'default' (1% to 100% over six days) or 'now'. Devices install once the share covers their bucket.",
                valueName: "plan"))
        var rollout: String?
        @Option(
            name: .customLong("rollout-start"),
            help: ArgumentHelp("When the plan's offsets count from (RFC 3339; default: its publication).", valueName: "time"))
        var rolloutStart: String?
        @Option(
            name: .customLong("key"),
            help: ArgumentHelp(
                "Also sign the staged targets with this targets key (what you just staged is what you sign): for a repository one key holds, this publishes it.",
                valueName: "key"))
        var signingKey: String?
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @Option(
            name: .customLong("log-key"),
            help: ArgumentHelp("Also log the listed releases with the repository's log key (`signet log append`).", valueName: "key.pem"))
        var logKey: String?
        @OptionGroup(title: "Encrypted packages") var decryption: DecryptionOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let target: String
            let name: String
            let version: String
            let sequence: UInt64
            let channels: [String]
            let manifest_sha256: String
            @Null var rollout: RolloutPlan?
            let digest: String
        }

        func validate() throws {
            if rolloutStart != nil, rollout == nil { throw ValidationError("--rollout-start needs --rollout PLAN") }
        }

        func run() throws {
            // The arguments swapped (`repo add app.zip site`): say so, not "not a repository".
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: package + "/metadata", isDirectory: &isFolder), isFolder.boolValue,
                !FileManager.default.fileExists(atPath: repository + "/metadata")
            {
                throw ValidationError(
                    "'\(package)' is a repository and '\(repository)' is not: the repository comes first, `signet repo add \(package) \(repository) --channel NAME`"
                )
            }
            // The plan first: a mistyped one is said before anything is opened.
            let plan = try rollout.map { try Repo.plan($0, start: try rolloutStart.map { try Repo.time($0, option: "--rollout-start") }) }
            let repo = try TUFRepository(at: repository)
            // The key first: a wrong passphrase stages nothing.
            let key = try signingKey.map { try token.load($0, passphrase: passphrase) }
            if let key { try repo.checkTargetsSigner(key) }
            let added = try repo.add(package: package, channels: channel, allowLower: allowLower, rollout: plan, decryptionKey: try decryption.load())
            // What pack takes without --sequence (the clock, SOURCE_DATE_EPOCH): once listed, every
            // later release of the name needs a higher one, so numbering releases is over.
            if (1_000_000_000..<10_000_000_000).contains(added.sequence) {
                Output.warn(
                    "\(added.name)'s sequence \(added.sequence) looks like a Unix time (what pack uses without --sequence): devices refuse a lower one, so every later release of \(added.name) needs a sequence above it; if you number releases (--sequence 143), pack this one again with its number before anyone signs it"
                )
            }
            let digest = try Repo.signStagedTargets(repo, key: key, output: output, what: "with \(added.target)")
            // A repository that keeps a log publishes no release it lacks: logged now with the
            // log key, or said what comes next.
            if let logKey {
                let outcome = try repo.appendToLog(key: try Log.signer(logKey, name: nil, policy: try repo.logPolicy()))
                if !output.json, !output.quiet {
                    Output.line("logged \(added.target); checkpoint \(outcome.checkpoint.size) cosigned by \(outcome.cosigners.joined(separator: ", "))")
                }
            } else if repo.keepsLog, !output.json, !output.quiet {
                Output.line(
                    "the repository keeps a log: `signet log append \(repository) --key LOG.pem` logs \(added.target) before `repo refresh` publishes it")
            }
            if output.json {
                Output.json(
                    Report(
                        target: added.target, name: added.name, version: added.version, sequence: added.sequence, channels: added.channels,
                        manifest_sha256: added.manifestSHA256, rollout: added.rollout.map(RolloutPlan.init), digest: digest))
            } else if !output.quiet, key == nil {
                Output.line(
                    "staged \(added.target): \(added.name) \(added.version) (sequence \(added.sequence), manifest SHA-256 \(added.manifestSHA256)) for \(added.channels.joined(separator: ", "))"
                        + (added.rollout.map { "; rollout \(TUFRollout.describe($0))" } ?? ""))
                Repo.sayNextSigners(repository, digest: digest)
            }
        }
    }
}
