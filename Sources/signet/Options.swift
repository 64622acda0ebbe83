import ArgumentParser
import Foundation
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

    @Flag(
        name: [.customShort("q"), .long],
        help: "Print nothing on success: no progress line and no result (a failure still prints what failed; errors and warnings always).")
    var quiet = false
}

/// Where a passphrase comes from. Never from argv.
struct PassphraseOptions: ParsableArguments {
    @Option(
        name: .customLong("passphrase-file"),
        help: ArgumentHelp(
            "Read the passphrase from the first line of this file.", valueName: "file"))
    var passphraseFile: String?

    @Option(
        name: .customLong("passphrase-env"),
        help: ArgumentHelp(
            "Read the passphrase from this environment variable (give its name, not its value).", valueName: "var"))
    var passphraseEnvironment: String?

    func validate() throws {
        if passphraseFile != nil && passphraseEnvironment != nil {
            throw ValidationError("give either --passphrase-file or --passphrase-env, not both")
        }
        if let name = passphraseEnvironment, !PassphraseSource.isVariableName(name) {
            // Never repeat the value: it may be the passphrase, given where its variable's name belongs.
            throw ValidationError(
                "--passphrase-env takes the NAME of an environment variable (letters, digits and _, e.g. --passphrase-env SIGNET_PASSPHRASE); the value given is not a valid variable name, and is not repeated here in case it is the secret itself"
            )
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
    @Option(
        name: .long,
        help: ArgumentHelp(
            "The private key: PEM (PKCS#1/PKCS#8, encrypted or not), DER PKCS#8, PKCS#12, or a key on a token as a PKCS#11 URI ('pkcs11:token=release;object=signing-2026'; the PIN from --passphrase-file/--passphrase-env, the prompt, or pin-source=file:… in the URI).",
            valueName: "key"))
    var key: String

    @OptionGroup var passphrase: PassphraseOptions
    @OptionGroup var token: TokenOptions

    @Flag(name: .customLong("allow-weak-key"), help: "Sign even with an RSA key below 2048 bits (not recommended).")
    var allowWeakKey = false

    /// The files these options read (the key, the passphrase file): an output must never be one.
    var files: [String] { Self.files(key: key, passphrase: passphrase) }

    /// The files a key (unless it is on a token) and its passphrase options read.
    static func files(key: String, passphrase: PassphraseOptions) -> [String] {
        (PrivateKey.isTokenURI(key) ? [] : [key]) + (passphrase.passphraseFile.map { [$0] } ?? [])
    }

    /// Loads the key, printing its warnings (key file readable by others, legacy PKCS#12) on stderr.
    func load() throws -> PrivateKey {
        try token.load(key, passphrase: passphrase, allowWeakKey: allowWeakKey)
    }
}

/// --pkcs11-module: which PKCS#11 module reaches the token a `pkcs11:` key is on.
struct TokenOptions: ParsableArguments {
    @Option(
        name: .customLong("pkcs11-module"),
        help: ArgumentHelp(
            "The PKCS#11 module for a pkcs11: key (default: module-path= in the URI, else $SIGNET_PKCS11_MODULE, else p11-kit's proxy).",
            valueName: "path"))
    var module: String?

    /// A key from a file, or from a token when `key` is a `pkcs11:` URI; its warnings (a key
    /// file others can read) are printed.
    func load(_ key: String, passphrase: PassphraseOptions, allowWeakKey: Bool = false) throws -> PrivateKey {
        let loaded: PrivateKey
        if PrivateKey.isTokenURI(key) {
            loaded = try PrivateKey(pkcs11: key, module: module, pin: passphrase.source, allowWeakKey: allowWeakKey)
        } else {
            if module != nil {
                throw ValidationError("--pkcs11-module is for keys on a token; '\(key)' is a key file (a token key is a pkcs11: URI)")
            }
            loaded = try PrivateKey(contentsOf: key, passphrase: passphrase.source, allowWeakKey: allowWeakKey)
        }
        for warning in loaded.warnings where Self.warned.insert(warning).inserted { Output.warn(warning) }
        return loaded
    }

    /// Key warnings already printed by this process: a key given twice (the same file as the
    /// snapshot and the timestamp key) is warned about once.
    nonisolated(unsafe) private static var warned = Set<String>()
}

/// Who is trusted: keys, trust directories and certificate authorities, with pins, revocations
/// and channels on top. Shared by every command that verifies.
struct TrustOptions: ParsableArguments {
    @Option(
        name: .long,
        help: ArgumentHelp(
            "A trusted public key or certificate (DER or PEM). Repeat it to trust several keys; any one may have signed.",
            valueName: "pub"))
    var pubkey: [String] = []

    @Option(
        name: .customLong("trust-dir"),
        help: ArgumentHelp(
            "Trust every key and certificate in DIR; a subdirectory's name is a channel (trust/release/, trust/beta/). A sealed DIR must match its seal.",
            valueName: "dir"))
    var trustDirectory: [String] = []

    @Option(
        name: .customLong("tuf-metadata"),
        help: ArgumentHelp(
            "A TUF repository's trusted metadata folder (signet tuf init, update --repository): trust the package keys of its targets role and the roles it delegates to.",
            valueName: "dir"))
    var tufMetadata: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Accept only pinned keys: a key id (64 hex characters), sha256//BASE64, or a public key or certificate file; repeatable.", valueName: "id|file"))
    var pin: [String] = []

    @Option(name: .long, help: ArgumentHelp("A file of revoked key ids, one a line (# comments).", valueName: "file"))
    var revoked: String?

    @Option(name: .long, help: ArgumentHelp("Require the signer's key to come from this channel of a --trust-dir.", valueName: "name"))
    var channel: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A root certificate: the package's signer certificate must chain to one of these (with its intermediates); repeatable.",
            valueName: "root.der"))
    var ca: [String] = []

