import ArgumentParser
import Foundation
import Signet

extension Repo {
    /// `signet repo resign`: a listed release signed again with a targets key the root names,
    /// staged in place of its old listing (FORMAT.md §7, "Rotating the targets keys").
    struct Resign: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resign",
            abstract: "Re-sign a listed release with a current targets key (same sequence, every file untouched) and stage it.",
            usage: """
                signet repo resign <repo> <release> --key <key> [<options>]
                """,
            discussion: """
                After `signet repo rotate --role targets --remove OLD` a release packed with OLD \
                would be refused by devices that lack it. Once the new root's key holders have \
                signed it, re-sign each release the rotation names (`repo rotate`, `repo status`: \
                STRANDS, NEEDS ATTENTION (targets, stranded)): the package in targets/ is verified, \
                signed again with --key (a targets key of that root) as `signet resign` does, staged \
                in staging/targets/, and the next targets version lists it under the same name, \
                sequence, channels and rollout plan. Devices that hold the release install the \
                re-signed one at their next update without fetching a file (same sequence: no \
                rollout bucket moves), and their tree then passes reverify with the new keys. The \
                targets key holders review and sign it as any targets version; --key signs it too. \
                An encrypted release needs --decryption-key, the key of one of its recipients: the \
                package inside is re-signed and sealed again under the same key and envelope.

                Example:
                  signet repo resign site app-1.4.2.zip --key new-targets.pem
                """
        )

        @Argument(help: ArgumentHelp("The repository folder.", valueName: "repo"))
        var repository: String
        @Argument(help: ArgumentHelp("The release: its target file name, or its package name (the newest listed).", valueName: "release"))
        var release: String
        @Option(
            name: .customLong("key"),
            help: ArgumentHelp("The targets key to sign the package with (file or pkcs11: URI); the staged targets is signed with it too.", valueName: "key"))
        var signingKey: String
        @Option(name: .long, help: "Signature algorithm (one that signs SHA-256 digests).")
        var algorithm: SignatureAlgorithm = .rsaPKCS1v15SHA256
        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup(title: "Encrypted packages") var decryption: DecryptionOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let target: String
            let name: String
            let version: String
            let sequence: UInt64
            let manifest_sha256: String
            let digest: String
        }

        func run() throws {
            let repo = try TUFRepository(at: repository)
            let key = try token.load(signingKey, passphrase: passphrase)
            let resigned = try repo.resign(release, signer: Signer(key: key, algorithm: algorithm), decryptionKey: try decryption.load())
            let digest = try Repo.signStagedTargets(repo, key: key, output: output, what: "with \(resigned.target) re-signed")
            if output.json {
                Output.json(
                    Report(
                        target: resigned.target, name: resigned.name, version: resigned.version, sequence: resigned.sequence,
                        manifest_sha256: resigned.manifestSHA256, digest: digest))
            } else if !output.quiet {
                Output.line(
                    "staged \(resigned.target) re-signed by key \(key.keyID.short): \(resigned.name) \(resigned.version) (sequence \(resigned.sequence)), manifest sha256 \(resigned.manifestSHA256)"
                )
                Repo.sayNextSigners(repository, digest: digest)
            }
        }
    }
}
