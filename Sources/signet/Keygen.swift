import Foundation
import ArgumentParser
import Signet

struct Keygen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Generate an RSA signing key, its certificate, and the files clients need.",
        usage: "signet keygen --out <dir> [--bits <bits>] [--days <days>] [<options>]",
        discussion: """
            Writes into DIR (created if missing, never overwriting anything):
              private_key.pem   PKCS#8 PEM, encrypted with AES-256 when a passphrase
                                is given (mode 0600)
              private_key.p12   PKCS#12 with the key and certificate, for tools that
                                want one (mode 0600)
              public_key.der    DER SubjectPublicKeyInfo: give this to clients (--pubkey)
              certificate.der   self-signed X.509 with the codeSigning extended key usage

            Without --passphrase-file or --passphrase-env you are asked for a passphrase on a terminal;
            elsewhere the private key is written unencrypted (with a warning).

            Example:
              signet keygen --out keys --passphrase-file keys/passphrase.txt
            """
    )

    @Option(name: .long, help: ArgumentHelp("Directory to write the key files into.", valueName: "dir"))
    var out: String

    @Option(name: .long, parsing: .unconditional, help: "RSA modulus size in bits (2048 to 16384).")
    var bits = 3072

    @Option(name: .customLong("common-name"), help: "The certificate's subject common name.")
    var commonName = "Signet signing key"

    @Option(name: .long, parsing: .unconditional, help: "Certificate validity in days.")
    var days = 3650

    @Flag(
        name: .long, help: "Replace key files that already exist in --out (the old private key is lost; without it, they are refused and nothing is written).")
    var force = false

    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        guard (2048...16384).contains(bits) else {
            throw ValidationError("--bits must be between 2048 and 16384 (3072 is a good default), not \(bits)")
        }
        guard days > 0, days <= GeneratedKey.maximumValidityDays else {
            throw ValidationError("--days must be 1 to \(GeneratedKey.maximumValidityDays), not \(days)")
        }
        // X.509 allows a common name of 1 to 64 characters (RFC 5280's ub-common-name).
        guard !commonName.trimmingCharacters(in: .whitespaces).isEmpty, commonName.count <= 64 else {
            throw ValidationError("--common-name must be 1 to 64 characters (e.g. --common-name 'Example release signing'), not '\(commonName)'")
        }
    }

    struct Report: Encodable {
        let key_id: String
        let key_id_short: String
        let pin: String
        let bits: Int
        let encrypted: Bool
        let directory: String
        let files: [String: String]
    }

    func run() throws {
        // Before a passphrase is asked for or a key made.
        if !force { try GeneratedKey.refuseExisting(in: out) }
        let secret = try newPassphrase()
        let generated = try GeneratedKey.generate(bits: bits, commonName: commonName, validityDays: days)
        let written = try generated.write(to: out, passphrase: secret, replace: force)
        let id = generated.privateKey.keyID
        if !written.encrypted {
            Output.warn("the private key files in '\(out)' are not encrypted; use --passphrase-file or --passphrase-env to protect them")
        }
        if output.json {
            var files: [String: String] = [:]
            for (name, path) in zip(GeneratedKey.fileNames, written.paths) { files[name] = path }
            Output.json(
                Report(
                    key_id: id.hex, key_id_short: id.short, pin: id.pin, bits: bits,
                    encrypted: written.encrypted, directory: out, files: files))
            return
        }
        Output.lines([
            "Generated a \(bits)-bit RSA signing key in \(out)/",
            "  private_key.pem   PKCS#8\(written.encrypted ? ", encrypted" : ", NOT encrypted") — keep secret",
            "  private_key.p12   PKCS#12 with the certificate — keep secret",
            "  public_key.der    give this to clients: --pubkey \(out)/public_key.der",
            "  certificate.der   self-signed, codeSigning",
            "key id: \(id.hex)",
            "pin:    \(id.pin)"
        ])
    }

    /// The passphrase to protect the new key with, or nil for none.
    private func newPassphrase() throws -> Passphrase? {
        if passphrase.passphraseFile != nil || passphrase.passphraseEnvironment != nil {
            return try passphrase.source.map { try $0.passphrase(for: out) }
        }
        guard Terminal.isInteractive else { return nil }
        let first = try Terminal.readSecret(prompt: "New passphrase for the private key (empty for none): ")
        if first.isEmpty { return nil }
        let second = try Terminal.readSecret(prompt: "Repeat the passphrase: ")
        guard first.matches(second) else {
            throw SignetError(.usage, "the two passphrases differ; nothing was written")
        }
        return first
    }
}