    @Flag(name: .customLong("allow-expired-cert"), help: "Accept certificate chains that have expired (device keys outlive certificates).")
    var allowExpiredCertificate = false

    @Option(
        name: .customLong("expect-subject"),
        help: ArgumentHelp("Require the signer certificate's subject to contain these RDNs, e.g. \"CN=Release signer\".", valueName: "dn"))
    var expectSubject: String?

    @Option(name: .customLong("trust-salt-file"), help: ArgumentHelp("The salt a --trust-dir was sealed with.", valueName: "file"))
    var trustSaltFile: String?

    @Option(
        name: .customLong("trust-seal-key"),
        help: ArgumentHelp("Require each --trust-dir to be sealed, with the seal signed by this key (kept outside the directory).", valueName: "pub"))
    var trustSealKey: [String] = []

    @Option(
        name: .customLong("clock-skew"), parsing: .unconditional,
        help: ArgumentHelp("Seconds of clock difference tolerated for expiry (0 to 86400, default 300).", valueName: "seconds"))
    var clockSkew: Int64 = 300

    @Flag(name: .customLong("allow-weak-key"), help: "Accept trusted RSA keys below 2048 bits (not recommended).")
    var allowWeakKey = false

    @Flag(
        name: .customLong("allow-halted-release"),
        help: "With --tuf-metadata: accept a release whose rollout its publisher halted (dangerous: it was stopped for a reason).")
    var allowHaltedRelease = false

    func validate() throws {
        for id in pin { _ = try PinArgument.parse(id, option: "--pin") }
        // More than a day of tolerance makes expiry (the protection against a freeze) meaningless.
        if clockSkew < 0 { throw ValidationError("--clock-skew takes seconds from 0 up, not \(clockSkew)") }
        if clockSkew > 86_400 {
            throw ValidationError("--clock-skew takes at most 86400 seconds (a day), not \(clockSkew): more would let an expired package or index through")
        }
        if let expectSubject, !TrustPolicy.isValidSubject(expectSubject) {
            throw ValidationError("--expect-subject takes comma-separated TYPE=VALUE pairs such as 'CN=Release signer, O=Example', not '\(expectSubject)'")
        }
        if (allowExpiredCertificate || expectSubject != nil) && ca.isEmpty {
            throw ValidationError("--allow-expired-cert and --expect-subject apply to certificate chains: give --ca ROOT")
        }
    }

