import ArgumentParser
import Signet
#if canImport(Glibc)
import Glibc
#endif

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify a raw signature over a file with trusted public keys.",
        discussion: """
        Exit 0 when the signature verifies with one of the --pubkey keys, 1 when it does not. \
        A signature must be exactly the key's modulus length: unlike openssl dgst -verify, \
        trailing bytes make it invalid.

        Example:
          signet verify app.tar --signature app.tar.sig --pubkey keys/public_key.der
        """
    )

    @Argument(help: ArgumentHelp("The signed file.", valueName: "file"))
    var file: String

    @Option(name: .long, help: ArgumentHelp("The signature file (raw bytes, as openssl dgst -sign writes).", valueName: "sig"))
    var signature: String

    @OptionGroup var trust: TrustOptions

    @Option(name: .long, help: "Signature algorithm the file was signed with.")
    var algorithm: SignatureAlgorithm = .default

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
    }

    struct Report: Encodable {
        let verdict: String
        let file: String
        let signature: String
        let algorithm: String
        @Null var key_id: String?
        @Null var key_source: String?
        @Null var channel: String?
        @Null var error: Output.ErrorBody?
    }

    func run() throws {
        let policy = try trust.policy()
        let verifier = Verifier(policy: policy)
        let signatureBytes = try SignatureFiles.read(signature)
        let result = try verifier.verify(signature: signatureBytes, fileAt: file, algorithm: algorithm)
        let failure = result.error(path: file)
        if output.json {
            Output.json(Report(verdict: result.isValid ? "valid" : "invalid", file: file, signature: signature,
                               algorithm: algorithm.id, key_id: result.signer?.keyID.hex,
                               key_source: result.signer?.source, channel: result.signer.flatMap { policy.channel(of: $0.keyID) },
                               error: failure.map(Output.errorBody)))
        }
        if let failure {
            if !output.json { Output.line("FAILED \(file)") }
            Output.error("\(file): \(failure.reason)")
            throw ExitCode(failure.code.exitStatus.rawValue)
        }
        if !output.json, let signer = result.signer {
            Output.line("OK \(file) (\(algorithm.id), key \(signer.keyID.short) from \(signer.source))")
        }
    }
}
