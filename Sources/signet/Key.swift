import ArgumentParser
import Signet

/// `signet key show`: what a key is, from a file or a token, and its public half for devices.
struct Key: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "Show a signing key (a file or a key on a PKCS#11 token) and export its public half.",
        subcommands: [Show.self]
    )

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Print a key's id, its sha256// pin and its size; --pubout writes the public key for --pubkey.",
            usage: "signet key show <key> [--pubout <file>] [<options>]",
            discussion: """
            KEY is a private key file (PEM, DER PKCS#8, PKCS#12), a public key or certificate
            file, or a key on a token as a PKCS#11 URI. For a token, the private key never
            leaves it: only the modulus and exponent are read (after logging in with the PIN).
            A URI that names a token but no key (no object= or id=) lists the token's private
            keys, each with the URI that names it for --key.

            Examples:
              signet key show keys/private_key.pem
              signet key show 'pkcs11:token=release' --passphrase-file pin.txt
              signet key show 'pkcs11:token=release;object=signing-2026' \\
                  --pkcs11-module /usr/lib/softhsm/libsofthsm2.so \\
                  --passphrase-file pin.txt --pubout release.der
            """
        )

        @Argument(help: ArgumentHelp("The key: a file or a pkcs11: URI.", valueName: "key"))
        var key: String

        @Option(name: .long, help: ArgumentHelp("Write the public key here as DER SubjectPublicKeyInfo (what --pubkey and --trust-dir read).", valueName: "file"))
        var pubout: String?

        @Flag(name: .long, help: "Replace --pubout if it exists.")
        var force = false

        @OptionGroup var passphrase: PassphraseOptions
        @OptionGroup var token: TokenOptions
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let key_id: String
            /// The key id TUF metadata gives the same key (`repo status` shows both).
            let tuf_keyid: String
            let pin: String
            let bits: Int
            let format: String
            let source: String
            /// The file --pubout wrote; null without --pubout.
            @Null var pubout: String?
        }

        struct TokenReport: Encodable {
            struct Entry: Encodable {
                let uri: String
                let label: String
                let id: String
                let type: String
                @Null var bits: Int?
                @Null var key_id: String?
                @Null var pin: String?
            }
            let token: String
            let keys: [Entry]
        }

        /// `key show 'pkcs11:token=…'` without object= or id=: the token's keys.
        private func listToken(_ uri: PKCS11URI) throws {
            if pubout != nil {
                throw SignetError(.usage, "--pubout needs one key; \(uri) names a token, not a key: add object= or id= (run without --pubout to list them)")
            }
            let (description, keys) = try PrivateKey.tokenKeys(pkcs11: key, module: token.module, pin: passphrase.source)
            if output.json {
                Output.json(TokenReport(token: description, keys: keys.map {
                    .init(uri: $0.uri, label: $0.label, id: $0.id.map { String(format: "%02x", $0) }.joined(), type: $0.type,
                          bits: $0.bits, key_id: $0.keyID?.hex, pin: $0.keyID?.pin)
                }))
                return
            }
            Output.line("\(description): \(keys.count) private key\(keys.count == 1 ? "" : "s")\(keys.isEmpty ? " (create one with pkcs11-tool --keypairgen or softhsm2-util --import)" : "")")
            for entry in keys {
                let size = entry.bits.map { "\($0)-bit \(entry.type)" } ?? entry.type
                Output.line("  \(entry.uri)")
                Output.line("      \(size)\(entry.keyID.map { ", key id \($0.hex)" } ?? "")")
            }
        }

        func run() throws {
            if PrivateKey.isTokenURI(key), let uri = try? PKCS11URI(key, requiringKey: false), uri.object == nil, uri.id == nil {
                try listToken(uri)
                return
            }
            let publicKey: PublicKey
            let format: String
            if !PrivateKey.isTokenURI(key), let loaded = try? PublicKey(contentsOf: key, allowWeakKey: true) {
                (publicKey, format) = (loaded, loaded.format.description)
            } else {
                // A private key file or a key on a token: the same loading as sign and pack.
                let privateKey = try token.load(key, passphrase: passphrase, allowWeakKey: true)
                (publicKey, format) = (privateKey.publicKey, privateKey.format.description)
            }
            if let pubout {
                try publicKey.writeDER(to: pubout, replace: force, protecting: SigningKeyOptions.files(key: key, passphrase: passphrase))
            }
            if output.json {
                Output.json(Report(key_id: publicKey.keyID.hex, tuf_keyid: try publicKey.tufKeyID(), pin: publicKey.keyID.pin, bits: publicKey.bits,
                                   format: format, source: publicKey.source, pubout: pubout))
            } else {
                Output.line("key id  \(publicKey.keyID.hex)")
                // The same key as TUF metadata names it (`signet repo status` shows both).
                Output.line("TUF id  \(try publicKey.tufKeyID())")
                Output.line("pin     \(publicKey.keyID.pin)")
                Output.line("size    \(publicKey.bits)-bit RSA")
                Output.line("format  \(format)")
                Output.line("source  \(publicKey.source)")
                if let pubout { Output.line("wrote   \(pubout) (DER SubjectPublicKeyInfo)") }
            }
        }
    }
}