    /// True when some source of trust was given.
    var hasSources: Bool { !pubkey.isEmpty || !trustDirectory.isEmpty || !ca.isEmpty || tufMetadata != nil }

    /// What to give without a trust source, for where it runs: the metadata folders
    /// this device's update configs name, else the repository's example key when run inside a
    /// checkout, else the publisher's key — never the example key on a device.
    static var missingSources: String {
        var folders: [String] = []
        let directory = "/etc/signet/update.d"
        for name in ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted() where name.hasSuffix(".conf") {
            guard let arguments = try? Update.arguments(fromConfig: directory + "/" + name, overriddenBy: []),
                let at = arguments.firstIndex(of: "--tuf-metadata"), at + 1 < arguments.count
            else { continue }
            folders.append(arguments[at + 1])
        }
        let example =
            !folders.isEmpty
            ? "this device follows a TUF repository: --tuf-metadata \(folders.joined(separator: " or "))"
            : FileManager.default.fileExists(atPath: "keys-example/public_key.der")
                ? "e.g. --pubkey keys-example/public_key.der"
                : "e.g. --pubkey release.der, the publisher's public key; on a device that updates from a TUF repository, --tuf-metadata with its config's tuf-metadata folder"
        return "give a trust source: --pubkey PUB, --trust-dir DIR, --ca ROOT or --tuf-metadata DIR (\(example))"
    }

    /// The salt and seal keys that sealed directories (--trust-dir, --tls-ca DIR) are checked with.
    func seal() throws -> (salt: [UInt8]?, keys: [PublicKey]) {
        try Self.seal(saltFile: trustSaltFile, sealKeys: trustSealKey, allowWeakKey: allowWeakKey)
    }

    /// The salt and seal keys from their options (each held to the rule of files that convey
    /// trust): `update`'s trust options read them the same way.
    static func seal(saltFile: String?, sealKeys: [String], allowWeakKey: Bool) throws -> (salt: [UInt8]?, keys: [PublicKey]) {
        try TrustedInput.check(saltFile.map { [$0] } ?? [], what: "--trust-salt-file")
        try TrustedInput.check(sealKeys, what: "--trust-seal-key")
        let salt = try saltFile.map { try TrustStoreSeal.readSalt(from: $0, option: "--trust-salt-file") }
        let keys = try sealKeys.map { try PublicKey(contentsOf: $0, allowWeakKey: allowWeakKey) }
        return (salt, keys)
    }

