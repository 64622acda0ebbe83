import ArgumentParser
import Foundation
import Signet

/// `signet repo sign` and `signet repo status`: what a signer reviews, and signs.
extension Repo {
    struct Sign: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sign",
            abstract: "Add your signature to the staged root or targets; publish it when the threshold is met.",
            usage: """
                signet repo sign <repo> --role root|targets --key <key> --digest <hex>
                                 [<options>]
                """,
            discussion: """
                Each key holder runs this on their own machine with their own key (a file, or a \
                pkcs11: URI for a key on a token). A new root needs the threshold of its own root \
                keys and of the root before it.

                You sign what you reviewed: `signet repo status` shows the staged file against \
                the published one (packages added, changed and removed with their manifest \
                SHA-256; delegations; keys and thresholds; expiry) and its digest. Give that \
                digest (at least its first 16 hex digits) with --digest; on a terminal without \
                --digest, the review is shown and you are asked. A staged file that changed since \
                is refused, as is a package that does not match its file in targets/; fields \
                signet repo never writes need --accept-unrecognized.

                Example:
                  signet repo status site
                  signet repo sign site --role targets --key t1.pem --digest 3f9c0a1b2c3d4e5f
                  signet repo sign site --role root \\
                    --key 'pkcs11:token=root1;object=root' --passphrase-file pin.txt
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("root or targets.", valueName: "role"))
        var role: String
        @Option(
            name: .long, help: ArgumentHelp("The digest `signet repo status` showed for the staged file you reviewed (16 to 64 hex digits).", valueName: "hex"))
        var digest: String?
        @Flag(
            name: .customLong("accept-unrecognized"),
            help: "Sign even though the staged file holds fields signet repo never writes (delegations, other hashes) or a longer expiry.")
        var acceptUnrecognized = false
        @OptionGroup var key: SigningKeyOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let role: String
            let version: Int64
            let digest: String
            let signatures: Int
            let threshold: Int
            let published: Bool
            @Null var missing: String?
            let already_signed: Bool
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            guard let review = try repo.review(role) else {
                throw SignetError(
                    .fileNotFound,
                    "nothing of role \(role) is waiting for signatures (staging/\(role).json): \(role == "root" ? "`signet repo rotate` stages a new root" : "`signet repo add` stages a new targets version")",
                    path: repository)
            }
            var reviewed = digest
            if reviewed == nil {
                // Asked on a terminal, after the review; never signed blind.
                guard Terminal.isInteractive, !output.json else {
                    throw SignetError(
                        .usage,
                        "review what you sign: run `signet repo status \(repository)` and give the staged \(role) file's digest with --digest (it is \(review.digest.prefix(16))… now; check what it lists before you copy it)"
                    )
                }
                review.lines.forEach { Output.standardError(Output.escaped($0) + "\n") }
                Output.standardError("Sign staged \(role) v\(review.version) (digest \(review.digest.prefix(16))…)? Type yes to sign: ")
                guard readLine()?.trimmingCharacters(in: .whitespaces).lowercased() == "yes" else {
                    throw SignetError(.usage, "not signed: you did not answer yes")
                }
                reviewed = review.digest
            }
            let signer = try key.load()
            for warning in review.warnings { Output.warn(warning) }
            let outcome = try repo.sign(role, with: signer, reviewed: reviewed ?? "", acceptUnrecognized: acceptUnrecognized)
            // The key by the id its holder knows (keygen, key show), with the TUF id.
            let by = "key \(signer.publicKey.keyID.short) (TUF \(try signer.publicKey.tufKeyID().prefix(12)))"
            if output.json {
                Output.json(
                    Report(
                        role: outcome.role, version: outcome.version, digest: review.digest, signatures: outcome.signatures, threshold: outcome.threshold,
                        published: outcome.published, missing: outcome.missing, already_signed: outcome.alreadySigned))
            } else if !output.quiet {
                if digest != nil { Output.lines(review.lines) }
                if outcome.published {
                    let seen =
                        outcome.heldRootVersion.map { "; devices see it when the next `signet repo refresh \(repository)` publishes root v\($0) with it" }
                        ?? (outcome.role == "targets" ? "; devices see it after the next `signet repo refresh`" : "")
                    Output.line(
                        "signed by \(by); published \(outcome.version).\(outcome.role).json (\(outcome.signatures) of \(outcome.threshold) signatures)\(seen)")
                } else if !outcome.heldFor.isEmpty {
                    // Signed, and held: published now it would strand every device.
                    Output.line(
                        "root v\(outcome.version) has every signature it needs (\(outcome.signatures) of \(outcome.threshold)); it changes the \(outcome.heldFor.joined(separator: ", ")) keys, so it is held until what devices read is signed again under it"
                    )
                    let status = try repo.status()
                    for alert in status.alerts where alert.kind == "held" { Output.line("next: \(alert.message)") }
                    if outcome.heldFor.contains("targets"), let staged = try repo.review("targets") {
                        Output.line(
                            "staged targets v\(staged.version) (same packages, for the new keys), digest \(staged.digest): `signet repo sign \(repository) --role targets --key KEY --digest \(staged.digest.prefix(16))`"
                        )
                    }
                } else {
                    let again = outcome.alreadySigned ? "already signed by this key, \(by) (it counts once): " : "signed by \(by): "
                    Output.line(
                        "\(again)\(outcome.role) v\(outcome.version) has \(outcome.signatures) of \(outcome.threshold); still needs \(outcome.missing ?? "more signatures") (another holder's)"
                    )
                }
            }
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Show each role's version, expiry, keys and threshold, what waits for signatures, and the channels.",
            usage: """
                signet repo status <repo> [--staged-digest <role>]
                                   [--warn-within <duration>] [<options>]
                """,
            discussion: """
                NEEDS ATTENTION lines say what strands devices unless someone acts, each with \
                the command that fixes it: a published role the root does not accept, a signed \
                root held until what it changes is signed again, any role expired, root or \
                targets expiring within --warn-within. Keys are shown by their Signet id (what \
                keygen, key show and pack print) with the TUF key id the metadata uses.


