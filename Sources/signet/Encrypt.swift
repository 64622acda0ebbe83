import ArgumentParser
import Foundation
import Signet

/// `signet encrypt`: a signed package sealed to device certificates, or an encrypted one
/// sealed again to other devices (FORMAT.md §8).
struct Encrypt: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "encrypt",
        abstract: "Seal a signed package to device certificates, or re-seal an encrypted one to others.",
        usage: """
            signet encrypt <pkg.zip> --to <cert> ... --out <pkg.zip> [<options>]
            signet encrypt <encrypted.zip> --decryption-key <key> --to <cert> ...
                           --out <pkg.zip>
            """,
        discussion: """
            A signed package is encrypted whole under a random package key (c2sp.org/chunked-\
            encryption: 16 KiB records, each authenticated, any of them readable alone), and that \
            key is sealed in a CMS envelope to each --to certificate: RSA-OAEP for RSA devices \
            (--rsa-pkcs1 for old tokens), ECDH for P-256 ones. Names, sizes and the manifest are \
            not readable without a device key; signet inspect says to how many devices it is sealed.

            Given an encrypted package and the key of one of its devices (--decryption-key), \
            encrypt re-seals it: a new envelope for the same package key, the payload copied byte \
            for byte, so packages for different batches of devices share every other byte.

            Examples:
              signet encrypt app-1.4.2.zip --to-list fleet-certs.pem \\
                --out app-1.4.2.enc.zip
              signet encrypt app-1.4.2.enc.zip --decryption-key publisher.p12 \\
                --to-list batch-7.pem --out app-1.4.2.batch-7.zip
            """
    )

    @Argument(help: ArgumentHelp("The package to encrypt (or to re-seal).", valueName: "pkg.zip"))
    var package: String

    @Option(name: .customLong("to"), help: ArgumentHelp("A device certificate (RSA or EC P-256, PEM or DER); repeat for more.", valueName: "cert"))
    var to: [String] = []

    @Option(name: .customLong("to-list"), help: ArgumentHelp("Every certificate in this file (PEM blocks).", valueName: "file"))
    var toList: [String] = []

    @Option(name: .long, help: ArgumentHelp("Where to write the encrypted package.", valueName: "pkg.zip"))
    var out: String

    @OptionGroup(title: "Re-sealing") var decryption: DecryptionOptions

    @OptionGroup var envelope: EnvelopeOptions

    @Flag(name: .long, help: "Replace --out if it exists.")
    var force = false

    func validate() throws {
        guard !to.isEmpty || !toList.isEmpty else { throw ValidationError("give --to CERT (repeatable) or --to-list FILE: the devices to seal the package to") }
    }

    func run() throws {
        let recipients = try RecipientOptions.load(to, lists: toList)
        let (cipher, padding) = (envelope.cipher, envelope.padding)
        if EncryptedPackage.isEncrypted(package) {
            guard let key = try decryption.load() else {
                throw ValidationError("'\(package)' is encrypted already: give --decryption-key, the key of one of its devices, to re-seal it to others")
            }
            try EncryptedPackage.reseal(package, with: key, to: recipients, output: out, cipher: cipher, rsaPadding: padding, replace: force)
            Output.line("re-sealed \(package) -> \(out): \(recipients.count) device\(recipients.count == 1 ? "" : "s"), the payload byte for byte")
        } else {
            try EncryptedPackage.seal(package, to: recipients, output: out, cipher: cipher, rsaPadding: padding, replace: force)
            Output.line("encrypted \(package) -> \(out): sealed to \(recipients.count) device\(recipients.count == 1 ? "" : "s")")
        }
    }
}