    /// - Parameter sealedElsewhere: the seal options also apply to a --tls-ca directory.
    func policy(sealedElsewhere: Bool = false) throws -> TrustPolicy {
        if (!trustSealKey.isEmpty || trustSaltFile != nil) && trustDirectory.isEmpty && !sealedElsewhere {
            throw SignetError(.usage, "--trust-seal-key and --trust-salt-file apply to a --trust-dir (or a --tls-ca directory)")
        }
        // Every file that says whom to trust is first held to TrustedInput's rule.
        try TrustedInput.check(pubkey, what: "--pubkey")
        try TrustedInput.check(trustDirectory, what: "--trust-dir")
        try TrustedInput.check(ca, what: "--ca")
        try TrustedInput.check(revoked.map { [$0] } ?? [], what: "--revoked")
        try TrustedInput.check(pin.filter { KeyID($0) == nil }, what: "--pin")
        var policy = try TrustPolicy(publicKeyFiles: pubkey, allowWeakKeys: allowWeakKey)
        let (salt, sealKeys) = try seal()
        for directory in trustDirectory {
            try policy.addTrustDirectory(directory, allowWeakKeys: allowWeakKey, salt: salt, sealKeys: sealKeys)
        }
        if let tufMetadata { try policy.addTUFMetadata(tufMetadata) }
        policy.allowHaltedReleases = allowHaltedRelease
        policy.pins = Set(try pin.map { try PinArgument.parse($0, option: "--pin") })
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

/// The TLS policy and network behaviour of every command that downloads (FORMAT.md §5).
struct TLSOptions: ParsableArguments {
    @Option(
        name: .customLong("tls-ca"),
        help: ArgumentHelp(
            "Trust only these root CAs for the server (a PEM or DER file, or a directory of them; a sealed directory is checked with --trust-salt-file/--trust-seal-key); repeatable. Default: the system's CA store.",
            valueName: "file|dir"))
    var tlsCA: [String] = []

    @Option(
        name: .customLong("tls-pin"),
        help: ArgumentHelp(
            "Require a certificate in the server's verified chain (leaf, intermediate or root) with this public key hash: sha256//BASE64, 64 hex characters, or a certificate or public key file (as curl's --pinnedpubkey); repeat it for backup pins.",
            valueName: "pin|file"))
    var tlsPin: [String] = []

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp("Require the server's certificate to be this one, byte for byte; repeatable.", valueName: "file"))
    var tlsCert: [String] = []

    @Flag(name: .customLong("allow-http"), help: "Allow plain http:// (a warning; no TLS options with it). For test servers only.")
    var allowHTTP = false

    @Option(
        name: .customLong("max-download-size"), parsing: .unconditional,
        help: ArgumentHelp("Most bytes a download may have (default 16 GiB).", valueName: "bytes"))
    var maxDownloadSize: UInt64 = DownloadOptions().maxSize

    @Option(
        name: .customLong("connect-timeout"), parsing: .unconditional,
        help: ArgumentHelp("Seconds to wait for a connection (default 30).", valueName: "seconds"))
    var connectTimeout: Int = DownloadOptions().connectTimeout

    @Option(
        name: .customLong("low-speed-time"), parsing: .unconditional,
        help: ArgumentHelp("Give up after this many seconds below 1 KiB/s (default 60).", valueName: "seconds"))
    var lowSpeedTime: Int = DownloadOptions().lowSpeedTime

    @Option(
        name: .customLong("max-time"), parsing: .unconditional,
        help: ArgumentHelp(
            "Seconds the whole download may take, retries included (default 86400; keep it below the unit's TimeoutStartSec=1h under systemd); what arrived is kept.",
            valueName: "seconds"))
    var maxTime: Double = DownloadOptions().maxTime

    @Option(
        name: .long, parsing: .unconditional,
        help: ArgumentHelp("Further attempts after a transient failure: reset, time-out, HTTP 5xx (default 3).", valueName: "n"))
    var retries: Int = DownloadOptions().retries

    @Option(
        name: .customLong("retry-delay"), parsing: .unconditional,
        help: ArgumentHelp("Seconds before the first retry, doubled for each next one (default 1).", valueName: "seconds"))
    var retryDelay: Double = DownloadOptions().retryDelay

    func validate() throws {
        for pin in tlsPin { _ = try PinArgument.parse(pin, option: "--tls-pin") }
        if allowHTTP && (!tlsCA.isEmpty || !tlsPin.isEmpty || !tlsCert.isEmpty) {
            // Set by a config file, the option is not on the command line: say where it is and how to leave it out.
            let typed = Set(Update.commandLine())
            let fromConfig = ["tls-ca": tlsCA, "tls-pin": tlsPin, "tls-cert": tlsCert].filter { !$0.value.isEmpty && !typed.contains("--" + $0.key) }.keys
                .sorted()
            let hint =
                typed.contains("--config") && !fromConfig.isEmpty
                ? " (\(fromConfig.joined(separator: ", ")) set by --config FILE: add \(fromConfig.map { "--unset \($0)" }.joined(separator: " ")) for this run)"
                : ""
            throw ValidationError("--allow-http cannot be combined with --tls-ca, --tls-pin or --tls-cert: plain http has no certificate to check\(hint)")
        }
        if maxDownloadSize < 1 { throw ValidationError("--max-download-size must be at least 1 byte, not \(maxDownloadSize)") }
        if !(1...3600).contains(connectTimeout) { throw ValidationError("--connect-timeout takes 1 to 3600 seconds, not \(connectTimeout)") }
        if !(1...3600).contains(lowSpeedTime) { throw ValidationError("--low-speed-time takes 1 to 3600 seconds, not \(lowSpeedTime)") }
        if !(1...2_592_000).contains(maxTime) { throw ValidationError("--max-time takes 1 to 2592000 seconds (30 days), not \(maxTime)") }
        if !(0...100).contains(retries) { throw ValidationError("--retries takes 0 to 100, not \(retries)") }
        if !(0...60).contains(retryDelay) { throw ValidationError("--retry-delay takes 0 to 60 seconds, not \(retryDelay)") }
    }

    /// The download options, with the roots read (and sealed directories checked).
    func options(trust: TrustOptions) throws -> DownloadOptions {
        try options(seal: trust.seal())
    }

    /// The same, for `update`, whose trust options are its own.
    func options(trust: UpdateTrustOptions) throws -> DownloadOptions {
        try options(seal: trust.seal())
    }

    /// The download options with the seal of --tls-ca directories.
    private func options(seal: (salt: [UInt8]?, keys: [PublicKey])) throws -> DownloadOptions {
        var options = DownloadOptions()
        var tls = TLSPolicy()
        try TrustedInput.check(tlsCA, what: "--tls-ca")
        try TrustedInput.check(tlsCert, what: "--tls-cert")
        try TrustedInput.check(tlsPin.filter { KeyID($0) == nil && !$0.hasPrefix("sha256//") }, what: "--tls-pin")
        let (salt, keys) = seal
        for path in tlsCA { try tls.addRoots(from: path, salt: salt, sealKeys: keys) }
        for path in tlsCert { try tls.addCertificate(from: path) }
        tls.pins = try tlsPin.map { try PinArgument.parse($0, option: "--tls-pin") }
        tls.allowHTTP = allowHTTP
        options.tls = tls
        options.maxSize = maxDownloadSize
        options.connectTimeout = connectTimeout
        options.lowSpeedTime = lowSpeedTime
        options.maxTime = maxTime
        options.retries = retries
        options.retryDelay = retryDelay
        return options
    }

    /// Whether the seal options apply to a --tls-ca directory here.
    var sealsDirectories: Bool { !tlsCA.isEmpty }

    /// Warns about plain http.
    func warnIfInsecure(_ url: String) {
        if allowHTTP && url.lowercased().hasPrefix("http://") {
            Output.warn("downloading '\(url)' over plain http: anyone on the way can read it or change it (only the package's own signature protects it)")
        }
    }
}

/// The limits an untrusted package is held to. unpack and inspect refuse a package beyond them
/// before reading it; pack refuses to make one, so that what pack makes, unpack installs.
struct LimitOptions: ParsableArguments {
    @Option(name: .customLong("max-files"), parsing: .unconditional, help: "Most files (and directory entries) a package may hold.")
    var maxFiles = PackageLimits().maxFiles