                A staged root or targets file is shown against the published one: targets \
                added, changed and removed (name, version, sequence, channels, length, SHA-256, \
                manifest SHA-256), delegations, keys and thresholds, expiry, and its digest — \
                what `signet repo sign --digest` takes — with any problem found (a package that \
                does not match its file in targets/, fields signet repo never writes).

                Example:
                  signet repo status site
                  signet repo status site --staged-digest targets
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(
            name: .customLong("staged-digest"),
            help: ArgumentHelp("Print only the digest of the staged root or targets file (for a script, after the review).", valueName: "role"))
        var stagedDigest: String?
        @Option(
            name: .customLong("warn-within"),
            help: ArgumentHelp("Flag root and targets expiring within this long (default 14d; 90s, 30m, 12h, 7d).", valueName: "duration"))
        var warnWithin = "14d"
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            struct Role: Encodable {
                let name: String
                let version: Int64
                @Null var expires: String?
                let keyids: [String]
                let signet_keyids: [String]
                let threshold: Int
            }
            struct Alert: Encodable {
                let role: String
                let kind: String
                let message: String
            }
            struct Staged: Encodable {
                struct Target: Encodable {
                    let target: String
                    let length: Int64
                    @Null var sha256: String?
                    @Null var name: String?
                    @Null var version: String?
                    @Null var sequence: UInt64?
                    @Null var channels: [String]?
                    @Null var manifest_sha256: String?
                }
                struct Change: Encodable {
                    let change: String
                    @Null var staged: Target?
                    @Null var published: Target?
                }
                struct RoleChange: Encodable {
                    let name: String
                    let keyids: [String]
                    let threshold: Int
                    let published_keyids: [String]
                    let published_threshold: Int
                }
                struct Problem: Encodable {
                    let kind: String
                    let message: String
                }
                let role: String
                let version: Int64
                let published_version: Int64
                let digest: String
                @Null var expires: String?
                @Null var published_expires: String?
                let signed_by: [String]
                let targets: [Change]
                let delegations: [String]
                let roles: [RoleChange]
                let problems: [Problem]
                let stranded: [String]
                let warnings: [String]

