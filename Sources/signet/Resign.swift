import ArgumentParser
import Foundation
import Signet

/// `signet resign`: a package signed again with another key, its resources untouched
/// (FORMAT.md §2, "Re-signing").
struct Resign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resign",
        abstract: "Sign a package again with another key: new manifest and signatures, every resource byte for byte as it was.",
        usage: """
            signet resign <pkg.zip> --pubkey <pub> --key <key> --out <pkg.zip>
                          [<options>]
            """,
        discussion: """
            For a key rotation: a release packed with a key that is being retired stays installable \
            without packing it again. The package is verified whole first with --pubkey (the key that signed it: a re-signature never vouches for bytes no one \
            checked), then written to --out with the same name, version, sequence and files — so a \
            device's place in a rollout does not move and an installed tree keeps every file — \
            signed by --key: a new manifest (its key id and algorithm), manifest signature, \
            per-file signatures and the signature over them, and --key's certificate when it has \
            one. Each resource's entry is copied as it is. The new package is verified with the \
            new key before it is written. In a TUF repository, `signet repo resign` does this for \
            a listed release and stages it.

            Example:
              signet resign app-1.4.2.zip --pubkey old/public_key.der \\
                --key new/private_key.pem --passphrase-env SIGNET_PASSPHRASE \\
                --out app-1.4.2-resigned.zip
            """
    )

    @Argument(help: ArgumentHelp("The package to sign again.", valueName: "pkg.zip"))
    var package: String
    @OptionGroup var key: SigningKeyOptions
    @Option(
        name: .long,
        help: ArgumentHelp("The key the package is signed with now (a public key or certificate): it is verified with it first; repeatable.", valueName: "pub"))
    var pubkey: [String] = []
    @Option(name: .long, help: ArgumentHelp("Where to write the re-signed package.", valueName: "pkg.zip"))
    var out: String
    @Option(name: .long, help: "Signature algorithm (one that signs SHA-256 digests).")
    var algorithm: SignatureAlgorithm = .rsaPKCS1v15SHA256
    @Flag(name: .long, help: "Replace --out if it exists.")
    var force = false
    @OptionGroup var output: OutputOptions

    struct Report: Encodable {
        let package: String
        let name: String
        let version: String
        let sequence: UInt64
        let files: Int
        let key_id: String
        let manifest_sha256: String
    }

    func run() throws {
        guard !pubkey.isEmpty else {
            throw ValidationError("give --pubkey, the key the package is signed with now: it is verified with it before it is signed again")
        }
        try TrustedInput.check(pubkey, what: "--pubkey")
        let policy = try TrustPolicy(publicKeyFiles: pubkey)
        let privateKey = try key.load()
        let manifest = try PackageResigner.resign(
            package, to: out, signer: Signer(key: privateKey, algorithm: algorithm), policy: policy,
            replace: force)
        let digest = try Digest.compute(Array(try manifest.encoded()), algorithm: .sha256).hex
        if output.json {
            Output.json(
                Report(
                    package: out, name: manifest.name, version: manifest.version, sequence: manifest.sequence, files: manifest.files.count,
                    key_id: manifest.keyID.hex, manifest_sha256: digest))
        } else if !output.quiet {
            Output.line(
                "re-signed \(package) -> \(out): \(manifest.name) \(manifest.version) (sequence \(manifest.sequence)), \(manifest.files.count) files untouched, key \(manifest.keyID.short)"
            )
        }
    }
}
