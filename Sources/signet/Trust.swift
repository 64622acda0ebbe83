import ArgumentParser
import Signet

struct Trust: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trust",
        abstract: "Manage trust directories.",
        subcommands: [Seal.self]
    )

    struct Seal: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "seal",
            abstract: "Seal a trust directory: record the digest of every file in DIR/.signet-trust.",
            usage: "signet trust seal <dir> [--salt-file <file> | --key <key>] [<options>]",
            discussion: """
                Clients given --trust-dir DIR refuse it (exit 3) once its files no longer match the \
                seal, so a key file replaced on a compromised device is caught. With --salt-file the \
                digests are salted with a secret kept elsewhere (clients then need --trust-salt-file); \
                with --key the seal is also signed, and clients given --trust-seal-key with the matching \
                public key (kept outside the directory) accept only a seal it signed.

                Example:
                  signet trust seal /etc/myapp/trust --salt-file /root/trust.salt
                """
        )

        @Argument(help: ArgumentHelp("The trust directory.", valueName: "dir"))
        var directory: String

        @Option(name: .customLong("salt-file"), help: ArgumentHelp("Salt the digests with this file's bytes (a final newline aside).", valueName: "file"))
        var saltFile: String?

        @Option(name: .long, help: ArgumentHelp("Also sign the seal with this private key (a file or a pkcs11: URI).", valueName: "key"))
        var key: String?

        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let directory: String
            let files: Int
            let salted: Bool
            let signed: Bool
        }

        func run() throws {
            let salt = try saltFile.map { try TrustStoreSeal.readSalt(from: $0) }
            let signer = try key.map { path -> Signer in
                Signer(key: try token.load(path, passphrase: passphrase))
            }
            let count = try TrustStoreSeal.seal(directory, salt: salt, signer: signer)
            if output.json {
                Output.json(Report(directory: directory, files: count, salted: salt != nil, signed: signer != nil))
            } else {
                Output.line("sealed \(count) file\(count == 1 ? "" : "s") in \(directory)\(salt != nil ? " (salted)" : "")\(signer != nil ? ", signed" : "")")
            }
        }
    }
}
