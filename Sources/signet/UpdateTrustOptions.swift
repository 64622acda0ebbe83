import ArgumentParser
import Signet

/// `update`'s trust options: the device's trusted TUF metadata and the repository's channel.
/// The package keys come from that metadata (the role that lists the release), so the options
/// other commands take for keys (`--pubkey`, `--trust-dir`, `--ca`, `--pin`, `--revoked`,
/// `--expect-subject`, `--allow-expired-cert`, `--clock-skew`) are not listed in its help and
/// are refused by name (exit 2) rather than ignored: each implies a protection update would not
/// apply.
struct UpdateTrustOptions: ParsableArguments {
    @Option(
        name: .customLong("tuf-metadata"),
        help: ArgumentHelp(
            "The device's trusted TUF metadata folder (made once with signet tuf init --metadata-dir DIR root.json; kept current by every run): it names who may sign which package.",
            valueName: "dir"))
    var tufMetadata: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The repository's channel this device follows (a name in its targets' custom.signet.channels, as repo add --channel gave it).", valueName: "name"))
    var channel: String?

    @Option(
        name: .customLong("trust-seal-key"),
        help: ArgumentHelp("Require each --tls-ca directory to be sealed, with the seal signed by this key (kept outside the directory).", valueName: "pub"))
    var trustSealKey: [String] = []

    @Option(name: .customLong("trust-salt-file"), help: ArgumentHelp("The salt a --tls-ca directory was sealed with.", valueName: "file"))
    var trustSaltFile: String?

    @Flag(name: .customLong("allow-weak-key"), help: "Accept a --trust-seal-key RSA key below 2048 bits (not recommended).")
    var allowWeakKey = false

    // Other commands' trust options: refused by name, never silently ignored.
    @Option(name: .long, help: .hidden) var pubkey: [String] = []
    @Option(name: .customLong("trust-dir"), help: .hidden) var trustDirectory: [String] = []
    @Option(name: .long, help: .hidden) var ca: [String] = []
    @Option(name: .long, help: .hidden) var pin: [String] = []
    @Option(name: .long, help: .hidden) var revoked: String?
    @Option(name: .customLong("expect-subject"), help: .hidden) var expectSubject: String?
    @Flag(name: .customLong("allow-expired-cert"), help: .hidden) var allowExpiredCertificate = false
    @Option(name: .customLong("clock-skew"), help: .hidden) var clockSkew: String?

    /// The options above that update refuses by name.
    static let refusedOptions = ["--pubkey", "--trust-dir", "--ca", "--pin", "--revoked", "--expect-subject", "--allow-expired-cert", "--clock-skew"]

    func validate() throws {
        let given = [
            ("--pubkey", !pubkey.isEmpty), ("--trust-dir", !trustDirectory.isEmpty), ("--ca", !ca.isEmpty), ("--pin", !pin.isEmpty),
            ("--revoked", revoked != nil), ("--expect-subject", expectSubject != nil), ("--allow-expired-cert", allowExpiredCertificate),
            ("--clock-skew", clockSkew != nil)
        ].filter(\.1).map(\.0)
        if !given.isEmpty {
            throw ValidationError(
                "update takes the package keys, and who may sign which package, from the repository's trusted metadata (--tuf-metadata, the role that lists the release): leave out \(given.joined(separator: ", ")) (options of unpack and verify)"
            )
        }
    }

    /// The seal of --tls-ca directories.
    func seal() throws -> (salt: [UInt8]?, keys: [PublicKey]) {
        try TrustOptions.seal(saltFile: trustSaltFile, sealKeys: trustSealKey, allowWeakKey: allowWeakKey)
    }
}
