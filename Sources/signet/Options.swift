import ArgumentParser
import Signet
#if canImport(Glibc)
import Glibc
#endif

extension SignatureAlgorithm: ExpressibleByArgument {
    public init?(argument: String) {
        self.init(id: argument)
    }

    public static var allValueStrings: [String] { SignatureAlgorithm.all.map(\.id) }
    public var defaultValueDescription: String { id }
}

/// --json.
struct OutputOptions: ParsableArguments {
    @Flag(name: .long, help: "Print one JSON document on stdout instead of text (errors included).")
    var json = false
}

/// Where a passphrase comes from. Never from argv.
struct PassphraseOptions: ParsableArguments {
    @Option(name: .customLong("passphrase-file"), help: ArgumentHelp(
        "Read the passphrase from the first line of this file.", valueName: "file"))
    var passphraseFile: String?

    @Option(name: .customLong("passphrase-env"), help: ArgumentHelp(
        "Read the passphrase from this environment variable (give its name, not its value).", valueName: "var"))
    var passphraseEnvironment: String?

    func validate() throws {
        if passphraseFile != nil && passphraseEnvironment != nil {
            throw ValidationError("give either --passphrase-file or --passphrase-env, not both")
        }
        if let name = passphraseEnvironment, name.isEmpty || name.contains("=") {
            throw ValidationError("--passphrase-env takes the NAME of an environment variable, e.g. --passphrase-env SIGNET_PASSPHRASE")
        }
    }

    /// The explicit source, or a no-echo prompt when stdin is a terminal, or nil.
    var source: PassphraseSource? {
        if let passphraseFile { return .file(passphraseFile) }
        if let passphraseEnvironment { return .environment(passphraseEnvironment) }
        guard Terminal.isInteractive else { return nil }
        return PassphraseSource(description: "the prompt") { keyPath in
            try Terminal.readSecret(prompt: "Passphrase for \(keyPath): ")
        }
    }
}

/// --key and how to unlock it.
struct SigningKeyOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The private key: PEM (PKCS#1/PKCS#8, encrypted or not), DER PKCS#8 or PKCS#12.", valueName: "key"))
    var key: String

    @OptionGroup var passphrase: PassphraseOptions

    @Flag(name: .customLong("allow-weak-key"), help: "Sign even with an RSA key below 2048 bits (not recommended).")
    var allowWeakKey = false

    /// Loads the key, printing its warnings (key file readable by others, legacy PKCS#12) on stderr.
    func load() throws -> PrivateKey {
        let privateKey = try PrivateKey(contentsOf: key, passphrase: passphrase.source, allowWeakKey: allowWeakKey)
        privateKey.warnings.forEach(Output.warn)
        return privateKey
    }
}

/// --pubkey, repeatable.
struct TrustOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "A trusted public key or certificate (DER or PEM). Repeat it to trust several keys; any one may have signed.",
        valueName: "pub"))
    var pubkey: [String] = []

    @Flag(name: .customLong("allow-weak-key"), help: "Accept trusted RSA keys below 2048 bits (not recommended).")
    var allowWeakKey = false

    func policy() throws -> TrustPolicy {
        try TrustPolicy(publicKeyFiles: pubkey, allowWeakKeys: allowWeakKey)
    }
}
