import ArgumentParser
import Signet

struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Sign files, writing raw signatures as openssl dgst -sign does.",
        usage: "signet sign <file> ... --key <key> [--out <sig>] [<options>]",
        discussion: """
            Writes FILE.sig beside each FILE (or the file named by --out, for one input). With the \
            default algorithm the signature is byte-identical to:
              openssl dgst -sha256 -sign KEY -out FILE.sig FILE
            Files are streamed (memory does not grow with their size) and signed in parallel. \
            Either every signature is written or none is.

            Examples:
              signet sign app.tar --key keys/private_key.pem --passphrase-file pass.txt
              signet sign a.bin b.bin --key keys/private_key.p12 --passphrase-env PASS
            """
    )

    @Argument(help: ArgumentHelp("Files to sign.", valueName: "file"))
    var files: [String] = []

    @OptionGroup var key: SigningKeyOptions

    @Option(name: .long, help: ArgumentHelp("Write the signature here instead of FILE.sig (one FILE only).", valueName: "sig"))
    var out: String?

    @Option(name: .long, help: "Signature algorithm.")
    var algorithm: SignatureAlgorithm = .default

    @Flag(name: .long, help: "Replace signature files that already exist (without it, an existing one is refused and nothing is written).")
    var force = false

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if files.isEmpty { throw ValidationError("name at least one FILE to sign") }
        if out != nil && files.count > 1 {
            throw ValidationError("--out names one signature file, so it works with one FILE only; without it each FILE gets FILE.sig")
        }
    }

    struct Entry: Encodable {
        let path: String
        let signature: String
        let algorithm: String
        let key_id: String
    }

    struct Report: Encodable {
        let algorithm: String
        let key_id: String
        let files: [Entry]
    }

    func run() throws {
        Signals.onInterrupt("no signature was written: existing signature files are as they were")
        let privateKey = try key.load()
        // Refused once the key is known to be usable, before any file is read.
        if !force {
            for target in files.map({ out ?? $0 + ".sig" }) { try OutputFiles.refuseExisting(target, what: "the signature file", inputs: files + key.files) }
        }
        let signer = Signer(key: privateKey, algorithm: algorithm)
        let signatures = try ProgressLine.showing("signing", output: output) { try signer.sign(filesAt: files, progress: $0) }
        let targets = files.map { out ?? $0 + ".sig" }
        // The key, its passphrase file and the signed files are never replaced by a signature.
        try SignatureFiles.write(signatures, to: targets, protecting: files + key.files, replace: force)
        let entries = zip(files, targets).map { file, target in
            Entry(path: file, signature: target, algorithm: algorithm.id, key_id: privateKey.keyID.hex)
        }
        if output.json {
            Output.json(Report(algorithm: algorithm.id, key_id: privateKey.keyID.hex, files: entries))
            return
        }
        for entry in entries {
            Output.line("signed \(entry.path) -> \(entry.signature) (\(algorithm.id), key \(privateKey.keyID.short))")
        }
    }
}
