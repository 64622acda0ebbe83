import ArgumentParser
import Foundation
import Signet

extension Repo {
    /// `signet repo rollout`: pause, resume, halt or replace a listed release's rollout plan
    /// without a new package (FORMAT.md §7 "Rollouts").
    struct Rollout: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rollout",
            abstract: "Pause, resume, halt or re-plan a release's rollout: a new targets version, signed like any other.",
            usage: """
                signet repo rollout <repo> <release> --pause | --resume | --halt
                                    [<options>]
                signet repo rollout <repo> <release> --plan <plan> [--start <time>]
                                    [<options>]
                """,
            discussion: """
                RELEASE is the target file name `repo add` printed (app-1.4.2.zip), or a package \
                name when one listed release has it. The change is staged as the next targets \
                version: the targets key holders review it (`signet repo status`) and sign it, and \
                the next refresh publishes it. Devices see it at their next update.

                --pause keeps the share of devices open now and opens no more. --resume goes on \
                from where it was paused (the plan's offsets move on by the time it was paused, \
                up to when the refresh publishes the resume: the signing delay is part of the pause). \
                --halt offers the release to no device that does not hold it; devices that hold \
                it keep it (publish a fix with a higher sequence). --plan replaces the plan from \
                --start, by default from when the refresh publishes it (however long the key \
                holders take to sign, devices see its first step first): `now` for an emergency \
                fix (every device at its next update), or slower steps.

                Examples:
                  signet repo rollout site app-1.4.2.zip --pause --key targets.pem
                  signet repo rollout site app --plan now --key targets.pem
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Argument(help: ArgumentHelp("The release: its target file name, or its package name.", valueName: "release"))
        var release: String
        @Flag(name: .long, help: "Stop widening the rollout.")
        var pause = false
        @Flag(name: .long, help: "Go on from where the rollout was paused.")
        var resume = false
        @Flag(name: .long, help: "Offer the release to no device that lacks it.")
        var halt = false
        @Option(name: .long, help: ArgumentHelp("A new plan: steps PERCENT%@OFFSET, default or now.", valueName: "plan"))
        var plan: String?
        @Option(name: .long, help: ArgumentHelp("With --plan: when its offsets count from (RFC 3339; default: its publication).", valueName: "time"))
        var start: String?
        @Option(name: .customLong("key"), help: ArgumentHelp("Also sign the staged targets with this targets key.", valueName: "key"))
        var signingKey: String?
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let target: String
            let name: String
            let version: String
            let sequence: UInt64
            let rollout: RolloutPlan
            let digest: String
        }

        func validate() throws {
            let chosen = [pause, resume, halt, plan != nil].filter { $0 }.count
            guard chosen == 1 else { throw ValidationError("give one of --pause, --resume, --halt or --plan PLAN") }
            if start != nil, plan == nil { throw ValidationError("--start goes with --plan PLAN") }
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let key = try signingKey.map { try token.load($0, passphrase: passphrase) }
            // A key whose signature would not count is refused before anything is staged.
            if let key { try repo.checkTargetsSigner(key) }
            let change: TUFRepository.RolloutChange
            if pause {
                change = .pause
            } else if resume {
                change = .resume
            } else if halt {
                change = .halt
            } else {
                change = .replace(try Repo.plan(plan ?? "", start: try start.map { try Repo.time($0, option: "--start") }))
            }
            let changed = try repo.changeRollout(of: release, change)
            guard let plan = changed.rollout else { throw SignetError(.malformedInput, "the staged release has no rollout plan") }
            // A plan for a release no channel lists reaches no device.
            if changed.channels.isEmpty {
                Output.warn(
                    "\(changed.target) is listed on no channel (a newer release of \(changed.name) took its channels): no device installs it whatever its plan; plan the release the channel names, or list this one again with `signet repo add \(repository) PACKAGE --channel NAME --allow-lower-sequence`"
                )
            }
            let digest = try Repo.signStagedTargets(repo, key: key, output: output, what: "with \(changed.target)'s rollout \(TUFRollout.describe(plan))")
            if output.json {
                Output.json(
                    Report(
                        target: changed.target, name: changed.name, version: changed.version, sequence: changed.sequence,
                        rollout: RolloutPlan(plan), digest: digest))
            } else if !output.quiet, key == nil {
                Output.line("staged \(changed.target): rollout \(TUFRollout.describe(plan))")
                Repo.sayNextSigners(repository, digest: digest)
            }
        }
    }
}
