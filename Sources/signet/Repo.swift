import ArgumentParser
import Foundation
import Signet

/// `signet repo`: a TUF repository on plain files, for any static HTTPS server (FORMAT.md §7).
struct Repo: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repo",
        abstract: "Publish releases as a TUF repository: offline root, m-of-n targets, online snapshot and timestamp.",
        discussion: """
            REPO/metadata and REPO/targets are what the web server publishes; REPO/staging (never \
            published) holds a new root or targets version while its key holders sign it.

            Example (publisher):
              signet repo init site --root-key r1.der --root-key r2.der \\
                --root-threshold 2 --targets-key t1.der --targets-key t2.der \\
                --targets-threshold 2 --snapshot-key s.der --timestamp-key ts.der
              signet repo sign site --role root --key r1.pem
              signet repo sign site --role root --key 'pkcs11:token=root2;object=root'
              signet repo add site app-1.4.2.zip --channel stable
              signet repo sign site --role targets --key t1.pem
              signet repo sign site --role targets --key t2.pem
              signet repo refresh site --snapshot-key s.pem --timestamp-key ts.pem
            """,
        subcommands: [Init.self, Add.self, Rollout.self, Resign.self, Sign.self, Refresh.self, Rotate.self, Renew.self, Discard.self, Status.self]
    )

    /// After a command staged the next targets version: its digest; with `key` (`--key`), also
    /// signed, saying what that did (`what`: the change, for the line when it publishes).
    static func signStagedTargets(_ repo: TUFRepository, key: PrivateKey?, output: OutputOptions, what: String) throws -> String {
        let review = try repo.review("targets")
        let digest = review?.digest ?? ""
        if let key {
            for warning in review?.warnings ?? [] { Output.warn(warning) }
            let outcome = try repo.sign("targets", with: key, reviewed: digest)
            if !output.json, !output.quiet {
                Output.line(
                    outcome.published
                        ? "published \(outcome.version).targets.json \(what); devices see it after the next `signet repo refresh`"
                        : "signed targets v\(outcome.version): \(outcome.signatures) of \(outcome.threshold); still needs \(outcome.missing ?? "more signatures")"
                )
            }
        }
        return digest
    }

    /// What the targets key holders do next with a staged version.
    static func sayNextSigners(_ repository: String, digest: String) {
        Output.line(
            "staged targets digest \(digest); next: each targets key holder reviews it (`signet repo status \(repository)`) and runs `signet repo sign \(repository) --role targets --key KEY --digest \(digest.prefix(16))`"
        )
    }

    /// An RFC 3339 time option, or now.
    static func time(_ text: String?, option: String) throws -> Timestamp {
        guard let text else { return .now }
        if let time = Timestamp(rfc3339: text) { return time }
        // An offset (`+01:00`, `-05:00`): the same instant in UTC, as the signed plan writes it.
        if text.count == 25, let sign = text.dropFirst(19).first, sign == "+" || sign == "-",
            let base = Timestamp(rfc3339: String(text.prefix(19)) + "Z")
        {
            let offset = text.suffix(5).split(separator: ":")
            if offset.count == 2, let hours = Int64(offset[0]), let minutes = Int64(offset[1]), hours < 24, minutes < 60,
                offset.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isNumber) })
            {
                let seconds = (hours * 3_600 + minutes * 60) * (sign == "+" ? -1 : 1)
                return Timestamp(secondsSinceEpoch: base.secondsSinceEpoch + seconds)
            }
        }
        throw ValidationError("\(option) takes an RFC 3339 time, in UTC (2026-12-01T02:00:00Z) or with an offset (2026-12-01T03:00:00+01:00), not '\(text)'")
    }

    /// A rollout plan as JSON reports give it.
    struct RolloutPlan: Encodable {
        let plan: String
        let start: String
        let state: String
        @Null var paused_at: String?
        @Null var staged_at: String?

        init(_ rollout: TUFRollout) {
            plan = rollout.planText
            start = rollout.start.rfc3339
            state = rollout.state.rawValue
            paused_at = rollout.pausedAt?.rfc3339
            staged_at = rollout.stagedAt?.rfc3339
        }
    }

    /// A rollout plan from its text (`TUFRollout(plan:start:)`), with a "did you mean" for a
    /// mistyped named plan, and a warning when the plan never opens the whole fleet. Without a
    /// start it counts from its publication (FORMAT.md §7): staged now, its clock standing
    /// still until devices can see it.
    static func plan(_ text: String, start: Timestamp?) throws -> TUFRollout {
        var plan: TUFRollout
        do {
            let now = Timestamp.now
            plan = try TUFRollout(plan: text, start: start ?? now)
            if start == nil { plan = plan.countingFromPublication(stagedAt: now) }
        } catch var error as SignetError where !text.contains("%") && !text.contains("@") {
            let hint = ArgumentErrors.didYouMean(text.lowercased(), among: TUFRollout.namedPlans.keys.sorted())
            if !hint.isEmpty { error.reason = "'\(text)' is not a rollout plan\(hint) (\(error.reason))" }
            throw error
        }
        if let last = plan.steps.last, last.buckets < TUFRollout.bucketCount {
            Output.warn(
                "the plan \(plan.planText) stops at \(TUFRollout.percent(last.buckets)) of devices: the rest never install this release unless the plan is replaced (signet repo rollout … --plan); end it with 100%@… to reach the whole fleet"
            )
        }
        return plan
    }

    /// Public keys given on the command line (public key files or certificates).
    static func publicKeys(_ paths: [String]) throws -> [PublicKey] {
        try paths.map { path in
            do {
                return try PublicKey(contentsOf: path)
            } catch var error as SignetError where error.code == .wrongKeyKind {
                // A repository names public keys; each private key stays with its holder.
                error.reason =
                    "'\(path)' is a private key; a repository names each role's public keys (public_key.der beside it, or `signet key show KEY --pubout FILE`), and the private key stays with its holder, who signs with `signet repo sign`"
                throw error
            }
        }
    }

    /// `90s`, `30m`, `12h`, `7d` (at most 366 days) or `1y` (at most 10 years) in seconds.
    static func seconds(_ text: String, option: String) throws -> Int64 {
        let refused = ValidationError("\(option) takes a number and a unit: 90s, 30m, 12h, 7d (at most 366d) or 1y (at most 10y), not '\(text)'")
        guard let unit = text.last, let value = Int64(text.dropLast()), value > 0 else { throw refused }
        let (scale, limit): (Int64, Int64)
        switch unit {
        case "s": (scale, limit) = (1, 366 * 86_400)
        case "m": (scale, limit) = (60, 366 * 86_400)
        case "h": (scale, limit) = (3_600, 366 * 86_400)
        case "d": (scale, limit) = (86_400, 366 * 86_400)
        case "y": (scale, limit) = (365 * 86_400, 10 * 365 * 86_400)
        default: throw refused
        }
        let (seconds, overflow) = value.multipliedReportingOverflow(by: scale)
        guard !overflow, seconds <= limit else { throw refused }
        return seconds
    }

    struct Init: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Make a repository: each role's public keys and threshold; root and targets staged for signing.",
            discussion: """
                Writes root version 1 and an empty targets version 1 into REPO/staging: nothing is \
                published until the root key holders (the root threshold of them) and then the \
                targets key holders sign with `signet repo sign`. Keys are public key files or \
                certificates (RSA; `signet key` prints a token key's public key). Give a role the \
                same key as another only if you accept that one stolen key then holds both roles.

                A small publisher can start with one key for every role: --key KEY (the private \
                key) makes root and targets version 1 with it and signs them at once; `repo add \
                --key KEY` then stages and signs each release. The trade-off: whoever steals that \
                key owns every device, and nothing is kept offline. Move to separate, offline keys \
                later with `signet repo rotate`.

                Examples:
                  signet repo init site --root-key r1.der --root-key r2.der \\
                    --root-threshold 2 --targets-key t1.der \\
                    --snapshot-key online.der --timestamp-key online.der
                  signet repo init site --key release/private_key.pem
                """
        )

        @Argument(help: ArgumentHelp("The repository folder (created).", valueName: "repo"))
        var repository: String

        @Option(name: .customLong("root-key"), help: ArgumentHelp("A root key (public key file); repeatable.", valueName: "file"))
        var rootKeys: [String] = []
        @Option(name: .customLong("root-threshold"), help: ArgumentHelp("Root signatures needed (default 1).", valueName: "m"))
        var rootThreshold = 1
        @Option(name: .customLong("targets-key"), help: ArgumentHelp("A targets (release) key; repeatable.", valueName: "file"))
        var targetsKeys: [String] = []
        @Option(
            name: .customLong("targets-threshold"), help: ArgumentHelp("Targets signatures needed (default 1; 2 for a two-person release).", valueName: "m"))
        var targetsThreshold = 1
        @Option(name: .customLong("snapshot-key"), help: ArgumentHelp("A snapshot key (online); repeatable.", valueName: "file"))
        var snapshotKeys: [String] = []
        @Option(name: .customLong("snapshot-threshold"), help: ArgumentHelp("Snapshot signatures needed (default 1).", valueName: "m"))
        var snapshotThreshold = 1
        @Option(name: .customLong("timestamp-key"), help: ArgumentHelp("A timestamp key (online); repeatable.", valueName: "file"))
        var timestampKeys: [String] = []
        @Option(name: .customLong("timestamp-threshold"), help: ArgumentHelp("Timestamp signatures needed (default 1).", valueName: "m"))
        var timestampThreshold = 1

        @Option(name: .customLong("root-expires-in"), help: ArgumentHelp("Lifetime of each root version (default 1y).", valueName: "duration"))
        var rootLifetime = "1y"
        @Option(name: .customLong("targets-expires-in"), help: ArgumentHelp("Lifetime of each targets version (default 90d).", valueName: "duration"))
        var targetsLifetime = "90d"
        @Option(name: .customLong("snapshot-expires-in"), help: ArgumentHelp("Lifetime of each snapshot (default 7d).", valueName: "duration"))
        var snapshotLifetime = "7d"
        @Option(
            name: .customLong("timestamp-expires-in"),
            help: ArgumentHelp("Lifetime of each timestamp (default 1d): refresh more often than this.", valueName: "duration"))
        var timestampLifetime = "1d"

        @Option(
            name: .customLong("key"),
            help: ArgumentHelp(
                "One private key for every role (a small publisher: one stolen key owns every device); root and targets v1 are signed with it at once.",
                valueName: "key"))
        var singleKey: String?
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions

        @OptionGroup var output: OutputOptions

        func validate() throws {
            if singleKey != nil {
                if !(rootKeys + targetsKeys + snapshotKeys + timestampKeys).isEmpty || rootThreshold != 1 || targetsThreshold != 1 || snapshotThreshold != 1
                    || timestampThreshold != 1
                {
                    throw ValidationError(
                        "--key is one key for every role: leave out --root-key, --targets-key, --snapshot-key, --timestamp-key and the thresholds")
                }
                return
            }
            // Every missing role named at once (only the first was).
            let missing = [("--root-key", rootKeys), ("--targets-key", targetsKeys), ("--snapshot-key", snapshotKeys), ("--timestamp-key", timestampKeys)]
                .filter { $0.1.isEmpty }.map(\.0)
            if !missing.isEmpty {
                throw ValidationError("give at least one \(missing.joined(separator: ", ")) (or --key KEY: one key for every role)")
            }
        }

        func run() throws {
            if let singleKey { return try runSingleKey(singleKey) }
            var lifetimes = TUFRepository.Lifetimes()
            lifetimes.root = try Repo.seconds(rootLifetime, option: "--root-expires-in")
            lifetimes.targets = try Repo.seconds(targetsLifetime, option: "--targets-expires-in")
            lifetimes.snapshot = try Repo.seconds(snapshotLifetime, option: "--snapshot-expires-in")
            lifetimes.timestamp = try Repo.seconds(timestampLifetime, option: "--timestamp-expires-in")
            try TUFRepository.create(
                at: repository,
                root: .init(keys: try Repo.publicKeys(rootKeys), threshold: rootThreshold),
                targets: .init(keys: try Repo.publicKeys(targetsKeys), threshold: targetsThreshold),
                snapshot: .init(keys: try Repo.publicKeys(snapshotKeys), threshold: snapshotThreshold),
                timestamp: .init(keys: try Repo.publicKeys(timestampKeys), threshold: timestampThreshold),
                lifetimes: lifetimes)
            let repo = try TUFRepository(at: repository)
            let root = try repo.review("root")?.digest ?? "", targets = try repo.review("targets")?.digest ?? ""
            if output.json {
                Output.json(["repository": repository, "staged": "root targets", "root_digest": root, "targets_digest": targets])
            } else if !output.quiet {
                Output.line(
                    "made \(repository): root v1 (digest \(root)) and targets v1 (digest \(targets)) staged; next: `signet repo sign \(repository) --role root --key KEY --digest \(root.prefix(16))` by \(rootThreshold) root key holder\(rootThreshold == 1 ? "" : "s"), then the same with --role targets"
                )
            }
        }

        /// `--key`: every role the one key; root and targets v1 signed with it (what its holder
        /// just made is what they sign).
        func runSingleKey(_ spec: String) throws {
            let key = try token.load(spec, passphrase: passphrase)
            var lifetimes = TUFRepository.Lifetimes()
            lifetimes.root = try Repo.seconds(rootLifetime, option: "--root-expires-in")
            lifetimes.targets = try Repo.seconds(targetsLifetime, option: "--targets-expires-in")
            lifetimes.snapshot = try Repo.seconds(snapshotLifetime, option: "--snapshot-expires-in")
            lifetimes.timestamp = try Repo.seconds(timestampLifetime, option: "--timestamp-expires-in")
            let one = TUFRepository.RoleKeys(keys: [key.publicKey])
            let repo = try TUFRepository.create(at: repository, root: one, targets: one, snapshot: one, timestamp: one, lifetimes: lifetimes)
            var digests: [String] = []
            for role in ["root", "targets"] {
                let review = try repo.review(role)!
                digests.append(review.digest)
                _ = try repo.sign(role, with: key, reviewed: review.digest)
            }
            if output.json {
                Output.json(["repository": repository, "staged": "", "root_digest": digests[0], "targets_digest": digests[1]])
            } else if !output.quiet {
                Output.warn(
                    "one key holds every role of \(repository): whoever steals it owns every device that trusts this repository; move to separate, offline keys with `signet repo rotate` when you can"
                )
                Output.line(
                    "made \(repository) with one key for every role: root v1 and targets v1 published; next: `signet repo add \(repository) PKG.zip --channel stable --key KEY`, then `signet repo refresh` hourly"
                )
            }
        }
    }

    struct Refresh: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "refresh",
            abstract: "Publish a new timestamp (and a new snapshot when targets changed): the cron job.",
            usage: """
                signet repo refresh <repo> --snapshot-key <key> --timestamp-key <key>
                                    [<options>]
                """,
            discussion: """
                Needs only the online keys. Run it more often than the timestamp lifetime (a \
                systemd timer or cron every hour for the default 1d): devices refuse an expired \
                timestamp, which is how a server holding back releases is found out.

                Root and targets need their key holders, so a refresh cannot renew them: it exits 1 \
                (after publishing the timestamp) when either has expired or expires within \
                --warn-within, naming the command that renews it (`signet repo renew`). A signed \
                root that changes the targets, snapshot or timestamp keys is held until what it \
                changes is signed again; the refresh given the keys it names publishes it.

                Example:
                  signet repo refresh site --snapshot-key online.pem --timestamp-key online.pem
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .customLong("snapshot-key"), help: ArgumentHelp("A snapshot key (file or pkcs11: URI); repeatable.", valueName: "key"))
        var snapshotKeys: [String] = []
        @Option(name: .customLong("timestamp-key"), help: ArgumentHelp("A timestamp key (file or pkcs11: URI); repeatable.", valueName: "key"))
        var timestampKeys: [String] = []
        @Option(
            name: .customLong("warn-within"),
            help: ArgumentHelp(
                "Exit 1 when root or targets (which need their key holders) expires within this long (default 14d; 90s, 30m, 12h, 7d).", valueName: "duration"))
        var warnWithin = "14d"
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup var output: OutputOptions

        func validate() throws {
            let missing = [("--snapshot-key", snapshotKeys), ("--timestamp-key", timestampKeys)].filter { $0.1.isEmpty }.map(\.0)
            if !missing.isEmpty {
                throw ValidationError("give \(missing.joined(separator: " and ")): the online keys that sign the snapshot and the timestamp")
            }
        }

        struct Report: Encodable {
            struct Alert: Encodable {
                let role: String
                let kind: String
                let message: String
            }
            let snapshot: Int64
            let new_snapshot: Bool
            let timestamp: Int64
            let timestamp_expires: String
            let targets: Int64
            @Null var published_root: Int64?
            @Null var held: String?
            let expiring: [Alert]
        }

        func run() throws {
            func load(_ keys: [String]) throws -> [PrivateKey] {
                try keys.map { try token.load($0, passphrase: passphrase) }
            }
            let window = try Repo.seconds(warnWithin, option: "--warn-within")
            let outcome = try TUFRepository(at: repository).refresh(
                snapshotKeys: try load(snapshotKeys), timestampKeys: try load(timestampKeys), warnWithin: window)
            if output.json {
                Output.json(
                    Report(
                        snapshot: outcome.snapshotVersion, new_snapshot: outcome.newSnapshot, timestamp: outcome.timestampVersion,
                        timestamp_expires: outcome.timestampExpires.rfc3339, targets: outcome.targetsVersion, published_root: outcome.publishedRoot,
                        held: outcome.held, expiring: outcome.expiring.map { .init(role: $0.role, kind: $0.kind, message: $0.message) }))
            } else if !output.quiet {
                let root = outcome.publishedRoot.map { ", root v\($0) (held until now)" } ?? ""
                Output.line(
                    "published timestamp v\(outcome.timestampVersion) (expires \(outcome.timestampExpires.rfc3339)), snapshot v\(outcome.snapshotVersion)\(outcome.newSnapshot ? " (new)" : ""), targets v\(outcome.targetsVersion)\(root)"
                )
            }
            if let held = outcome.held { Output.warn(held) }
            // What this job cannot sign and will strand devices: the timer's unit fails loudly.
            guard outcome.expiring.isEmpty else {
                for alert in outcome.expiring { Output.error(alert.message) }
                throw ExitCode(SignetError.Code.expiredMetadata.exitStatus.rawValue)
            }
        }
    }
}
