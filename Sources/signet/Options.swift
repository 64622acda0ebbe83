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

    /// The files these options read (the key, the passphrase file): an output must never be one.
    var files: [String] { [key] + (passphrase.passphraseFile.map { [$0] } ?? []) }

    /// Loads the key, printing its warnings (key file readable by others, legacy PKCS#12) on stderr.
    func load() throws -> PrivateKey {
        let privateKey = try PrivateKey(contentsOf: key, passphrase: passphrase.source, allowWeakKey: allowWeakKey)
        privateKey.warnings.forEach(Output.warn)
        return privateKey
    }
}

/// Who is trusted: keys, trust directories and certificate authorities, with pins, revocations
/// and channels on top. Shared by every command that verifies.
struct TrustOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "A trusted public key or certificate (DER or PEM). Repeat it to trust several keys; any one may have signed.",
        valueName: "pub"))
    var pubkey: [String] = []

    @Option(name: .customLong("trust-dir"), help: ArgumentHelp(
        "Trust every key and certificate in DIR; a subdirectory's name is a channel (trust/release/, trust/beta/). A sealed DIR must match its seal.",
        valueName: "dir"))
    var trustDirectory: [String] = []

    @Option(name: .long, help: ArgumentHelp("Accept only pinned keys: a hex key id or sha256//BASE64; repeatable.", valueName: "id"))
    var pin: [String] = []

    @Option(name: .long, help: ArgumentHelp("A file of revoked key ids, one a line (# comments).", valueName: "file"))
    var revoked: String?

    @Option(name: .long, help: ArgumentHelp("Require the signer's key to come from this channel of a --trust-dir.", valueName: "name"))
    var channel: String?

    @Option(name: .long, help: ArgumentHelp(
        "A root certificate: the package's signer certificate must chain to one of these (with its intermediates); repeatable.",
        valueName: "root.der"))
    var ca: [String] = []

    @Flag(name: .customLong("allow-expired-cert"), help: "Accept certificate chains that have expired (device keys outlive certificates).")
    var allowExpiredCertificate = false

    @Option(name: .customLong("expect-subject"), help: ArgumentHelp("Require the signer certificate's subject to contain these RDNs, e.g. \"CN=Release signer\".", valueName: "dn"))
    var expectSubject: String?

    @Option(name: .customLong("trust-salt-file"), help: ArgumentHelp("The salt a --trust-dir was sealed with.", valueName: "file"))
    var trustSaltFile: String?

    @Option(name: .customLong("trust-seal-key"), help: ArgumentHelp("Require each --trust-dir to be sealed, with the seal signed by this key (kept outside the directory).", valueName: "pub"))
    var trustSealKey: [String] = []

    @Option(name: .customLong("clock-skew"), help: ArgumentHelp("Seconds of clock difference tolerated for expiry.", valueName: "seconds"))
    var clockSkew: Int64 = 300

    @Flag(name: .customLong("allow-weak-key"), help: "Accept trusted RSA keys below 2048 bits (not recommended).")
    var allowWeakKey = false

    func validate() throws {
        for id in pin where KeyID(id) == nil {
            throw ValidationError("--pin takes a key id (64 hex characters) or sha256//BASE64, not '\(id)'")
        }
        if clockSkew < 0 { throw ValidationError("--clock-skew cannot be negative") }
        if (!trustSealKey.isEmpty || trustSaltFile != nil) && trustDirectory.isEmpty {
            throw ValidationError("--trust-seal-key and --trust-salt-file apply to a --trust-dir")
        }
        if (allowExpiredCertificate || expectSubject != nil) && ca.isEmpty {
            throw ValidationError("--allow-expired-cert and --expect-subject apply to certificate chains: give --ca ROOT")
        }
    }

    /// True when some source of trust was given.
    var hasSources: Bool { !pubkey.isEmpty || !trustDirectory.isEmpty || !ca.isEmpty }

    static let missingSources = "give a trust source: --pubkey PUB, --trust-dir DIR or --ca ROOT (e.g. --pubkey keys-example/public_key.der)"

    func policy() throws -> TrustPolicy {
        var policy = try TrustPolicy(publicKeyFiles: pubkey, allowWeakKeys: allowWeakKey)
        let salt = try trustSaltFile.map { try PassphraseSource.file($0, what: "salt file").passphrase(for: $0).bytesForSalt }
        let sealKeys = try trustSealKey.map { try PublicKey(contentsOf: $0, allowWeakKey: allowWeakKey) }
        for directory in trustDirectory {
            try policy.addTrustDirectory(directory, allowWeakKeys: allowWeakKey, salt: salt, sealKeys: sealKeys)
        }
        policy.pins = Set(pin.compactMap { KeyID($0) })
        if let revoked { try policy.addRevocations(from: revoked) }
        policy.requiredChannel = channel
        policy.certificateAuthorities = try ca.map { path in
            let root = try PublicKey(contentsOf: path, allowWeakKey: true)
            guard let der = root.certificateDER else {
                throw SignetError(.wrongKeyKind, "--ca '\(path)' is a public key, not a certificate; give the root CA certificate", path: path)
            }
            return der
        }
        policy.allowExpiredCertificates = allowExpiredCertificate
        policy.expectedSubject = expectSubject
        policy.clockSkew = clockSkew
        return policy
    }
}

/// The limits an untrusted package is held to. unpack and inspect refuse a package beyond them
/// before reading it; pack refuses to make one, so that what pack makes, unpack installs.
struct LimitOptions: ParsableArguments {
    @Option(name: .customLong("max-files"), help: "Most files (and directory entries) a package may hold.")
    var maxFiles = PackageLimits().maxFiles

    @Option(name: .customLong("max-total-size"), help: ArgumentHelp("Most bytes all files may add up to.", valueName: "bytes"))
    var maxTotalSize: UInt64 = PackageLimits().maxTotalSize

    @Option(name: .customLong("max-ratio"), help: "Largest expansion ratio of one compressed entry (deflate bombs).")
    var maxRatio: UInt64 = PackageLimits().maxRatio

    func validate() throws {
        if maxFiles < 1 { throw ValidationError("--max-files must be at least 1, not \(maxFiles)") }
        if maxRatio < 1 { throw ValidationError("--max-ratio must be at least 1, not \(maxRatio)") }
        if maxTotalSize < 1 { throw ValidationError("--max-total-size must be at least 1, not \(maxTotalSize)") }
    }

    var limits: PackageLimits {
        var limits = PackageLimits()
        limits.maxFiles = maxFiles
        limits.maxTotalSize = maxTotalSize
        limits.maxRatio = maxRatio
        return limits
    }
}
