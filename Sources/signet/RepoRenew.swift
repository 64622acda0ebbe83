import ArgumentParser
import Foundation
import Signet

/// `signet repo renew` and `signet repo discard`: staged versions made without a release, and
/// dropped when no one will sign them.
extension Repo {
    struct Renew: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "renew",
            abstract: "Stage root or targets again with a new expiry (same content) for its key holders to sign.",
            usage: """
                signet repo renew <repo> --role root|targets [--key <key>] [<options>]
                """,
            discussion: """
                Targets expires 90 days after it was signed and root after a year (the lifetimes \
                `repo init` set); devices refuse to update past either. A release renews targets; \
                without one, renew stages the next version with the same packages (or keys) and a \
                new expiry, and the key holders review and sign it as usual (`signet repo status`, \
                `signet repo sign`). `signet repo refresh` exits 1 when either is within 14 days of \
                expiring, naming this command. It also re-stages targets for a new targets key set \
                when a root rotated them without it.

                Examples:
                  signet repo renew site --role targets
                  signet repo sign site --role targets --key t1.pem --digest 3f9c0a1b2c3d4e5f
                  signet repo renew site --role targets --key release.pem
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("root or targets.", valueName: "role"))
        var role: String
        @Option(
            name: .customLong("key"),
            help: ArgumentHelp(
                "Also sign what was staged with this key (what you just staged is what you sign): for a role one key holds, this publishes it.",
                valueName: "key"))
        var signingKey: String?
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let role: String
            let version: Int64
            let digest: String
            let published: Bool
        }

        func validate() throws {
            guard role == "root" || role == "targets" else {
                throw ValidationError("--role is root or targets: snapshot and timestamp are renewed by `signet repo refresh`")
            }
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            // The key first: a wrong passphrase stages nothing.
            let key = try signingKey.map { try token.load($0, passphrase: passphrase) }
            let version = try repo.renew(role)
            let review = try repo.review(role)
            let digest = review?.digest ?? ""
            var published = false
            if let key {
                let outcome = try repo.sign(role, with: key, reviewed: digest)
                published = outcome.published
                if !output.json, !output.quiet {
                    Output.line(
                        outcome.published
                            ? "published \(outcome.version).\(role).json (expires \(review?.expires?.rfc3339 ?? "?"))\(role == "targets" ? "; devices see it after the next `signet repo refresh`" : "")"
                            : "signed \(role) v\(outcome.version): \(outcome.signatures) of \(outcome.threshold); still needs \(outcome.missing ?? "more signatures")"
                    )
                }
            }
            if output.json {
                return Output.json(Report(role: role, version: version, digest: digest, published: published))
            }
            if !output.quiet, key == nil {
                Output.line("staged \(role) v\(version) (same content, expires \(review?.expires?.rfc3339 ?? "?")), digest \(digest)")
                Output.line(
                    "next: each \(role) key holder reviews it (`signet repo status \(repository)`) and runs `signet repo sign \(repository) --role \(role) --key KEY --digest \(digest.prefix(16))`\(role == "targets" ? "; then `signet repo refresh` publishes it" : "")"
                )
            }
        }
    }

    struct Discard: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "discard",
            abstract: "Drop the staged root or targets (and the packages only it lists) without publishing anything.",
            discussion: """
                A staged version no one will sign (the wrong package added, a rotation abandoned) \
                is removed from REPO/staging, and for targets every package file that `repo add` \
                copied into REPO/targets for it and that no published version lists. What is \
                published is not touched. `signet repo status` shows what is staged first.

                Example:
                  signet repo status site
                  signet repo discard site --role targets
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("root or targets.", valueName: "role"))
        var role: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let role: String
            let version: Int64
            let removed: [String]
        }

        func run() throws {
            let (version, removed) = try TUFRepository(at: repository).discard(role)
            if output.json { return Output.json(Report(role: role, version: version, removed: removed)) }
            if !output.quiet {
                Output.line(
                    "discarded staged \(role) v\(version)\(removed.isEmpty ? "" : "; removed from targets/: \(removed.joined(separator: ", "))"); nothing published changed"
                )
            }
        }
    }
}