                init(_ review: TUFStagedReview) {
                    func target(_ t: TUFStagedReview.Target?) -> Target? {
                        t.map {
                            Target(
                                target: $0.path, length: $0.length, sha256: $0.hashes["sha256"], name: $0.package?.name, version: $0.package?.version,
                                sequence: $0.package?.sequence, channels: $0.package?.channels, manifest_sha256: $0.package?.manifestSHA256)
                        }
                    }
                    role = review.role
                    version = review.version
                    published_version = review.publishedVersion
                    digest = review.digest
                    expires = review.expires?.rfc3339
                    published_expires = review.publishedExpires?.rfc3339
                    signed_by = review.signedBy
                    targets = review.targets.map { Change(change: $0.change, staged: target($0.staged), published: target($0.published)) }
                    delegations = review.delegations
                    roles = review.roles.map {
                        RoleChange(
                            name: $0.name, keyids: $0.keyIDs, threshold: $0.threshold, published_keyids: $0.publishedKeyIDs,
                            published_threshold: $0.publishedThreshold)
                    }
                    problems = review.problems.map { Problem(kind: $0.kind, message: $0.message) }
                    stranded = review.stranded
                    warnings = review.warnings
                }
            }
            /// A published release's rollout now (a rollout the publisher can watch).
            struct Rollout: Encodable {
                let plan: Repo.RolloutPlan
                /// active, paused, halted or complete.
                let state: String
                /// The share open now, in percent.
                let percent: Double
                @Null var next_percent: Double?
                @Null var next_at: String?

