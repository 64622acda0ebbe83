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
            abstract:
                "Print a key's id, its sha256// pin and its size; --pubout writes the public key for --pubkey, --ima-cert the certificate for the kernel's IMA keyring.",
            usage: "signet key show <key> [--pubout <file>] [--ima-cert <file>] [<options>]",
            discussion: """
                KEY is a private key file (PEM, DER PKCS#8, PKCS#12), a public key or certificate
                file, or a key on a token as a PKCS#11 URI. For a token, the private key never
                leaves it: only the modulus and exponent are read (after logging in with the PIN).
                A URI that names a token but no key (no object= or id=) lists the token's private
                keys, each with the URI that names it for --key.

                --ima-cert writes a self-signed X.509 certificate of a private key file (DER) for
                the kernel's IMA keyring: its subject key identifier ends in the key id of the
                IMA signatures unpack --ima security writes, which is how the kernel finds the
                key. Load it on the device into the _ima keyring with keyctl padd, as README's
                "Let the kernel check every read" shows (a systemd unit links @u into @s first).

                Examples:
                  signet key show keys/private_key.pem
                  signet key show 'pkcs11:token=release' --passphrase-file pin.txt
                  signet key show 'pkcs11:token=release;object=signing-2026' \\
                      --pkcs11-module /usr/lib/softhsm/libsofthsm2.so \\
                      --passphrase-file pin.txt --pubout release.der
                  signet key show keys/private_key.pem --ima-cert ima-signet.der
                """
        )

        @Argument(help: ArgumentHelp("The key: a file or a pkcs11: URI.", valueName: "key"))
        var key: String

        @Option(
            name: .long, help: ArgumentHelp("Write the public key here as DER SubjectPublicKeyInfo (what --pubkey and --trust-dir read).", valueName: "file"))
        var pubout: String?

        @Option(
            name: .customLong("ima-cert"),
            help: ArgumentHelp(
                "Write a self-signed X.509 certificate of the key (a private key file) here, DER, for the kernel's IMA keyring (_ima): its key id is the one in unpack --ima's signatures.",
                valueName: "file"))
        var imaCert: String?

        @Flag(name: .long, help: "Replace --pubout or --ima-cert if it exists.")
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
            /// The key id (8 hex digits) of the IMA signatures made with the key.
            let ima_keyid: String
            /// The certificate --ima-cert wrote; null without --ima-cert.
            @Null var ima_cert: String?
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
                Output.json(
                    TokenReport(
                        token: description,
                        keys: keys.map {
                            .init(
                                uri: $0.uri, label: $0.label, id: $0.id.map { String(format: "%02x", $0) }.joined(), type: $0.type,
                                bits: $0.bits, key_id: $0.keyID?.hex, pin: $0.keyID?.pin)
                        }))
                return
            }
            Output.line(
                "\(description): \(keys.count) private key\(keys.count == 1 ? "" : "s")\(keys.isEmpty ? " (create one with pkcs11-tool --keypairgen or softhsm2-util --import)" : "")"
            )
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
            var privateKey: PrivateKey? = nil
            if !PrivateKey.isTokenURI(key), let loaded = try? PublicKey(contentsOf: key, allowWeakKey: true) {
                (publicKey, format) = (loaded, loaded.format.description)
            } else {
                // A private key file or a key on a token: the same loading as sign and pack.
                let loaded = try token.load(key, passphrase: passphrase, allowWeakKey: true)
                (publicKey, format, privateKey) = (loaded.publicKey, loaded.format.description, loaded)
            }
            let imaKeyID = try IMASignature.keyID(of: publicKey).map { String(format: "%02x", $0) }.joined()
            var certificate: [UInt8]? = nil
            if imaCert != nil {
                guard let privateKey else {
                    throw SignetError(
                        .wrongKeyKind,
                        "--ima-cert: '\(key)' is a public key or certificate; the certificate is signed with the private key (private_key.pem or .p12); keygen's certificate.der already is one",
                        path: key)
                }
                certificate = try privateKey.imaCertificate(commonName: "Signet IMA key \(imaKeyID)")
            }
            let protected = SigningKeyOptions.files(key: key, passphrase: passphrase)
            if let pubout {
                try publicKey.writeDER(to: pubout, replace: force, protecting: protected + [imaCert].compactMap { $0 })
            }
            if let imaCert, let certificate {
                try FileIdentity.refuseOverwriting(
                    targets: [imaCert], inputs: (protected + [pubout].compactMap { $0 }).map { ($0, "input") }, what: "--ima-cert")
                if !force { try AtomicFile.refuseExisting(imaCert, what: "the certificate file") }
                try AtomicFile.write(certificate, to: imaCert, mode: 0o644, replace: force)
            }
            if output.json {
                Output.json(
                    Report(
                        key_id: publicKey.keyID.hex, tuf_keyid: try publicKey.tufKeyID(), pin: publicKey.keyID.pin, bits: publicKey.bits,
                        format: format, source: publicKey.source, pubout: pubout, ima_keyid: imaKeyID, ima_cert: imaCert))
            } else {
                Output.line("key id  \(publicKey.keyID.hex)")
                // The same key as TUF metadata names it (`signet repo status` shows both).
                Output.line("TUF id  \(try publicKey.tufKeyID())")
                Output.line("pin     \(publicKey.keyID.pin)")
                Output.line("size    \(publicKey.bits)-bit RSA")
                Output.line("format  \(format)")
                Output.line("source  \(publicKey.source)")
                Output.line("IMA id  \(imaKeyID) (the key id of its IMA signatures)")
                if let pubout { Output.line("wrote   \(pubout) (DER SubjectPublicKeyInfo)") }
                if let imaCert { Output.line("wrote   \(imaCert) (DER X.509, for the kernel's IMA keyring: README, \"Let the kernel check every read\")") }
            }
        }
    }
}
