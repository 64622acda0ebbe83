import ArgumentParser
import Signet

/// --decryption-key: the device's key for encrypted packages (FORMAT.md §8).
struct DecryptionOptions: ParsableArguments {
    @Option(
        name: .customLong("decryption-key"),
        help: ArgumentHelp(
            "The device's key for encrypted packages: RSA or EC P-256, PEM, DER PKCS#8 or PKCS#12 (with its certificate, the envelope's part for it is found at once), or an RSA key on a token, pkcs11:token=…;object=… (its module from module-path= in the URI, else $SIGNET_PKCS11_MODULE, else p11-kit's proxy).",
            valueName: "file|uri"))
    var decryptionKey: String?

    @Option(
        name: .customLong("decryption-passphrase-file"),
        help: ArgumentHelp("Read the decryption key's passphrase (a token's user PIN) from the first line of this file.", valueName: "file"))
    var passphraseFile: String?

    /// The files these options read.
    var files: [String] { [decryptionKey.flatMap { PrivateKey.isTokenURI($0) ? nil : $0 }, passphraseFile].compactMap { $0 } }

    /// The key, if one was given: a file, or a key on a token.
    func load() throws -> DecryptionKey? {
        guard let decryptionKey else { return nil }
        if PrivateKey.isTokenURI(decryptionKey) {
            return try DecryptionKey(pkcs11: decryptionKey, pin: passphraseFile.map { .file($0, what: "PIN file") })
        }
        return try DecryptionKey(contentsOf: decryptionKey, passphrase: passphraseFile.map { .file($0) })
    }
}

/// --encrypt-to and --encrypt-to-list: the certificates a package is sealed to.
struct RecipientOptions: ParsableArguments {
    @Option(
        name: .customLong("encrypt-to"),
        help: ArgumentHelp("Seal the package to this device certificate (RSA or EC P-256, PEM or DER); repeat for more.", valueName: "cert"))
    var encryptTo: [String] = []

    @Option(
        name: .customLong("encrypt-to-list"),
        help: ArgumentHelp("Seal it to every certificate in this file (PEM blocks, one after another).", valueName: "file"))
    var encryptToList: [String] = []

    @OptionGroup var envelope: EnvelopeOptions

    var isEncrypting: Bool { !encryptTo.isEmpty || !encryptToList.isEmpty }
    var files: [String] { encryptTo + encryptToList }
    var cipher: CMSEnvelope.Cipher { envelope.cipher }
    var padding: CMSEnvelope.RSAPadding { envelope.padding }

    /// Every certificate given, in order (read before anything is packed).
    func load() throws -> [RecipientCertificate] { try Self.load(encryptTo, lists: encryptToList) }

    static func load(_ files: [String], lists: [String]) throws -> [RecipientCertificate] {
        var all = try files.map { try RecipientCertificate(contentsOf: $0) }
        for list in lists {
            all += try RecipientCertificate.all(bytes: try readSmallFile(list, what: "certificate list", limit: CMSEnvelope.maximumSize), name: list)
        }
        return all
    }
}

/// How the envelope is made: its content cipher, and how RSA devices receive the key.
struct EnvelopeOptions: ParsableArguments {
    @Option(name: .customLong("envelope-cipher"), help: "aes-256-gcm (default) or aes-256-cbc, for peers without GCM.")
    var envelopeCipher: String = "aes-256-gcm"

    @Flag(name: .customLong("rsa-pkcs1"), help: "Give RSA devices the key with PKCS#1 v1.5 (old tokens), not RSA-OAEP.")
    var rsaPKCS1 = false

    func validate() throws {
        guard CMSEnvelope.Cipher(rawValue: envelopeCipher) != nil else {
            throw ValidationError("--envelope-cipher takes aes-256-gcm or aes-256-cbc, not \(envelopeCipher)")
        }
    }

    var cipher: CMSEnvelope.Cipher { CMSEnvelope.Cipher(rawValue: envelopeCipher) ?? .aes256GCM }
    var padding: CMSEnvelope.RSAPadding { rsaPKCS1 ? .pkcs1 : .oaep }
}
