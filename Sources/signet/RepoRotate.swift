import ArgumentParser
import Foundation
import Signet

extension Repo {
    struct Rotate: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rotate",
            abstract: "Stage a new root version that changes a role's keys or threshold (revoke a stolen key).",
            usage: """
                signet repo rotate <repo> --role <role> [--add <file> ...]
                                   [--remove <file|keyid> ...] [--threshold <m>]
                                   [<options>]
                """,
            discussion: """
                The root key holders then sign it (`signet repo sign --role root`): the threshold of \
                the current root's keys and of the new root's. Devices walk every root version, so \
                one that was offline during several rotations still ends on the newest keys.

                Example (replace a compromised release key):
                  signet repo rotate site --role targets --remove bob.der --add carol.der
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Option(name: .long, help: ArgumentHelp("root, targets, snapshot or timestamp.", valueName: "role"))
        var role: String
        @Option(name: .long, help: ArgumentHelp("A public key to add to the role; repeatable.", valueName: "file"))
        var add: [String] = []
        @Option(
            name: .long,
            help: ArgumentHelp(
                "A key to remove: its public key file, or its key id (the first characters will do; see `signet repo status`); repeatable.",
                valueName: "file|keyid"))
        var remove: [String] = []
        @Option(name: .long, help: ArgumentHelp("The role's new threshold.", valueName: "m"))
        var threshold: Int?
        @OptionGroup var output: OutputOptions

        func run() throws {
            let files = remove.filter { FileManager.default.fileExists(atPath: $0) }
            let version = try TUFRepository(at: repository).rotate(
                role, add: try Repo.publicKeys(add), remove: remove.filter { !files.contains($0) },
                removeKeys: try Repo.publicKeys(files), threshold: threshold)
            let repo = try TUFRepository(at: repository)
            let digest = try repo.review("root")?.digest ?? ""
            // Changing what signs targets, snapshot or timestamp needs more than root signatures.
            let again = try repo.rolesToSignAgain()
            // A release signed by a key this root removes: devices that lack it would refuse it
            // until it is re-signed (same sequence, every file untouched).
            let stranded = role == "targets" ? try repo.strandedByStagedRoot() : []
            for release in stranded {
                Output.warn(repo.describeStranded(release, underRoot: version))
            }
            let targets = again.contains("targets") ? try repo.review("targets") : nil
            if output.json {
                Output.json(
                    RotateReport(
                        staged_root: version, digest: digest, staged_targets: targets?.version, targets_digest: targets?.digest,
                        stranded: stranded.map { .init(target: $0.release.target, sequence: $0.release.sequence, resigned: $0.resignedInStaging) }))
            } else if !output.quiet {
                Output.line("staged root v\(version), digest \(digest)")
                Output.line(
                    "next: its root key holders (and those of the current root) review it (`signet repo status \(repository)`) and run `signet repo sign \(repository) --role root --key KEY --digest \(digest.prefix(16))`"
                )
                if let targets {
                    Output.line(
                        "next: targets is staged again as v\(targets.version) (digest \(targets.digest)): devices accept targets only when the new key set signs it, so the targets key holders of root v\(version) sign it too: `signet repo sign \(repository) --role targets --key KEY --digest \(targets.digest.prefix(16))`"
                    )
                }
                if !again.isEmpty {
                    let online = again.filter { $0 != "targets" }
                    let keys = online.isEmpty ? "" : " with the \(online.joined(separator: " and ")) keys root v\(version) names (change the cron job's keys)"
                    Output.line(
                        "next: root v\(version) is held until then, so no device sees it early; `signet repo refresh \(repository)`\(keys) publishes it")
                }
            }
        }

        struct RotateReport: Encodable {
            let staged_root: Int64
            let digest: String
            @Null var staged_targets: Int64?
            @Null var targets_digest: String?
            /// The listed releases this root strands until they are re-signed (`repo resign`).
            struct Stranded: Encodable { let target: String; let sequence: UInt64; let resigned: Bool }
            let stranded: [Stranded]
        }
    }
}