                init(_ plan: TUFRollout, now: Timestamp) {
                    // A plan counting from its publication, in a version the next refresh
                    // publishes: where it stands were it published now.
                    let progress = plan.resolved(publishedAt: now).progress(at: now)
                    self.plan = Repo.RolloutPlan(plan)
                    state = progress.state.rawValue
                    percent = Double(progress.openBuckets) / 100
                    next_percent = progress.nextBuckets.map { Double($0) / 100 }
                    next_at = progress.nextAt?.rfc3339
                }
            }
            struct Package: Encodable {
                let target: String
                let name: String
                let version: String
                let sequence: UInt64
                let channels: [String]
                @Null var rollout: Rollout?
            }
            /// What a new device of a channel gets, per package name: each release offered,
            /// newest first, with the share of devices its wave has reached; the last one is
            /// everyone else's.
            struct Offer: Encodable {
                struct Release: Encodable {
                    let target: String
                    let version: String
                    let sequence: UInt64
                    let percent: Double
                }
                let channel: String
                let name: String
                let releases: [Release]
            }
            let roles: [Role]
            let staged: [Staged]
            let packages: [Package]
            let new_devices: [Offer]
            let alerts: [Alert]
        }

        /// What new devices get from each channel and package name at `now`.
        static func offers(_ packages: [TUFPackageTarget], now: Timestamp) -> [Report.Offer] {
            var groups: [String: [TUFPackageTarget]] = [:]
            for package in packages {
                for channel in package.channels { groups["\(channel)\u{0}\(package.name)", default: []].append(package) }
            }
            return groups.keys.sorted().compactMap { key in
                guard let releases = groups[key], let first = releases.first else { return nil }
                let offered = TUFChannel.offered(releases, at: now)
                return Report.Offer(
                    channel: String(key.prefix { $0 != "\u{0}" }), name: first.name,
                    releases: offered.map {
                        .init(
                            target: $0.release.target, version: $0.release.version, sequence: $0.release.sequence,
                            percent: Double($0.openBuckets) / 100)
                    })
            }
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            if let stagedDigest {
                guard let review = try repo.review(stagedDigest) else {
                    throw SignetError(.fileNotFound, "nothing of role \(stagedDigest) is staged in '\(repository)'", path: repository)
                }
                return Output.line(review.digest)
            }
            let status = try repo.status(warnWithin: try Repo.seconds(warnWithin, option: "--warn-within"))
            let reviews = try ["root", "targets"].compactMap { try repo.review($0) }
            let now = Timestamp.now
            let report = Report(
                roles: status.roles.map {
                    .init(
                        name: $0.name, version: $0.version, expires: $0.expires?.rfc3339, keyids: $0.keyIDs,
                        signet_keyids: $0.signetKeyIDs, threshold: $0.threshold)
                },
                staged: reviews.map(Report.Staged.init),
                packages: status.packages.map {
                    .init(
                        target: $0.target, name: $0.name, version: $0.version, sequence: $0.sequence, channels: $0.channels,
                        rollout: $0.rollout.map { Report.Rollout($0, now: now) })
                },
                new_devices: Self.offers(status.packages, now: now),
                alerts: status.alerts.map { .init(role: $0.role, kind: $0.kind, message: $0.message) })
            if output.json { return Output.json(report) }
            for role in status.roles {
                // Each key by its Signet id (what keygen, key show and pack print) and its TUF id.
                let keys = zip(role.signetKeyIDs, role.keyIDs).map { $0.isEmpty ? "TUF \($1.prefix(16))" : "\($0) (TUF \($1.prefix(12)))" }.joined(
                    separator: ", ")
                let expiry = role.expires.map { ", expires \($0.rfc3339) (\(role.relativeExpiry(now: now) ?? ""))" } ?? " (not published)"
                Output.line("\(role.name): v\(role.version)\(expiry), \(role.threshold) of \(role.keyIDs.count) keys: \(keys)")
            }
            for alert in status.alerts { Output.line("NEEDS ATTENTION (\(alert.role), \(alert.kind)): \(alert.message)") }
            for package in report.packages {
                Output.line(
                    "published package: \(package.target): \(package.name) \(package.version) (sequence \(package.sequence))\(package.channels.isEmpty ? "" : ", channels \(package.channels.joined(separator: ", "))")"
                )
                if let rollout = package.rollout {
                    let share = TUFRollout.percent(Int((rollout.percent * 100).rounded()))
                    var next: String? = nil
                    if let percent = rollout.next_percent, let at = rollout.next_at {
                        next = " next \(TUFRollout.percent(Int((percent * 100).rounded()))) at \(at)"
                    }
                    let state = rollout.plan.paused_at.map { "paused at \($0)" } ?? rollout.state
                    let start = rollout.plan.staged_at == nil ? rollout.plan.start : "its publication (the next refresh)"
                    Output.line(
                        "  rollout \(rollout.plan.plan) from \(start): \(state), \(share) of devices now;\(next ?? (rollout.state == "active" ? " the plan opens no more" : " no next step until `signet repo rollout` changes it"))"
                    )
                }
            }
            // What a device that holds nothing gets now, per channel.
            for offer in report.new_devices {
                let parts = offer.releases.enumerated().map { index, release in
                    let what = "\(release.version) (sequence \(release.sequence))"
                    if index == offer.releases.count - 1, release.percent >= 100 { return index == 0 ? what : "else \(what)" }
                    return "\(what) where its wave has reached them (\(TUFRollout.percent(Int((release.percent * 100).rounded()))))"
                }
                Output.line(
                    "new devices on \(offer.channel) get \(offer.name) \(parts.isEmpty ? "nothing (every listed release is halted)" : parts.joined(separator: ", "))"
                )
            }
            // What waits for signatures, against what is published: what a signer signs.
            for review in reviews {
                Output.lines(review.lines)
                Output.line("  (to drop it unsigned: `signet repo discard \(repository) --role \(review.role)`)")
            }
        }
    }
}