    @Option(name: .customLong("max-total-size"), parsing: .unconditional, help: ArgumentHelp("Most bytes all files may add up to.", valueName: "bytes"))
    var maxTotalSize: UInt64 = PackageLimits().maxTotalSize

    @Option(name: .customLong("max-ratio"), parsing: .unconditional, help: "Largest expansion ratio of one compressed entry (deflate bombs).")
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

/// A pin as the user may write it (FORMAT.md §1): the 64-hex key id (either case),
/// `sha256//BASE64`, or a public key or certificate file whose key is meant (as curl's
/// `--pinnedpubkey` takes a file). A short id, the 16 hex characters outputs show, is refused
/// with how to print the full one.
enum PinArgument {
    static func parse(_ text: String, option: String) throws -> KeyID {
        if let id = KeyID(text) { return id }
        let hex = text.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) || ("A"..."F").contains($0) }
        var info = stat()
        if !text.isEmpty, lstat(text, &info) == 0 {
            return try PublicKey(contentsOf: text, allowWeakKey: true).keyID
        }
        if hex, !text.isEmpty, text.count < 64 {
            throw ValidationError(
                "\(option) '\(text)' is \(text.count == 16 ? "the short key id outputs show" : "too short"); a pin needs the full key id (64 hex characters) or sha256//BASE64: signet key show KEY prints both (its 'key id' and 'pin' lines), or give the key or certificate file itself"
            )
        }
        throw ValidationError(
            "\(option) takes a key id (64 hex characters), sha256//BASE64 (the SubjectPublicKeyInfo's SHA-256), or a public key or certificate file; '\(text)' is none of them"
        )
    }
}
